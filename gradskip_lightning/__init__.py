"""GradSkip explanations for timm Vision Transformers (and HF SegFormer segmentation models),
logged from a Lightning callback."""

from gradskip_lightning.callback import GradSkipCallback
from gradskip_lightning.explainer import Explainer, Explanation, explainer_for

__all__ = ["Explainer", "Explanation", "GradSkipCallback", "explainer_for"]
