"""GradSkip explanations for timm Vision Transformers, logged from a Lightning callback."""

from gradskip_lightning.callback import GradSkipCallback
from gradskip_lightning.explainer import Explainer, Explanation

__all__ = ["Explainer", "Explanation", "GradSkipCallback"]
