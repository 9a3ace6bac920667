"""GradSkip for timm Swin Transformers: the window layout and the timm pass (adapter), the
windowed methods (propagation) and :class:`~gradskip_lightning.swin.explainer.SwinExplainer`."""

from gradskip_lightning.swin.adapter import BlockWindows, SwinAdapter, SwinLayout, find_swin, holds_swin
from gradskip_lightning.swin.explainer import SwinExplainer
from gradskip_lightning.swin.propagation import SWIN_METHODS, SwinMethod, SwinSpec, swin_spec, window_block_step

__all__ = [
    "SWIN_METHODS",
    "BlockWindows",
    "SwinAdapter",
    "SwinExplainer",
    "SwinLayout",
    "SwinMethod",
    "SwinSpec",
    "find_swin",
    "holds_swin",
    "swin_spec",
    "window_block_step",
]
