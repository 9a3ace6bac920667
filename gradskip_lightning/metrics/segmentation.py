"""Segmentation scores of relevance maps against object masks: pixel accuracy, IoU and average precision.

The protocol of Chefer et al. 2021 (their ImageNet-segmentation evaluation), also used by the
GradSkip paper: each map is min-max normalised and thresholded at its mean (foreground = strictly
above), giving pixel accuracy and mIoU = the mean of the foreground and background IoU; the soft
map gives the average precision of its pixels against the mask. Both are invariant to min-max
normalisation (an increasing affine map moves the mean with the values and keeps their order), so
the maps are used as they are.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from gradskip_lightning.core.validation import as_bool_masks, check_maps


def per_image_confusion(maps: Tensor, masks: Tensor) -> Tensor:
    """Pixel counts (B, 4) long per image: true positives, false positives, false negatives, true negatives.

    Each map (B, H, W) is foreground where it is strictly above its own mean (a constant map is all
    background). Masks (B, H, W) are bool or {0, 1}; an empty mask is allowed (no object).
    """
    check_maps(maps)
    masks = as_bool_masks(masks, maps, allow_empty=True).to(maps.device)
    predicted = maps > maps.mean(dim=(1, 2), keepdim=True)
    cells = (predicted & masks, predicted & ~masks, ~predicted & masks, ~predicted & ~masks)
    return torch.stack([cell.sum(dim=(1, 2)) for cell in cells], dim=1)


def segmentation_confusion(maps: Tensor, masks: Tensor) -> Tensor:
    """Pixel counts (4,) long pooled over the batch, in the order of :func:`per_image_confusion`."""
    return per_image_confusion(maps, masks).sum(dim=0)


def scores_from_confusion(confusion: Tensor) -> dict[str, Tensor]:
    """``pixel_accuracy``, ``iou_foreground``, ``iou_background``, ``mean_iou`` from counts (..., 4).

    Counts (4,) give scalars, counts (B, 4) give (B,) scores (float64). An IoU whose union is empty
    is NaN, and so is the mean IoU then.
    """
    tp, fp, fn, tn = confusion.double().unbind(dim=-1)
    iou_foreground = tp / (tp + fp + fn)
    iou_background = tn / (tn + fp + fn)
    return {
        "pixel_accuracy": (tp + tn) / (tp + fp + fn + tn),
        "iou_foreground": iou_foreground,
        "iou_background": iou_background,
        "mean_iou": (iou_foreground + iou_background) / 2,
    }


def average_precision(maps: Tensor, masks: Tensor) -> Tensor:
    """Average precision (B,) float64 of each soft map's pixels, ranked by value, against its mask.

    The definition of scikit-learn's ``average_precision_score``: the sum over thresholds (the
    distinct map values, highest first) of the recall gained times the precision there; pixels with
    equal values enter together. Invariant to any increasing transform of a map. An image whose
    mask is empty has no positives: its AP is NaN.

    Args:
        maps: relevance (B, H, W), higher = more likely object.
        masks: objects (B, H, W), bool or {0, 1}.

    Example:
        >>> maps = torch.tensor([[[0.9, 0.8], [0.7, 0.1]]])  # ranks: object, background, object, background
        >>> masks = torch.tensor([[[True, False], [True, False]]])
        >>> average_precision(maps, masks)  # (1 / 1 + 2 / 3) / 2
        tensor([0.8333], dtype=torch.float64)
    """
    check_maps(maps)
    masks = as_bool_masks(masks, maps, allow_empty=True).to(maps.device)
    values, order = maps.flatten(1).sort(dim=1, descending=True, stable=True)
    positive = masks.flatten(1).gather(1, order).double()
    pixels = values.shape[1]
    # Index of the last pixel of each pixel's tie group: all of a group enter at one threshold.
    group_ends = torch.ones_like(values, dtype=torch.bool)
    group_ends[:, :-1] = values[:, 1:] != values[:, :-1]
    index = torch.arange(pixels, device=maps.device).expand_as(values)
    last = torch.where(group_ends, index, pixels - 1).flip(1).cummin(dim=1).values.flip(1)
    precision = positive.cumsum(dim=1).gather(1, last) / (last + 1)
    return (precision * positive).sum(dim=1) / positive.sum(dim=1)


def segmentation_scores_per_image(maps: Tensor, masks: Tensor) -> dict[str, Tensor]:
    """Scores (B,) float64 of each image: those of :func:`scores_from_confusion` and ``average_precision``.

    Example:
        >>> maps = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [2.0, 3.0]]])
        >>> masks = torch.tensor([[[True, True], [False, False]], [[False, False], [True, True]]])
        >>> scores = segmentation_scores_per_image(maps, masks)
        >>> scores["pixel_accuracy"], scores["average_precision"]  # image 0: its other object pixel ties with 2
        (tensor([0.7500, 1.0000], dtype=torch.float64), tensor([0.7500, 1.0000], dtype=torch.float64))
    """
    scores = scores_from_confusion(per_image_confusion(maps, masks))
    return {**scores, "average_precision": average_precision(maps, masks)}


def segmentation_scores(maps: Tensor, masks: Tensor) -> dict[str, Tensor]:
    """Scores of a batch: those of :func:`scores_from_confusion` pooled over all its pixels, and
    ``average_precision``, the mean AP over the images with a non-empty mask (NaN if there are none).

    Example:
        >>> maps = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])  # above its mean: the top-left pixel
        >>> masks = torch.tensor([[[True, True], [False, False]]])
        >>> scores = segmentation_scores(maps, masks)
        >>> {key: round(value.item(), 3) for key, value in scores.items() if key != "average_precision"}
        {'pixel_accuracy': 0.75, 'iou_foreground': 0.5, 'iou_background': 0.667, 'mean_iou': 0.583}
        >>> scores["average_precision"]  # 1.0 (precision 1 / 1) then 0.0 tied: (1 + 2 / 4) / 2
        tensor(0.7500, dtype=torch.float64)
    """
    return {
        **scores_from_confusion(segmentation_confusion(maps, masks)),
        "average_precision": average_precision(maps, masks).nanmean(),
    }


class SegmentationScores(Metric):
    """Pixel accuracy and IoU (foreground, background, mean) pooled over the dataset, and the mean
    average precision over the images with a non-empty mask; DDP-synchronised.

    ``update(maps, masks)`` adds to the dataset-wide confusion counts and AP sum and count;
    ``compute()`` returns the dict of :func:`segmentation_scores` for everything seen.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.confusion: Tensor  # (4,) long pixel counts: tp, fp, fn, tn
        self.precision_sum: Tensor  # float64 scalar
        self.precision_count: Tensor  # long scalar
        self.add_state("confusion", torch.zeros(4, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("precision_sum", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("precision_count", torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, maps: Tensor, masks: Tensor) -> None:
        """Add a batch: maps (B, H, W), masks (B, H, W)."""
        self.confusion += segmentation_confusion(maps, masks).to(self.confusion.device)
        precision = average_precision(maps, masks)
        defined = ~precision.isnan()
        self.precision_sum += precision[defined].sum().to(self.precision_sum.device)
        self.precision_count += defined.sum().to(self.precision_count.device)

    def compute(self) -> dict[str, Tensor]:
        """Pooled scores of :func:`scores_from_confusion` and the mean ``average_precision``."""
        return {**scores_from_confusion(self.confusion), "average_precision": self.precision_sum / self.precision_count}
