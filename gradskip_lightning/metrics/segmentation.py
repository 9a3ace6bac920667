"""Segmentation scores of relevance maps against object masks (map thresholded at its mean)."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from ._checks import as_bool_masks, check_maps


def segmentation_confusion(maps: Tensor, masks: Tensor) -> Tensor:
    """Pixel counts (4,) long: true positives, false positives, false negatives, true negatives.

    Each map (B, H, W) is foreground where it is strictly above its own mean (a constant map is all
    background). Masks (B, H, W) are bool or {0, 1}; an empty mask is allowed (no object).
    """
    check_maps(maps)
    masks = as_bool_masks(masks, maps, allow_empty=True).to(maps.device)
    predicted = maps > maps.mean(dim=(1, 2), keepdim=True)
    return torch.stack(
        [
            (predicted & masks).sum(),
            (predicted & ~masks).sum(),
            (~predicted & masks).sum(),
            (~predicted & ~masks).sum(),
        ]
    )


def scores_from_confusion(confusion: Tensor) -> dict[str, Tensor]:
    """``pixel_accuracy``, ``iou_foreground``, ``iou_background``, ``mean_iou`` from counts (4,).

    An IoU whose union is empty is NaN.
    """
    tp, fp, fn, tn = confusion.double()
    iou_foreground = tp / (tp + fp + fn)
    iou_background = tn / (tn + fp + fn)
    return {
        "pixel_accuracy": (tp + tn) / confusion.sum(),
        "iou_foreground": iou_foreground,
        "iou_background": iou_background,
        "mean_iou": (iou_foreground + iou_background) / 2,
    }


def segmentation_scores(maps: Tensor, masks: Tensor) -> dict[str, Tensor]:
    """Scores of a batch, pooled over all its pixels (see :func:`scores_from_confusion`).

    Example:
        >>> maps = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])  # above its mean: the top-left pixel
        >>> masks = torch.tensor([[[True, True], [False, False]]])
        >>> {key: round(value.item(), 3) for key, value in segmentation_scores(maps, masks).items()}
        {'pixel_accuracy': 0.75, 'iou_foreground': 0.5, 'iou_background': 0.667, 'mean_iou': 0.583}
    """
    return scores_from_confusion(segmentation_confusion(maps, masks))


class SegmentationScores(Metric):
    """Pixel accuracy and IoU (foreground, background, mean) pooled over the dataset, DDP-synchronised.

    ``update(maps, masks)`` adds to the dataset-wide confusion counts; ``compute()`` returns the
    dict of :func:`scores_from_confusion`.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("confusion", torch.zeros(4, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, maps: Tensor, masks: Tensor) -> None:
        """Add a batch: maps (B, H, W), masks (B, H, W)."""
        self.confusion += segmentation_confusion(maps, masks).to(self.confusion.device)

    def compute(self) -> dict[str, Tensor]:
        return scores_from_confusion(self.confusion)
