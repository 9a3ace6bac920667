"""Pointing Game (Zhang et al. 2016): does the map's maximum fall on (or near) the object?"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from gradskip_lightning.core.validation import as_bool_masks, check_class_targets, check_int, check_maps


def default_tolerance(image_size: tuple[int, int]) -> float:
    """15 px at 224 px, scaled with the mean image side (H + W) / 2: pixels."""
    return 15.0 * (image_size[0] + image_size[1]) / 2 / 224


def pointing_game(maps: Tensor, masks: Tensor, *, tolerance: float | None = None) -> Tensor:
    """Per-image hits (B,) bool.

    A hit when some mask pixel lies within ``tolerance`` pixels (Euclidean) of the map's maximum
    (the first maximum in row-major order when there are ties).

    Args:
        maps: relevance (B, H, W), finite.
        masks: object masks (B, H, W), bool or {0, 1}; each must hold at least one pixel.
        tolerance: pixels; None = :func:`default_tolerance` (15 px at 224 px).

    Example:
        >>> maps = torch.zeros(2, 8, 8)
        >>> maps[0, 1, 1] = maps[1, 6, 6] = 1.0  # the peaks
        >>> masks = torch.zeros(2, 8, 8, dtype=torch.bool)
        >>> masks[:, :3, :3] = True  # the object: the top-left corner
        >>> pointing_game(maps, masks, tolerance=1.0)
        tensor([ True, False])
    """
    check_maps(maps)
    masks = as_bool_masks(masks, maps, allow_empty=False)
    height, width = maps.shape[1:]
    if tolerance is None:
        tolerance = default_tolerance((height, width))
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0 pixels, got {tolerance}")
    peak = maps.flatten(1).argmax(dim=1)
    rows = torch.arange(height, device=maps.device)[None, :, None] - (peak // width)[:, None, None]
    cols = torch.arange(width, device=maps.device)[None, None, :] - (peak % width)[:, None, None]
    near = rows.square() + cols.square() <= tolerance**2
    return (near & masks.to(maps.device)).flatten(1).any(dim=1)


class PointingGame(Metric):
    """Pointing-game hit rate, overall and averaged over classes, DDP-synchronised.

    States are per-class hit and total counts (``num_classes``,) reduced with "sum".
    ``update(maps, masks, targets)``; ``compute()`` returns ``pointing_game`` (hits / total) and
    ``pointing_game_class_mean`` (mean over the classes seen of each class's hit rate).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, num_classes: int, *, tolerance: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_int(num_classes, "num_classes")
        self.num_classes = num_classes
        self.tolerance = tolerance
        self.hits: Tensor  # (K,) long, hits per class
        self.total: Tensor  # (K,) long, images per class
        self.add_state("hits", torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, maps: Tensor, masks: Tensor, targets: Tensor) -> None:
        """Score a batch: maps (B, H, W), masks (B, H, W), targets (B,) classes."""
        hits = pointing_game(maps, masks, tolerance=self.tolerance)
        check_class_targets(targets, len(maps), self.num_classes)
        targets = targets.to(self.hits.device)
        self.hits += torch.bincount(targets[hits.to(targets.device)], minlength=self.num_classes)
        self.total += torch.bincount(targets, minlength=self.num_classes)

    def compute(self) -> dict[str, Tensor]:
        """``pointing_game`` and ``pointing_game_class_mean`` in [0, 1]."""
        seen = self.total > 0
        per_class = self.hits[seen].double() / self.total[seen]
        return {
            "pointing_game": self.hits.sum().double() / self.total.sum(),
            "pointing_game_class_mean": per_class.mean(),
        }
