"""Insertion and Deletion AUC (Petsiuk et al. 2018, RISE) on patches."""

from __future__ import annotations

from typing import Any, Callable, ClassVar

import torch
from torch import Tensor

from gradskip_lightning.validation import as_patch_size, check_images_targets_maps, check_int, check_regions

from .perturbation import (
    Activation,
    Baseline,
    PatchSize,
    PerturbationMetric,
    gaussian_blur,
    make_baseline,
    patch_relevance,
    perturbed_probabilities,
    rank_patches,
    ranked_masks,
    step_counts,
)


def insertion_deletion(
    model: Callable[[Tensor], Tensor],
    images: Tensor,
    targets: Tensor,
    maps: Tensor,
    *,
    patch_size: PatchSize,
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
        patch_size: pixels per patch, an int or (ph, pw) dividing (H, W): the explainer's
            ``patch_size`` (required; TypeError when missing).
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
    patch = as_patch_size(patch_size, (images.shape[-2], images.shape[-1]))
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


class InsertionDeletion(PerturbationMetric):
    """Mean insertion AUC, deletion AUC and their difference over all updates (DDP-synchronised).

    ``update(model, images, targets, maps, regions=None)`` as in :class:`PerturbationMetric`;
    options are those of :func:`insertion_deletion`.

    Example:
        >>> from torch import nn
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 4)).eval()
        >>> metric = InsertionDeletion(patch_size=8, steps=4)
        >>> metric.update(model, torch.randn(2, 3, 16, 16), torch.tensor([0, 3]), torch.rand(2, 16, 16))
        >>> sorted(metric.compute())
        ['deletion', 'insertion', 'insertion_minus_deletion']
    """

    sums: ClassVar[dict[str, torch.dtype]] = {"insertion_sum": torch.float64, "deletion_sum": torch.float64}

    def __init__(
        self,
        *,
        patch_size: PatchSize,
        steps: int = 16,
        deletion_baseline: Baseline = "zeros",
        batch_size: int = 256,
        activation: Activation = "softmax",
        **kwargs: Any,
    ) -> None:
        check_int(steps, "steps")
        super().__init__(
            patch_size=patch_size,
            batch_size=batch_size,
            activation=activation,
            options=dict(steps=steps, deletion_baseline=deletion_baseline),
            **kwargs,
        )

    def _scores(
        self, model: Callable[[Tensor], Tensor], images: Tensor, targets: Tensor, maps: Tensor, regions: Tensor | None
    ) -> dict[str, Tensor]:
        scores = insertion_deletion(model, images, targets, maps, regions=regions, **self.options)
        return {"insertion_sum": scores["insertion"], "deletion_sum": scores["deletion"]}

    def compute(self) -> dict[str, Tensor]:
        """Means over all images seen: ``insertion``, ``deletion``, ``insertion_minus_deletion``."""
        insertion, deletion = self._mean("insertion_sum"), self._mean("deletion_sum")
        return {"insertion": insertion, "deletion": deletion, "insertion_minus_deletion": insertion - deletion}
