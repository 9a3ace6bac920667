"""The timm Swin family: the window layout and the pass (:mod:`.adapter`), the windowed methods
(:mod:`.propagation`) and :class:`SwinExplainer`."""

from gradskip_lightning.families.swin.adapter import BlockWindows, SwinAdapter, SwinLayout
from gradskip_lightning.families.swin.explainer import FAMILY, SwinExplainer
from gradskip_lightning.families.swin.propagation import SWIN_METHODS, SwinMethod, window_block_step

__all__ = [
    "FAMILY",
    "SWIN_METHODS",
    "BlockWindows",
    "SwinAdapter",
    "SwinExplainer",
    "SwinLayout",
    "SwinMethod",
    "window_block_step",
]
