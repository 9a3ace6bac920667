"""GradSkip explanations for timm Vision Transformers, logged from a Lightning callback."""

from gradskip_lightning.callback import GradSkipCallback

__all__ = ["GradSkipCallback"]
