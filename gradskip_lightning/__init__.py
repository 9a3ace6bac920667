"""GradSkip explanations for Vision Transformers (timm, torchvision, HF transformers: ViT, DeiT,
DINOv2, BEiT, Swin) and HF SegFormer segmentation models, logged from a Lightning callback."""

from gradskip_lightning.callbacks import GradSkipCallback, ShortcutCorrection
from gradskip_lightning.core.explanation import Explanation, ModelExplainer, UnsupportedModel
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.engine import (
    DiscoveryStage,
    MethodSettings,
    ProbeImages,
    ProbeSettings,
    RenderSettings,
    ScoreSettings,
)
from gradskip_lightning.families import FAMILIES, explainer_for
from gradskip_lightning.shortcuts import SpuriousTag

#: The package's version, the one source (pyproject.toml reads it for the distribution's metadata).
__version__ = "0.1.0"

__all__ = [
    "FAMILIES",
    "DiscoveryStage",
    "Explanation",
    "GradSkipCallback",
    "MethodSettings",
    "ModelExplainer",
    "Normalisation",
    "ProbeImages",
    "ProbeSettings",
    "RenderSettings",
    "ScoreSettings",
    "ShortcutCorrection",
    "SpuriousTag",
    "UnsupportedModel",
    "explainer_for",
]
