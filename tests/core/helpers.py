"""Capture through a model's adapter as its family's explainer does, and the backbone-plus-external-head pattern."""

from __future__ import annotations

import copy

from lightning.pytorch import LightningModule
from torch import Tensor, nn

from gradskip_lightning.core.adapter import PassAdapter
from gradskip_lightning.core.tensors import Capture
from gradskip_lightning.families import explainer_for


def capture(
    model: nn.Module,
    images: Tensor,
    targets: Tensor | None = None,
    with_gradients: bool = True,
    conservative: bool = False,
) -> Capture:
    """``adapter.capture(model, ...)`` with the adapter of ``model``'s family's explainer: the model's
    own forward, hooks on its network."""
    return adapter_of(model).capture(model, images, targets, with_gradients, conservative)


def adapter_of(model: nn.Module) -> PassAdapter:
    """The streamed-pass adapter ``model``'s family explains it with."""
    adapter = getattr(explainer_for(model), "adapter")
    assert isinstance(adapter, PassAdapter)
    return adapter


def hooks_on(model: nn.Module) -> int:
    """Forward, pre-forward and backward hooks left on any submodule."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.modules())


class Classifier(LightningModule):
    """The common fine-tuning pattern: a headless backbone (num_classes=0) and a head outside it."""

    def __init__(self, backbone: nn.Module, head: nn.Module, scale: float = 1.0) -> None:
        super().__init__()
        self.backbone, self.head, self.scale = backbone, head, scale

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.backbone(images * self.scale))


def split_head(model: nn.Module, scale: float = 1.0) -> Classifier:
    """The same weights as ``model``, with its classifier moved outside the backbone."""
    backbone, head = copy.deepcopy(model), copy.deepcopy(model.get_classifier())
    backbone.reset_classifier(0)
    return Classifier(backbone, head, scale).eval()
