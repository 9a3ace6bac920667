"""GradSkip explanations for Vision Transformers (timm, torchvision, HF transformers: ViT, DeiT,
DINOv2, BEiT, Swin) and HF SegFormer segmentation models, logged from a Lightning callback."""

# ruff: noqa: I001 - the model families register themselves on import, in this order, before anything looks one up.
from gradskip_lightning.explainer import Explainer
from gradskip_lightning.segmentation import explainer as _segformer_family  # noqa: F401
from gradskip_lightning import hf_vit as _hf_vit_family  # noqa: F401
from gradskip_lightning.swin import explainer as _swin_family  # noqa: F401
from gradskip_lightning.callback import DiscoveryStage, GradSkipCallback, ProbeSettings, RenderSettings, ScoreSettings
from gradskip_lightning.explanation import Explanation, ModelExplainer
from gradskip_lightning.families import explainer_for, register_family

__all__ = [
    "DiscoveryStage",
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
