"""Insertion and Deletion AUC (Petsiuk et al. 2018, RISE) on patches."""
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
    gaussian_blur,
    make_baseline,
    patch_relevance,
    perturbed_probabilities,
    rank_patches,
    ranked_masks,
    resolve_patch_size,
    step_counts,
)


def insertion_deletion(
    model: Callable[[Tensor], Tensor],
    images: Tensor,
    targets: Tensor,
    maps: Tensor,
    *,
    patch_size: int | tuple[int, int] | None = None,
    steps: int = 16,
    deletion_baseline: Baseline = "zeros",
    batch_size: int = 256,
    activation: Activation = "softmax",
    regions: Tensor | None = None,
) -> dict[str, Tensor]:
    """Per-image insertion and deletion AUC of relevance maps.

    Patches are ranked by the sum of the map over each patch (ties: row-major order). Step k of K
    perturbs the round(k * P / K) most relevant patches: deletion replaces them with the baseline,
    insertion reveals them on a Gaussian-blurred copy. The score is the probability of the target
    class (softmax, or its sigmoid for multi-label models); for a segmentation model (``regions``
    given) it is the mean over the image's region of the target class's logit, so curves and AUCs
    are in logit units, not probabilities in [0, 1]. The AUC is the trapezoid rule over the
    fraction k / K in [0, 1], step 0 included.
    All 2 * B * (K + 1) images go through ``model`` in chunks of ``batch_size`` under no_grad.

    Args:
        model: images -> logits (n, num_classes), or (n, K, h, w) with ``regions``; in eval mode
            (the mode is left as it is).
        images: normalised images (B, C, H, W).
        targets: explained classes (B,).
        maps: relevance (B, H, W) at input resolution, higher = more relevant.
        patch_size: pixels per patch; None reads it from the timm ViT in ``model``.
        steps: K, between 1 and the number of patches.
        deletion_baseline: "zeros" (the mean colour of the normalised input), "blur" or a tensor
            broadcastable to the images.
        batch_size: images per forward call.
        activation: "softmax" (multi-class) or "sigmoid" (multi-label); unused with ``regions``.
        regions: None (classifier), or bool (B, h, w) on the segmentation model's logits grid: the
            object whose mean target logit is scored, at least one pixel per image.

    Returns:
        ``insertion``, ``deletion``, ``insertion_minus_deletion`` (B,) and the curves
        ``insertion_curve``, ``deletion_curve`` (B, K + 1).

    Example:
        >>> from torch import nn
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 4)).eval()
        >>> images, maps = torch.randn(2, 3, 16, 16), torch.rand(2, 16, 16)
        >>> scores = insertion_deletion(model, images, torch.tensor([0, 3]), maps, patch_size=8, steps=4)
        >>> scores["insertion"].shape, scores["deletion_curve"].shape
        (torch.Size([2]), torch.Size([2, 5]))
        >>> bool(((scores["insertion"] >= 0) & (scores["insertion"] <= 1)).all())
        True
    """
    check_images_targets_maps(images, targets, maps)
    check_regions(regions, len(images))
    patch = resolve_patch_size(model, patch_size, tuple(images.shape[-2:]))
    grid = (images.shape[-2] // patch[0], images.shape[-1] // patch[1])
    order = rank_patches(patch_relevance(maps, patch))
    masks = ranked_masks(order, step_counts(order.shape[1], steps)).reshape(len(images), steps + 1, *grid)
    blurred = gaussian_blur(images)
    reuse_blur = isinstance(deletion_baseline, str) and deletion_baseline == "blur"
    deleted = blurred if reuse_blur else make_baseline(images, deletion_baseline)
    scores = perturbed_probabilities(
        model,
        base=torch.cat([images, blurred]),
        fill=torch.cat([deleted, images]),
        masks=torch.cat([masks, masks]),
        targets=torch.cat([targets, targets]),
        batch_size=batch_size,
        activation=activation,
        regions=None if regions is None else torch.cat([regions, regions]),
    )
    deletion_curve, insertion_curve = scores.split(len(images))
    insertion, deletion = trapezoid_auc(insertion_curve), trapezoid_auc(deletion_curve)
    return {
        "insertion": insertion,
        "deletion": deletion,
        "insertion_minus_deletion": insertion - deletion,
        "insertion_curve": insertion_curve,
        "deletion_curve": deletion_curve,
    }


def trapezoid_auc(curve: Tensor) -> Tensor:
    """Area under curves (B, K + 1) sampled at evenly spaced fractions 0, 1/K, ..., 1: (B,)."""
    return torch.trapezoid(curve, dx=1.0 / (curve.shape[1] - 1), dim=1)


class InsertionDeletion(Metric):
    """Mean insertion AUC, deletion AUC and their difference over all updates (DDP-synchronised).

    The model is passed to ``update`` (it is not a state and not a submodule, so the metric never
    moves, saves or syncs it), with ``regions`` for a segmentation model; options are those of
    :func:`insertion_deletion`.

    Example:
        >>> from torch import nn
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 4)).eval()
        >>> metric = InsertionDeletion(patch_size=8, steps=4)
        >>> metric.update(model, torch.randn(2, 3, 16, 16), torch.tensor([0, 3]), torch.rand(2, 16, 16))
        >>> sorted(metric.compute())
        ['deletion', 'insertion', 'insertion_minus_deletion']
    """

    is_differentiable = False
    full_state_update = False

    def __init__(
        self,
        *,
        patch_size: int | tuple[int, int] | None = None,
        steps: int = 16,
        deletion_baseline: Baseline = "zeros",
        batch_size: int = 256,
        activation: Activation = "softmax",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        check_activation(activation)
        self.options = dict(
            patch_size=patch_size,
            steps=steps,
            deletion_baseline=deletion_baseline,
            batch_size=batch_size,
            activation=activation,
        )
        self.add_state("insertion_sum", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("deletion_sum", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(
        self,
        model: Callable[[Tensor], Tensor],
        images: Tensor,
        targets: Tensor,
        maps: Tensor,
        regions: Tensor | None = None,
    ) -> None:
        """Score a batch: images (B, C, H, W), targets (B,), maps (B, H, W), regions None or (B, h, w) bool."""
        scores = insertion_deletion(model, images, targets, maps, regions=regions, **self.options)
        self.insertion_sum += scores["insertion"].sum().to(self.insertion_sum)
        self.deletion_sum += scores["deletion"].sum().to(self.deletion_sum)
        self.count += len(images)

    def compute(self) -> dict[str, Tensor]:
        """Means over all images seen: ``insertion``, ``deletion``, ``insertion_minus_deletion``."""
        insertion, deletion = self.insertion_sum / self.count, self.deletion_sum / self.count
        return {"insertion": insertion, "deletion": deletion, "insertion_minus_deletion": insertion - deletion}
