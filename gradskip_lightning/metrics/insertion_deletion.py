"""Insertion and Deletion AUC (Petsiuk et al. 2018, RISE) on patches.

Each image's curves share three images with every map of it: the clean image (its score is known from
the explain forward when the caller passes it), the insertion start and the deletion end. They are
computed once per batch (:func:`perturbation_starts`) and only the steps between are forwarded per map.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Union

import torch
from torch import Tensor

from gradskip_lightning.core.validation import (
    as_patch_size,
    check_choice,
    check_images_targets_maps,
    check_int,
    check_regions,
)

from .perturbation import (
    Activation,
    Baseline,
    PatchSize,
    PerturbationMetric,
    Precision,
    forward_logits,
    gaussian_blur,
    make_baseline,
    patch_relevance,
    perturbed_probabilities,
    rank_patches,
    ranked_masks,
    step_counts,
    target_scores,
)

InsertionStart = Union[str, Tensor]
"""What insertion reveals patches on: a name of :data:`INSERTION_STARTS` or a tensor broadcastable to the images."""

#: The named insertion starts (see :func:`insertion_start_images`).
INSERTION_STARTS: tuple[str, ...] = ("blur", "rise", "mean", "zeros")

#: The insertion start by default.
DEFAULT_INSERTION_START = "blur"

#: Sigma of the ``"blur"`` start as a fraction of the image's shorter side (measured in docs/results/faithfulness.md:
#: the target's probability on it 0.19 on planted shapes, chance 0.25; 0.23 on BloodMNIST, chance 0.125).
STRONG_BLUR_SIGMA = 1 / 4


def strong_blur(images: Tensor, sigma_fraction: float = STRONG_BLUR_SIGMA) -> Tensor:
    """Gaussian blur (B, C, H, W) with sigma = ``sigma_fraction`` x the shorter side, kernel 3 sigma each way
    capped below the side (reflect padding).

    At 1/4 the sigma is the planted shapes' object side (8 px at 32 px) and about half a BloodMNIST
    cell: the shapes and textures that decide the class are gone, a colour cast stays.
    """
    sigma = sigma_fraction * min(images.shape[-2:])
    return gaussian_blur(images, kernel_size=2 * math.ceil(3 * sigma) + 1, sigma=sigma)


def insertion_start_images(images: Tensor, start: InsertionStart) -> Tensor:
    """The insertion start (B, C, H, W) of images (B, C, H, W).

    ``"blur"`` :func:`strong_blur` (the default: its class evidence is gone on the project's
    testbeds, docs/results/faithfulness.md); ``"rise"`` the paper's protocol (Petsiuk et al.: kernel 11,
    sigma 5 at 224 px, scaled; it keeps the class on small images); ``"mean"`` each image's mean
    colour; ``"zeros"`` zeros of the normalised input (the dataset's mean colour); or a tensor.
    """
    if isinstance(start, Tensor):
        return make_baseline(images, start)
    check_choice(start, INSERTION_STARTS, "insertion_start")
    if start == "blur":
        return strong_blur(images)
    if start == "rise":
        return gaussian_blur(images)
    if start == "mean":
        return images.mean(dim=(2, 3), keepdim=True).expand_as(images)
    return torch.zeros_like(images)


def _shared(images: Tensor, fill: InsertionStart | Baseline) -> bool:
    """Whether the named or given ``fill`` is the same image for every image (one forward serves all)."""
    if isinstance(fill, Tensor):
        return fill.ndim < images.ndim or fill.shape[0] == 1
    return fill == "zeros"


@dataclass(frozen=True)
class Starts:
    """One batch's insertion start and deletion end and the model's logits on them, shared by every map.

    Attributes:
        insertion: (B, C, H, W) the images insertion reveals patches on.
        deletion: (B, C, H, W) the images deleted patches come from.
        insertion_logits, deletion_logits: (B, ...) the model's logits on them (float32).
        options: the ``insertion_start`` and ``deletion_baseline`` they were made with.
    """

    insertion: Tensor
    deletion: Tensor
    insertion_logits: Tensor
    deletion_logits: Tensor
    options: tuple[Any, Any]

    def scores(self, targets: Tensor, activation: Activation, regions: Tensor | None) -> tuple[Tensor, Tensor]:
        """The scores (B,) of the insertion start and of the deletion end for ``targets`` (B,)."""
        insertion = target_scores(self.insertion_logits, targets.to(self.insertion.device), activation, regions)
        deletion = target_scores(self.deletion_logits, targets.to(self.insertion.device), activation, regions)
        return insertion, deletion


def perturbation_starts(
    model: Callable[[Tensor], Tensor],
    images: Tensor,
    *,
    insertion_start: InsertionStart = DEFAULT_INSERTION_START,
    deletion_baseline: Baseline = "zeros",
    batch_size: int | None = None,
    precision: Precision = "full",
) -> Starts:
    """The insertion start and deletion end of images (B, C, H, W) with the model's logits on them.

    One forward per distinct image: an image shared by the whole batch ("zeros", a (C, 1, 1)
    colour) is forwarded once; a deletion baseline equal to the insertion start is not forwarded again.
    """
    start = insertion_start_images(images, insertion_start)
    same = isinstance(deletion_baseline, str) and deletion_baseline == "blur" and insertion_start == "rise"
    same = same or (isinstance(deletion_baseline, str) and deletion_baseline == insertion_start == "zeros")
    deleted = start if same else make_baseline(images, deletion_baseline)
    options: dict[str, Any] = dict(batch_size=batch_size, precision=precision)

    def logits_of(fill: Tensor, shared: bool) -> Tensor:
        if shared:
            one = forward_logits(model, fill[:1], **options)
            return one.expand(len(images), *one.shape[1:])
        return forward_logits(model, fill, **options)

    start_logits = logits_of(start, _shared(images, insertion_start))
    deleted_logits = start_logits if same else logits_of(deleted, _shared(images, deletion_baseline))
    return Starts(start, deleted, start_logits, deleted_logits, (insertion_start, deletion_baseline))


def insertion_deletion(
    model: Callable[[Tensor], Tensor],
    images: Tensor,
    targets: Tensor,
    maps: Tensor,
    *,
    patch_size: PatchSize,
    steps: int = 16,
    deletion_baseline: Baseline = "zeros",
    insertion_start: InsertionStart = DEFAULT_INSERTION_START,
    batch_size: int | None = None,
    activation: Activation = "softmax",
    regions: Tensor | None = None,
    starts: Starts | None = None,
    clean_scores: Tensor | None = None,
    precision: Precision = "full",
) -> dict[str, Tensor]:
    """Per-image insertion and deletion AUC of relevance maps.

    Patches are ranked by the sum of the map over each patch (ties: row-major order). Step k of K
    perturbs the round(k * P / K) most relevant patches: deletion replaces them with the baseline,
    insertion reveals them on the insertion start (by default a strong blur whose class evidence is
    gone, :func:`insertion_start_images`; ``insertion_start="rise"`` is the paper's mild blur). The
    score is the probability of the target class (softmax, or its sigmoid for multi-label models);
    for a segmentation model (``regions`` given) it is the mean over the image's region of the
    target class's logit, so curves and AUCs are in logit units, not probabilities in [0, 1]. The
    AUC is the trapezoid rule over the fraction k / K in [0, 1], step 0 included. The start's own
    score is returned (``insertion_start``): close to the clean score, insertion is saturated.
    The 2 * B * (K - 1) inner steps go through ``model`` in chunks of ``batch_size`` under no_grad;
    the clean image, the start and the end are forwarded once (not at all when given).

    Args:
        model: images -> logits (n, num_classes), or (n, K, h, w) with ``regions``; in eval mode
            (the mode is left as it is).
        images: normalised images (B, C, H, W).
        targets: explained classes (B,).
        maps: relevance (B, H, W) at input resolution, higher = more relevant.
        patch_size: pixels per patch, an int or (ph, pw) dividing (H, W): the explainer's
            ``patch_size`` (required; TypeError when missing).
        steps: K, between 1 and the number of patches.
        deletion_baseline: "zeros" (the mean colour of the normalised input), "blur" (the paper's
            mild blur) or a tensor broadcastable to the images.
        insertion_start: "blur", "rise", "mean", "zeros" or a tensor (:func:`insertion_start_images`).
        batch_size: images per forward call; None: the device's default (:func:`~.perturbation.default_batch_size`).
        activation: "softmax" (multi-class) or "sigmoid" (multi-label); unused with ``regions``.
        regions: None (classifier), or bool (B, h, w) on the segmentation model's logits grid: the
            object whose mean target logit is scored, at least one pixel per image.
        starts: the batch's :func:`perturbation_starts` made with the same ``insertion_start`` and
            ``deletion_baseline`` (shared by several maps of the same images); None: made here.
        clean_scores: the score (B,) of each clean image for its target (e.g. from the explain
            forward); None: forwarded here.
        precision: "full" or "bfloat16" autocast for the forwards (:data:`~.perturbation.Precision`).

    Returns:
        ``insertion``, ``deletion``, ``insertion_minus_deletion``, ``insertion_start`` (the start's
        score) (B,) and the curves ``insertion_curve``, ``deletion_curve`` (B, K + 1).

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
    options: dict[str, Any] = dict(batch_size=batch_size, precision=precision)
    if starts is None:
        starts = perturbation_starts(
            model, images, insertion_start=insertion_start, deletion_baseline=deletion_baseline, **options
        )
    elif starts.options != (insertion_start, deletion_baseline) or starts.insertion.shape != images.shape:
        raise ValueError(
            f"starts were made for insertion_start, deletion_baseline = {starts.options} and images "
            f"{tuple(starts.insertion.shape)}; got {(insertion_start, deletion_baseline)} and {tuple(images.shape)}"
        )
    regions_on = None if regions is None else regions.to(images.device)
    if clean_scores is None:
        clean_scores = target_scores(
            forward_logits(model, images, **options), targets.to(images.device), activation, regions_on
        )
    start_scores, end_scores = starts.scores(targets, activation, regions_on)
    scores = perturbed_probabilities(
        model,
        base=torch.cat([images, starts.insertion]),
        fill=torch.cat([starts.deletion, images]),
        masks=torch.cat([masks, masks]),
        targets=torch.cat([targets, targets]),
        activation=activation,
        regions=None if regions is None else torch.cat([regions, regions]),
        base_scores=torch.cat([clean_scores.to(images.device), start_scores]),
        fill_scores=torch.cat([end_scores, clean_scores.to(images.device)]),
        **options,
    )
    deletion_curve, insertion_curve = scores.split(len(images))
    insertion, deletion = trapezoid_auc(insertion_curve), trapezoid_auc(deletion_curve)
    return {
        "insertion": insertion,
        "deletion": deletion,
        "insertion_minus_deletion": insertion - deletion,
        "insertion_start": insertion_curve[:, 0],
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
        ['deletion', 'insertion', 'insertion_minus_deletion', 'insertion_start']
    """

    sums: ClassVar[dict[str, torch.dtype]] = {
        "insertion_sum": torch.float64,
        "deletion_sum": torch.float64,
        "insertion_start_sum": torch.float64,
    }

    def __init__(
        self,
        *,
        patch_size: PatchSize,
        steps: int = 16,
        deletion_baseline: Baseline = "zeros",
        insertion_start: InsertionStart = DEFAULT_INSERTION_START,
        batch_size: int | None = None,
        activation: Activation = "softmax",
        precision: Precision = "full",
        **kwargs: Any,
    ) -> None:
        check_int(steps, "steps")
        if not isinstance(insertion_start, Tensor):
            check_choice(insertion_start, INSERTION_STARTS, "insertion_start")
        super().__init__(
            patch_size=patch_size,
            batch_size=batch_size,
            activation=activation,
            options=dict(
                steps=steps, deletion_baseline=deletion_baseline, insertion_start=insertion_start, precision=precision
            ),
            **kwargs,
        )

    def _scores(
        self, model: Callable[[Tensor], Tensor], images: Tensor, targets: Tensor, maps: Tensor, regions: Tensor | None
    ) -> dict[str, Tensor]:
        scores = insertion_deletion(model, images, targets, maps, regions=regions, **self.options)
        return {
            "insertion_sum": scores["insertion"],
            "deletion_sum": scores["deletion"],
            "insertion_start_sum": scores["insertion_start"],
        }

    def compute(self) -> dict[str, Tensor]:
        """Means over all images seen: ``insertion``, ``deletion``, ``insertion_minus_deletion`` and
        ``insertion_start`` (the start image's score: near the clean score, insertion is saturated)."""
        insertion, deletion = self._mean("insertion_sum"), self._mean("deletion_sum")
        return {
            "insertion": insertion,
            "deletion": deletion,
            "insertion_minus_deletion": insertion - deletion,
            "insertion_start": self._mean("insertion_start_sum"),
        }
