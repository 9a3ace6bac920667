"""TorchvisionViTExplainer: GradSkip and the baselines for torchvision's ``VisionTransformer``
(vit_b_16, vit_l_32, ...), through the streamed pass with explicit attention for the call
(:mod:`.adapter`).

Example:
    >>> import torch
    >>> from torchvision.models import VisionTransformer
    >>> vit = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
    ...                         num_classes=3).eval()
    >>> TorchvisionViTExplainer(vit).explain(torch.randn(2, 3, 32, 32)).token_maps.shape
    torch.Size([2, 4, 4])
"""

from __future__ import annotations

from typing import ClassVar

from torch import nn
from torchvision.models.vision_transformer import VisionTransformer

from gradskip_lightning.core.family import Family
from gradskip_lightning.core.pass_explainer import PassExplainer
from gradskip_lightning.families.torchvision_vit.adapter import TorchvisionViTAdapter
from gradskip_lightning.methods import PASS_METHODS, MethodName

__all__ = ["FAMILY", "TorchvisionViTExplainer"]


class TorchvisionViTExplainer(PassExplainer):
    """Explain a torchvision ViT classifier's decisions with GradSkip or a baseline (see
    :class:`~gradskip_lightning.core.pass_explainer.PassExplainer` for the arguments)."""

    family: ClassVar[str] = "torchvision_vit"
    method_specs = PASS_METHODS
    methods: ClassVar[tuple[str, ...]] = PASS_METHODS.names

    def _adapter_of(self, model: nn.Module) -> TorchvisionViTAdapter:
        return TorchvisionViTAdapter(FAMILY.find(model))


FAMILY = Family(
    explainer=TorchvisionViTExplainer,
    is_network=lambda module: type(module) is VisionTransformer,
    describe="torchvision VisionTransformer",
    method_names=MethodName,
)
