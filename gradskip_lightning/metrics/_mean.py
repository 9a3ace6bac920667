"""Base metric: the mean over images of a per-image score, NaN scores left out, DDP-synchronised."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric


class ImageMean(Metric):
    """Mean of per-image scores (B,) over every image seen; images scored NaN are left out.

    States are the sum of the defined scores (float64) and their count, both reduced with "sum",
    so the synced mean equals one process's mean over the union of the data. ``compute()`` is NaN
    while no image had a defined score. Subclasses score a batch in ``update`` and pass the
    scores to :meth:`add_scores`.
    """

    is_differentiable = False
    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.score_sum: Tensor  # float64 scalar, the sum of the defined scores
        self.scored: Tensor  # long scalar, how many there were
        self.add_state("score_sum", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("scored", torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def add_scores(self, scores: Tensor) -> None:
        """Add per-image scores (B,); NaN entries are not counted."""
        defined = ~scores.isnan()
        self.score_sum += scores[defined].double().sum().to(self.score_sum.device)
        self.scored += defined.sum().to(self.scored.device)

    def compute(self) -> Tensor:
        """Mean score (float64 scalar) over the images with a defined score; NaN if there were none."""
        return self.score_sum / self.scored
