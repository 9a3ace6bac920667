"""TimmViTExplainer: GradSkip and the baselines for timm's Vision Transformers, through the
streamed pass of :mod:`gradskip_lightning.core.pass_explainer`.

Example:
    >>> import timm, torch
    >>> model = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=3)
    >>> explanation = TimmViTExplainer(model, method="gradskip", alpha=0.5).explain(torch.randn(2, 3, 32, 32))
    >>> explanation.maps.shape, explanation.token_maps.shape  # relevance at input and patch resolution
    (torch.Size([2, 32, 32]), torch.Size([2, 4, 4]))
"""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from gradskip_lightning.core.explanation import UnsupportedModel
from gradskip_lightning.core.family import Family
from gradskip_lightning.core.pass_explainer import PassExplainer
from gradskip_lightning.families.timm_vit.adapter import TimmViTAdapter
from gradskip_lightning.families.timm_vit.beit import BeitAdapter
from gradskip_lightning.families.timm_vit.eva import EvaAdapter
from gradskip_lightning.families.timm_vit.naflexvit import NaFlexVitAdapter
from gradskip_lightning.families.timm_vit.vision_transformer import VisionTransformerAdapter
from gradskip_lightning.families.timm_vit.vision_transformer_relpos import RelPosAdapter
from gradskip_lightning.methods import PASS_METHODS, MethodName

__all__ = ["ADAPTERS", "ARCHITECTURES", "FAMILY", "TimmViTExplainer", "adapter_for"]

#: The adapter of each timm ViT class explained (exact classes: a subclass may change the forward).
ADAPTERS: tuple[type[TimmViTAdapter], ...] = (
    VisionTransformerAdapter,
    EvaAdapter,
    BeitAdapter,
    RelPosAdapter,
    NaFlexVitAdapter,
)
ARCHITECTURES: dict[type[nn.Module], type[TimmViTAdapter]] = {
    backbone: adapter for adapter in ADAPTERS for backbone in adapter.backbone_types
}


def adapter_for(model: nn.Module) -> TimmViTAdapter:
    """The adapter of the one timm ViT that ``model`` is or holds.

    Raises:
        UnsupportedModel (a TypeError): no timm ViT, several, or an unsupported configuration.

    Example:
        >>> import timm
        >>> vit = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=3)
        >>> adapter = adapter_for(vit)
        >>> adapter.architecture, adapter.grid_size, adapter.num_prefix_tokens, adapter.patch_size
        ('vision_transformer', (4, 4), 1, (8, 8))
    """
    network = FAMILY.find(model)
    try:
        return ARCHITECTURES[type(network)](network)
    except UnsupportedModel as error:
        raise UnsupportedModel(f"{error} Supported: {FAMILY.describe}.") from None


class TimmViTExplainer(PassExplainer):
    """Explain a timm ViT classifier's decisions with GradSkip or a baseline (see
    :class:`~gradskip_lightning.core.pass_explainer.PassExplainer` for the arguments).

    ``**options`` are the fields of the method's options dataclass (for "gradskip"
    :class:`~gradskip_lightning.methods.GradSkipOptions`, for "random" ``seed``).
    """

    family: ClassVar[str] = "timm_vit"
    method_specs = PASS_METHODS
    methods: ClassVar[tuple[str, ...]] = PASS_METHODS.names

    def _adapter_of(self, model: nn.Module) -> TimmViTAdapter:
        return adapter_for(model)


FAMILY = Family(
    explainer=TimmViTExplainer,
    is_network=lambda module: type(module) in ARCHITECTURES,
    describe="timm Vision Transformers (" + ", ".join(sorted({a.architecture for a in ARCHITECTURES.values()})) + ")",
    method_names=MethodName,
)
