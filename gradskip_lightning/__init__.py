"""GradSkip explanations for timm Vision Transformers (and HF SegFormer segmentation models),
logged from a Lightning callback."""

# The built-in model families register themselves on import: first, so that every later lookup sees them.
from gradskip_lightning.callback import GradSkipCallback, ProbeSettings, RenderSettings, ScoreSettings  # noqa: I001
from gradskip_lightning.explainer import Explainer
from gradskip_lightning.explanation import Explanation, ModelExplainer
from gradskip_lightning.families import explainer_for, register_family
from gradskip_lightning.segmentation import explainer as _segformer_family  # noqa: F401
from gradskip_lightning import hf_vit as _hf_vit_family  # noqa: F401
from gradskip_lightning.swin import explainer as _swin_family  # noqa: F401

__all__ = [
    "Explainer",
    "Explanation",
    "GradSkipCallback",
    "ModelExplainer",
    "ProbeSettings",
    "RenderSettings",
    "ScoreSettings",
    "explainer_for",
    "register_family",
]
