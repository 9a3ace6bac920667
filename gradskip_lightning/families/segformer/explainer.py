"""SegFormerExplainer: GradSkip and the baselines for a SegFormer, behind the
:class:`~gradskip_lightning.core.explanation.ModelExplainer` interface (so the callback and the
metrics treat it as any other family).

One capture (a forward and an activation-only backward), one propagation, maps over the pixels.

Example:
    >>> import torch
    >>> from transformers import SegformerConfig, SegformerForSemanticSegmentation
    >>> config = SegformerConfig(hidden_sizes=[8, 8, 16, 16], num_attention_heads=[1, 1, 2, 2],
    ...                          depths=[1, 1, 1, 1], decoder_hidden_size=16, num_labels=3)
    >>> explainer = SegFormerExplainer(SegformerForSemanticSegmentation(config).eval())
    >>> out = explainer.explain(torch.randn(2, 3, 64, 64), torch.tensor([0, 2]))
    >>> out.maps.shape, out.token_maps.shape, out.dense_logits.shape, out.logits.shape
    (torch.Size([2, 64, 64]), torch.Size([2, 16, 16]), torch.Size([2, 3, 16, 16]), torch.Size([2, 3]))
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor, nn

from gradskip_lightning.core.explanation import ExplainerBase, Explanation, Task, relevance_maps
from gradskip_lightning.core.family import Family
from gradskip_lightning.core.validation import check_image_batch
from gradskip_lightning.families.segformer.capture import SEGFORMER, capture_segmentation, find_segformer, is_segformer
from gradskip_lightning.families.segformer.propagation import SEGFORMER_METHODS, SegFormerMethod
from gradskip_lightning.methods.gradskip import padded_internals

__all__ = ["FAMILY", "SegFormerExplainer", "SegmentationExplanation"]


@dataclass
class SegmentationExplanation(Explanation):
    """An :class:`~gradskip_lightning.core.explanation.Explanation` of (class, region) targets.

    ``logits`` (B, K) are the mean logits over each image's ``region`` (B, h, w), so ``predictions`` and
    ``probabilities`` say what the model predicts there. ``token_maps`` (B, h, w) lie on the
    stage-0 grid (the logits grid), ``maps`` (B, H, W) are them bilinearly upsampled. GradSkip's
    ``head_weights``, ``grad_flow``, ``sparsity`` (B, L, H_max) and ``gates`` (B, L, N_max) are
    NaN-padded: stages differ in heads and tokens.

    Attributes:
        dense_logits: (B, K, h, w) the model's logits.
        region_found: (B,) False where the default region (positions predicted as the class) was
            empty and the whole grid was explained instead.
    """

    dense_logits: Tensor | None = None
    region_found: Tensor | None = None


class SegFormerExplainer(ExplainerBase):
    """Explain a SegFormer's (class, region) decisions with GradSkip or a baseline.

    Args:
        model: an HF ``SegformerForSemanticSegmentation``, or a module holding exactly one whose
            forward maps images to logits (B, K, H/4, W/4) (e.g.
            :class:`~gradskip_lightning.training.SegmentationModule`).
        method: a :data:`~gradskip_lightning.families.segformer.propagation.SegFormerMethod`.
        **options: the fields of the method's options dataclass (GradSkip:
            :class:`~gradskip_lightning.methods.GradSkipOptions`; random: ``seed``).

    Raises:
        UnsupportedModel (a TypeError): no SegFormer in ``model``, or several. ValueError: unknown method or
            option.
    """

    family: ClassVar[str] = "segformer"
    task: ClassVar[Task] = "segmentation"
    methods: ClassVar[tuple[str, ...]] = SEGFORMER_METHODS.names
    num_prefix_tokens = 0

    def __init__(self, model: nn.Module, method: str = "gradskip", **options: Any) -> None:
        self.check_model(model)
        self.model = model
        self.segformer = find_segformer(model)
        self.method = method
        self.spec = SEGFORMER_METHODS[method]
        self.options = self.spec.make_options(method, **options)

    @property
    def config(self) -> Any:
        """The SegFormer's ``transformers`` config."""
        return self.segformer.config

    @property
    def img_size(self) -> None:
        """None: the model takes any size whose sides are multiples of :attr:`size_multiple`."""
        return None

    @property
    def in_chans(self) -> int:
        return self.config.num_channels

    @property
    def num_classes(self) -> int:
        return self.config.num_labels

    @property
    def patch_size(self) -> tuple[int, int]:
        """Pixels per stage-0 token, (4, 4) for the usual configs: the perturbation metrics' patch."""
        return (self.config.strides[0], self.config.strides[0])

    @property
    def size_multiple(self) -> int:
        """Image sides must be multiples of this: every stage's grid divided by its key reduction.

        32 for the MiT configs (stride 4 then 2, 2, 2; reductions 8, 4, 2, 1).
        """
        stride, multiple = 1, 1
        for s, reduction in zip(self.config.strides, self.config.sr_ratios):
            stride *= s
            multiple = max(multiple, stride * reduction)
        return multiple

    def check_images(self, images: Tensor) -> None:
        """Raise ValueError unless ``images`` is a finite float (B, C, H, W) batch whose sides are
        multiples of :attr:`size_multiple`."""
        check_image_batch(images)
        size = self.size_multiple
        if images.shape[1] != self.in_chans or images.shape[2] % size or images.shape[3] % size:
            raise ValueError(
                f"images must be (B, {self.in_chans}, H, W) with H and W multiples of {size} (the SegFormer's "
                f"strides times key reductions); got {tuple(images.shape)}"
            )

    def check_regions(self, regions: Tensor, images: Tensor) -> None:
        """Regions are checked by the capture, against the logits grid the forward returns."""

    def _parameters(self) -> Iterator[nn.Parameter]:
        return self.segformer.parameters()

    def _explain(self, images: Tensor, targets: Tensor | None, regions: Tensor | None) -> SegmentationExplanation:
        """Explain y = sum over the region of logit_c: one capture, one propagation."""
        capture = capture_segmentation(self.model, images, targets, regions)
        relevance = self.spec.step(capture, self.options)
        internals, finite = padded_internals(relevance.steps, images.shape[0])
        maps, token_maps, valid = relevance_maps(relevance.token_map, finite, (images.shape[2], images.shape[3]))
        dense = capture.logits.float()
        region = capture.region
        mean_logits = (dense * region[:, None]).sum(dim=(2, 3)) / region.sum(dim=(1, 2))[:, None]
        return SegmentationExplanation(
            maps=maps,
            token_maps=token_maps,
            targets=capture.targets,
            logits=mean_logits,
            valid=valid,
            method=self.method,
            region=region,
            dense_logits=dense,
            region_found=capture.region_found,
            **internals,
        )


FAMILY = Family(
    explainer=SegFormerExplainer,
    is_network=is_segformer,
    describe=SEGFORMER,
    method_names=SegFormerMethod,
)
