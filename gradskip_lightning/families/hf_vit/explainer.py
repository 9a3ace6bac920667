"""HFViTExplainer: GradSkip and the baselines for HF ``transformers`` ViT, DeiT, DINOv2 and BEiT
classifiers, through the streamed pass (:mod:`.adapter`).

Example:
    >>> import torch
    >>> from transformers import ViTConfig, ViTForImageClassification
    >>> config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
    ...                    image_size=32, patch_size=8, num_labels=3)
    >>> explainer = HFViTExplainer(ViTForImageClassification(config).eval(), "gradskip")
    >>> explanation = explainer.explain(torch.randn(2, 3, 32, 32))
    >>> explainer.family, explanation.token_maps.shape, explanation.logits.shape
    ('hf_vit', torch.Size([2, 4, 4]), torch.Size([2, 3]))
"""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from gradskip_lightning.core.family import Family
from gradskip_lightning.core.pass_explainer import PassExplainer
from gradskip_lightning.families.hf_vit.adapter import HF_MODELS, HFViTAdapter, LogitsOf, is_hf_vit
from gradskip_lightning.methods import PASS_METHODS, MethodName

__all__ = ["FAMILY", "HFViTExplainer"]


class HFViTExplainer(PassExplainer):
    """Explain an HF ``transformers`` ViT classifier's decisions with GradSkip or a baseline.

    Args:
        model: a class of :data:`HF_MODELS` with its head (its forward's ``.logits`` are read), or a
            module holding exactly one whose forward returns the logits (B, K) (a LightningModule with
            an external head on a base model).
        method: one of :data:`~gradskip_lightning.methods.PASS_METHODS`.
        **options: the method's options (as for :class:`~gradskip_lightning.families.timm_vit.TimmViTExplainer`).

    Attributes:
        model: what is run and what the perturbation metrics call: ``model``, or a :class:`LogitsOf`
            around it when it is the HF classifier itself.

    Raises:
        UnsupportedModel (a TypeError): no supported model, several, or a base model passed alone.
        ValueError: unknown method or option.
    """

    family: ClassVar[str] = "hf_vit"
    method_specs = PASS_METHODS
    methods: ClassVar[tuple[str, ...]] = PASS_METHODS.names

    def _adapter_of(self, model: nn.Module) -> HFViTAdapter:
        return HFViTAdapter(FAMILY.find(model))

    def _logits_module(self, model: nn.Module) -> nn.Module:
        """A bare HF classifier returns an output object: :class:`LogitsOf` gives its logits."""
        return LogitsOf(model) if self.adapter.backbone is model else model


FAMILY = Family(
    explainer=HFViTExplainer,
    is_network=is_hf_vit,
    describe="HF transformers ViTs (" + ", ".join(HF_MODELS) + ")",
    method_names=MethodName,
)
