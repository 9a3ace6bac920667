"""SwinExplainer: GradSkip and the baselines for a timm Swin Transformer classifier, through the
streamed pass (:class:`~gradskip_lightning.core.pass_explainer.PassExplainer`) with windowed
methods (:mod:`.propagation`); maps on the stage-0 token grid.

Example:
    >>> import timm, torch
    >>> swin = timm.create_model("swin_tiny_patch4_window7_224", img_size=32, patch_size=2, window_size=4,
    ...                          embed_dim=32, depths=(2, 2), num_heads=(2, 4), num_classes=3).eval()
    >>> explanation = SwinExplainer(swin).explain(torch.randn(2, 3, 32, 32))
    >>> explanation.token_maps.shape, explanation.head_weights.shape  # stage-0 grid; 4 blocks, at most 4 heads
    (torch.Size([2, 16, 16]), torch.Size([2, 4, 4]))
"""

from __future__ import annotations

from typing import ClassVar

from timm.models.swin_transformer import SwinTransformer
from torch import Tensor, nn

from gradskip_lightning.core.explanation import Explanation, relevance_maps
from gradskip_lightning.core.family import Family
from gradskip_lightning.core.pass_explainer import PassExplainer
from gradskip_lightning.families.swin.adapter import SwinAdapter
from gradskip_lightning.families.swin.propagation import SWIN_METHODS, SwinMethod
from gradskip_lightning.methods.gradskip import padded_internals

__all__ = ["FAMILY", "SwinExplainer"]


class SwinExplainer(PassExplainer):
    """Explain a timm ``SwinTransformer`` classifier's decisions with GradSkip or a baseline.

    The token maps lie on the stage-0 grid (image / patch size, the finest the model has);
    :attr:`patch_size` is the patch embedding's. GradSkip's ``head_weights``, ``grad_flow``,
    ``sparsity`` (B, L, H_max) and ``gates`` (B, L, N_max) are NaN-padded: stages differ in heads
    and tokens.

    Args:
        model: a timm ``SwinTransformer`` with its head, or a module holding one whose forward
            returns the logits (B, K) (a LightningModule with an external head on a
            ``num_classes=0`` backbone).
        method: one of :data:`~gradskip_lightning.families.swin.propagation.SWIN_METHODS`.
        **options: the method's options (GradSkip: :class:`~gradskip_lightning.methods.GradSkipOptions`;
            random: ``seed``).

    Raises:
        UnsupportedModel (a TypeError): no Swin, several, an unsupported configuration, or a
            headless Swin passed alone.
        ValueError: unknown method or option.
    """

    family: ClassVar[str] = "timm_swin"
    method_specs = SWIN_METHODS
    methods: ClassVar[tuple[str, ...]] = SWIN_METHODS.names
    adapter: SwinAdapter

    def _adapter_of(self, model: nn.Module) -> SwinAdapter:
        return SwinAdapter(FAMILY.find(model))

    def _explain(self, images: Tensor, targets: Tensor | None, regions: Tensor | None) -> Explanation:
        """One timm pass through the Swin, each block's step on its windows."""
        visitor = self.spec.step(self.options, self.adapter.layout(images.device))
        top = self.adapter.run(self.model, images, targets, visitor)
        self._check_width(top.logits)
        relevance = visitor.relevance().reshape(-1, *self.grid_size)
        internals, finite = padded_internals(visitor.steps, images.shape[0])
        maps, token_maps, valid = relevance_maps(relevance, finite, (images.shape[2], images.shape[3]))
        return Explanation(
            maps=maps,
            token_maps=token_maps,
            targets=top.targets,
            logits=top.logits.float(),
            valid=valid,
            method=self.method,
            **internals,
        )


FAMILY = Family(
    explainer=SwinExplainer,
    is_network=lambda module: type(module) is SwinTransformer,
    describe="timm SwinTransformer (v1: window attention, patch merging, average pooling)",
    method_names=SwinMethod,
)
