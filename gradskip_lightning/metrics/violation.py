"""Faithfulness Violation Test (Liu et al., ICML 2022) on patches."""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor
from torchmetrics import Metric

from gradskip_lightning.validation import check_images_targets_maps

from .perturbation import (
    Activation,
    Baseline,
    check_activation,
    check_regions,
    make_baseline,
    patch_relevance,
    perturbed_probabilities,
    rank_patches,
    ranked_masks,
    resolve_patch_size,
)


def faithfulness_violation(
    model: Callable[[Tensor], Tensor],
    images: Tensor,
    targets: Tensor,
    maps: Tensor,
    *,
    patch_size: int | tuple[int, int] | None = None,
    top_k: int = 1,
    baseline: Baseline = "zeros",
    batch_size: int = 256,
    activation: Activation = "softmax",
    regions: Tensor | None = None,
) -> Tensor:
    """Per-image violations (B,) bool.

    The ``top_k`` patches with the largest |relevance| (sum of the map over the patch) are removed
    together (replaced by ``baseline``); relevance is their summed relevance and
    delta = p(target | image) - p(target | perturbed), with p the softmax probability (or the
    target's sigmoid probability with ``activation="sigmoid"``, for multi-label models; the mean of
    the target's logit over ``regions`` for a segmentation model, so delta is in logits). A violation
    is relevance * delta < 0: the sign of the attribution disagrees with the effect of removal.
    The 2 * B images go through ``model`` in chunks of ``batch_size`` under no_grad.

    Args:
        model, images, targets, maps, patch_size, batch_size: as in :func:`insertion_deletion`.
        top_k: patches removed together (1 = the original test).
        baseline: "zeros", "blur" or a tensor broadcastable to the images.
        activation: "softmax" (multi-class) or "sigmoid" (multi-label); unused with ``regions``.
        regions: None (classifier), or bool (B, h, w) on the segmentation model's logits grid,
            as in :func:`insertion_deletion`.
    """
    check_images_targets_maps(images, targets, maps)
    check_regions(regions, len(images))
    patch = resolve_patch_size(model, patch_size, tuple(images.shape[-2:]))
    grid = (images.shape[-2] // patch[0], images.shape[-1] // patch[1])
    relevance = patch_relevance(maps, patch)
    if not 1 <= top_k <= relevance.shape[1]:
        raise ValueError(f"top_k must be in [1, {relevance.shape[1]}] patches, got {top_k}")
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
    ).double()
    delta = scores[:, 0] - scores[:, 1]
    return removed_relevance.to(delta.device) * delta < 0


class FaithfulnessViolation(Metric):
    """Violation ratio (lower is better) over all updates, DDP-synchronised.

    The model (and, for a segmentation model, ``regions``) is passed to ``update``, as in
    :class:`InsertionDeletion`; options are those of
    :func:`faithfulness_violation`. ``compute()`` returns a scalar in [0, 1].
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(
        self,
        *,
        patch_size: int | tuple[int, int] | None = None,
        top_k: int = 1,
        baseline: Baseline = "zeros",
        batch_size: int = 256,
        activation: Activation = "softmax",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        check_activation(activation)
        self.options = dict(
            patch_size=patch_size, top_k=top_k, baseline=baseline, batch_size=batch_size, activation=activation
        )
        self.add_state("violations", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(
        self,
        model: Callable[[Tensor], Tensor],
        images: Tensor,
        targets: Tensor,
        maps: Tensor,
        regions: Tensor | None = None,
    ) -> None:
        """Test a batch: images (B, C, H, W), targets (B,), maps (B, H, W), regions None or (B, h, w) bool."""
        violations = faithfulness_violation(model, images, targets, maps, regions=regions, **self.options)
        self.violations += violations.sum().to(self.violations)
        self.count += len(images)

    def compute(self) -> Tensor:
        """Fraction of images whose attribution sign disagreed with the removal effect."""
        return self.violations.double() / self.count
