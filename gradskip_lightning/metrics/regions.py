"""Relevance inside a region (Arras et al. 2022, CLEVR-XAI): relevance mass accuracy and rank accuracy.

An image whose region is empty has no score: its value is NaN and the metric classes leave it out
of their mean (as Quantus does). Quantus's ``RelevanceMassAccuracy`` sums signed relevance; here,
as in the paper, only positive relevance counts.
"""

from __future__ import annotations

from torch import Tensor

from gradskip_lightning.core.validation import as_bool_masks, check_maps

from ._mean import ImageMean
from .drift import top_count_pixels


def relevance_mass_accuracy(maps: Tensor, masks: Tensor) -> Tensor:
    """Share (B,) float64 of each map's positive relevance that lies inside its region.

    ``sum(relu(map) inside) / sum(relu(map))``, in [0, 1]. NaN where the region is empty or the map
    has no positive relevance.

    Args:
        maps: relevance (B, H, W), finite.
        masks: regions (B, H, W), bool or {0, 1}; an empty region gives NaN.

    Example:
        >>> import torch
        >>> maps = torch.tensor([[[4.0, 1.0], [-2.0, 3.0]]])
        >>> masks = torch.tensor([[[True, False], [True, False]]])
        >>> relevance_mass_accuracy(maps, masks)  # 4 of 4 + 1 + 3
        tensor([0.5000], dtype=torch.float64)
    """
    check_maps(maps)
    masks = as_bool_masks(masks, maps, allow_empty=True).to(maps.device)
    positive = maps.double().clamp(min=0).flatten(1)
    inside = (positive * masks.flatten(1)).sum(1)
    scores = inside / positive.sum(1)  # NaN (0 / 0) without positive relevance
    return scores.masked_fill(~masks.flatten(1).any(1), float("nan"))


def relevance_rank_accuracy(maps: Tensor, masks: Tensor) -> Tensor:
    """Share (B,) float64 of each map's K highest pixels that lie inside its region, K = the region's size.

    In [0, 1]; ties in the map are broken in row-major order. NaN where the region is empty.

    Args:
        maps: relevance (B, H, W), finite.
        masks: regions (B, H, W), bool or {0, 1}; an empty region gives NaN.

    Example:
        >>> import torch
        >>> maps = torch.tensor([[[4.0, 1.0], [-2.0, 3.0]]])
        >>> masks = torch.tensor([[[True, False], [True, False]]])
        >>> relevance_rank_accuracy(maps, masks)  # top 2: 4 (inside) and 3 (outside)
        tensor([0.5000], dtype=torch.float64)
    """
    check_maps(maps)
    masks = as_bool_masks(masks, maps, allow_empty=True).to(maps.device).flatten(1)
    sizes = masks.sum(1)
    hits = (top_count_pixels(maps, sizes) & masks).sum(1)
    return (hits.double() / sizes).masked_fill(sizes == 0, float("nan"))


class RelevanceMassAccuracy(ImageMean):
    """Mean :func:`relevance_mass_accuracy` over images, DDP-synchronised; NaN images left out.

    ``update(maps, masks)`` with maps and region masks (B, H, W); ``compute()`` returns the mean.

    Example:
        >>> import torch
        >>> metric = RelevanceMassAccuracy()
        >>> maps = torch.tensor([[[4.0, 1.0], [-2.0, 3.0]], [[1.0, 1.0], [1.0, 1.0]]])
        >>> metric.update(maps, torch.tensor([[[1, 0], [1, 0]], [[0, 0], [0, 0]]]))  # 2nd region empty
        >>> metric.compute()
        tensor(0.5000, dtype=torch.float64)
    """

    higher_is_better = True

    def update(self, maps: Tensor, masks: Tensor) -> None:
        """Score a batch: maps (B, H, W), masks (B, H, W)."""
        self.add_scores(relevance_mass_accuracy(maps, masks))


class RelevanceRankAccuracy(ImageMean):
    """Mean :func:`relevance_rank_accuracy` over images, DDP-synchronised; NaN images left out.

    ``update(maps, masks)`` with maps and region masks (B, H, W); ``compute()`` returns the mean.

    Example:
        >>> import torch
        >>> metric = RelevanceRankAccuracy()
        >>> metric.update(torch.tensor([[[4.0, 1.0], [-2.0, 3.0]]]), torch.tensor([[[1, 0], [0, 1]]]))
        >>> metric.compute()  # top 2 = {4, 3}, both inside
        tensor(1., dtype=torch.float64)
    """

    higher_is_better = True

    def update(self, maps: Tensor, masks: Tensor) -> None:
        """Score a batch: maps (B, H, W), masks (B, H, W)."""
        self.add_scores(relevance_rank_accuracy(maps, masks))
