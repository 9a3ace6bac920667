"""Faithfulness Violation Test (Liu et al., ICML 2022) on patches."""

from __future__ import annotations

from typing import Any, Callable, ClassVar

import torch
from torch import Tensor

from gradskip_lightning.core.validation import as_patch_size, check_images_targets_maps, check_int, check_regions

from .perturbation import (
    Activation,
    Baseline,
    PatchSize,
    PerturbationMetric,
    make_baseline,
    patch_relevance,
    perturbed_probabilities,
    rank_patches,
    ranked_masks,
)


def faithfulness_violation(
    model: Callable[[Tensor], Tensor],
    images: Tensor,
    targets: Tensor,
    maps: Tensor,
    *,
    patch_size: PatchSize,
    top_k: int = 1,
    baseline: Baseline = "zeros",
    batch_size: int | None = None,
    activation: Activation = "softmax",
    regions: Tensor | None = None,
    clean_scores: Tensor | None = None,
) -> Tensor:
    """Per-image violations (B,) bool.

    The ``top_k`` patches with the largest |relevance| (sum of the map over the patch) are removed
    together (replaced by ``baseline``); relevance is their summed relevance and
    delta = p(target | image) - p(target | perturbed), with p the softmax probability (or the
    target's sigmoid probability with ``activation="sigmoid"``, for multi-label models; the mean of
    the target's logit over ``regions`` for a segmentation model, so delta is in logits). A violation
    is relevance * delta < 0: the sign of the attribution disagrees with the effect of removal.
    The 2 * B images go through ``model`` in chunks of ``batch_size`` under no_grad, in full
    precision (under bfloat16 the verdict flipped on up to 3 of 32 probes); the B clean images not
    when their scores are given (``clean_scores``, e.g. from the explain forward).

    Args:
        model: images (B, C, H, W) -> logits, as in :func:`insertion_deletion`.
        images: (B, C, H, W) the clean images.
        targets: (B,) the explained classes.
        maps: (B, H, W) relevance at input resolution.
        patch_size: pixels per patch, an int or (ph, pw) dividing (H, W): the explainer's ``patch_size``.
        batch_size: images per forward call; None: by device.
        top_k: patches removed together (1 = the original test).
        baseline: "zeros", "blur" or a tensor broadcastable to the images.
        activation: "softmax" (multi-class) or "sigmoid" (multi-label); unused with ``regions``.
        regions: None (classifier), or bool (B, h, w) on the segmentation model's logits grid,
            as in :func:`insertion_deletion`.
        clean_scores: None, or the score (B,) of each clean image for its target.
    """
    check_images_targets_maps(images, targets, maps)
    check_regions(regions, len(images))
    patch = as_patch_size(patch_size, (images.shape[-2], images.shape[-1]))
    grid = (images.shape[-2] // patch[0], images.shape[-1] // patch[1])
    relevance = patch_relevance(maps, patch)
    check_int(top_k, "top_k", high=relevance.shape[1], unit=" patches")
    order = rank_patches(relevance.abs())
    removed_relevance = relevance.gather(1, order[:, :top_k]).sum(1)
    masks = ranked_masks(order, torch.tensor([0, top_k])).reshape(len(images), 2, *grid)
    scores = perturbed_probabilities(
        model,
        images,
        make_baseline(images, baseline),
        masks,
        targets,
        batch_size=batch_size,
        activation=activation,
        regions=regions,
        base_scores=clean_scores,
    ).double()
    delta = scores[:, 0] - scores[:, 1]
    return removed_relevance.to(delta.device) * delta < 0


class FaithfulnessViolation(PerturbationMetric):
    """Violation ratio (lower is better) over all updates, DDP-synchronised.

    ``update(model, images, targets, maps, regions=None)`` as in :class:`PerturbationMetric`;
    options are those of :func:`faithfulness_violation`. ``compute()`` returns a scalar in [0, 1].

    Example:
        >>> from torch import nn
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 4)).eval()
        >>> metric = FaithfulnessViolation(patch_size=8, top_k=2)
        >>> metric.update(model, torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 2, 3]), torch.randn(4, 16, 16))
        >>> bool(0 <= metric.compute() <= 1)
        True
    """

    higher_is_better = False
    sums: ClassVar[dict[str, torch.dtype]] = {"violations": torch.long}

    def __init__(
        self,
        *,
        patch_size: PatchSize,
        top_k: int = 1,
        baseline: Baseline = "zeros",
        batch_size: int | None = None,
        activation: Activation = "softmax",
        **kwargs: Any,
    ) -> None:
        check_int(top_k, "top_k")
        super().__init__(
            patch_size=patch_size,
            batch_size=batch_size,
            activation=activation,
            options=dict(top_k=top_k, baseline=baseline),
            **kwargs,
        )

    def _scores(
        self, model: Callable[[Tensor], Tensor], images: Tensor, targets: Tensor, maps: Tensor, regions: Tensor | None
    ) -> dict[str, Tensor]:
        return {"violations": faithfulness_violation(model, images, targets, maps, regions=regions, **self.options)}

    def compute(self) -> Tensor:
        """Fraction of images whose attribution sign disagreed with the removal effect."""
        return self._mean("violations")
