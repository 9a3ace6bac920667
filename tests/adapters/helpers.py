"""Capture through a model's adapter, as the Explainer does."""
from __future__ import annotations

from torch import Tensor, nn

from gradskip_lightning.adapters import Capture, find_adapter


def capture(model: nn.Module, images: Tensor, targets: Tensor | None = None, with_gradients: bool = True) -> Capture:
    """``find_adapter(model).capture(model, ...)``: the model's own forward, hooks on its backbone."""
    return find_adapter(model).capture(model, images, targets, with_gradients)


def hooks_on(model: nn.Module) -> int:
    """Forward, pre-forward and backward hooks left on any submodule."""
    return sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.modules()
    )
