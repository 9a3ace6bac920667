"""Drift between two relevance maps of the same images: Spearman rank correlation and top-k % IoU."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from gradskip_lightning.core.validation import check_fraction, check_map_pair


def average_ranks(values: Tensor) -> Tensor:
    """1-based ranks (B, N) float64 of each row of values (B, N), ties given their average rank."""
    values = values.contiguous()
    ordered = values.sort(dim=1).values
    below = torch.searchsorted(ordered, values, side="left")
    at_or_below = torch.searchsorted(ordered, values, side="right")
    return (below + at_or_below + 1).double() / 2


def spearman(maps_a: Tensor, maps_b: Tensor) -> Tensor:
    """Spearman rank correlation (B,) float64 between maps (B, H, W) over pixels (as scipy.stats.spearmanr).

    NaN where a map is constant (its ranks have no variance).

    Example:
        >>> maps = torch.arange(4.0).reshape(1, 2, 2)
        >>> spearman(maps, maps.exp()), spearman(maps, -maps)
        (tensor([1.], dtype=torch.float64), tensor([-1.], dtype=torch.float64))
    """
    check_map_pair(maps_a, maps_b)
    ranks_a = average_ranks(maps_a.flatten(1))
    ranks_b = average_ranks(maps_b.to(maps_a.device).flatten(1))
    ranks_a = ranks_a - ranks_a.mean(dim=1, keepdim=True)
    ranks_b = ranks_b - ranks_b.mean(dim=1, keepdim=True)
    return (ranks_a * ranks_b).sum(1) / (ranks_a.square().sum(1) * ranks_b.square().sum(1)).sqrt()


def top_count_pixels(maps: Tensor, counts: Tensor) -> Tensor:
    """Masks (B, N) bool of the ``counts[b]`` highest pixels of each map (B, H, W); ties: row-major order.

    Args:
        maps: relevance (B, H, W).
        counts: pixels to keep per map (B,) integer, each in [0, H * W].
    """
    flat = maps.flatten(1)
    order = torch.argsort(flat, dim=1, descending=True, stable=True)
    keep = torch.arange(flat.shape[1], device=flat.device)[None, :] < counts.to(flat.device)[:, None]
    return torch.zeros_like(flat, dtype=torch.bool).scatter_(1, order, keep)


def top_pixels(maps: Tensor, fraction: float) -> Tensor:
    """Masks (B, N) bool of the ceil(fraction * N) highest pixels of maps (B, H, W); ties: row-major order."""
    check_fraction(fraction, "top_k")
    count = math.ceil(round(fraction * maps[0].numel(), 6))
    return top_count_pixels(maps, torch.full((maps.shape[0],), count, device=maps.device))


def topk_iou(maps_a: Tensor, maps_b: Tensor, *, top_k: float = 0.1) -> Tensor:
    """IoU (B,) float64 of the top ``top_k`` fraction of pixels of two maps (B, H, W).

    Example:
        >>> maps = torch.arange(16.0).reshape(1, 4, 4)
        >>> topk_iou(maps, maps.flip(-1), top_k=0.25)  # top 4 = the last row in both
        tensor([1.], dtype=torch.float64)
    """
    check_map_pair(maps_a, maps_b)
    top_a, top_b = top_pixels(maps_a, top_k), top_pixels(maps_b.to(maps_a.device), top_k)
    return (top_a & top_b).sum(1).double() / (top_a | top_b).sum(1)


def drift(maps_a: Tensor, maps_b: Tensor, *, top_k: float = 0.1) -> dict[str, Tensor]:
    """``spearman`` and ``topk_iou`` (B,) between two maps (B, H, W) of the same images."""
    return {"spearman": spearman(maps_a, maps_b), "topk_iou": topk_iou(maps_a, maps_b, top_k=top_k)}


class ExplanationDrift(Metric):
    """Mean Spearman correlation and top-k IoU between paired maps, DDP-synchronised.

    Per-image values are kept ("cat" states) and averaged in ``compute()``; images whose Spearman
    correlation is undefined (a constant map) are left out of its mean.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, *, top_k: float = 0.1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_fraction(top_k, "top_k")
        self.top_k = top_k
        self.spearman: list[Tensor]  # (B,) per update; one (N,) tensor after a sync
        self.topk_iou: list[Tensor]
        self.add_state("spearman", [], dist_reduce_fx="cat")
        self.add_state("topk_iou", [], dist_reduce_fx="cat")

    def update(self, maps_a: Tensor, maps_b: Tensor) -> None:
        """Add a batch of map pairs (B, H, W)."""
        scores = drift(maps_a, maps_b, top_k=self.top_k)
        self.spearman.append(scores["spearman"])
        self.topk_iou.append(scores["topk_iou"])

    def compute(self) -> dict[str, Tensor]:
        """``spearman`` (NaN-skipping mean) and ``topk_iou`` means."""
        return {"spearman": dim_zero_cat(self.spearman).nanmean(), "topk_iou": dim_zero_cat(self.topk_iou).mean()}
