"""GradSkip explanations for timm Vision Transformers (and HF SegFormer segmentation models),
logged from a Lightning callback."""

from gradskip_lightning.callback import DiscoveryStage, GradSkipCallback, ProbeSettings, RenderSettings, ScoreSettings
from gradskip_lightning.explainer import Explainer
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
