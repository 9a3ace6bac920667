"""Hierarchical bootstrap over training seeds and images, and the ahead/tied/behind verdict.

Values are (S, n): S training seeds (rows) by n images (columns), the same images for every seed.
One resample draws S seeds with replacement, then for each drawn seed n images with replacement
(independently per drawn seed), and takes the mean. The interval is the percentile interval of
``resamples`` such means under a fixed generator seed, so a rerun gives the same interval. It
captures both sources of spread: which model the seed trained and which images were drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .records import Interval, Verdict


@dataclass(frozen=True)
class BootstrapSettings:
    """Resample count, generator seed and interval level (0.95 = the 2.5th to 97.5th percentile)."""

    resamples: int = 2000
    seed: int = 0
    level: float = 0.95

    def __post_init__(self) -> None:
        if self.resamples < 1:
            raise ValueError(f"resamples must be at least 1, got {self.resamples}")
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {self.level}")


def hierarchical_bootstrap(values: Tensor, settings: BootstrapSettings = BootstrapSettings()) -> Interval:
    """Mean of ``values`` (S, n) with its hierarchical bootstrap interval (seeds, then images).

    NaN entries (an image a score cannot rate, the padding of a seed with fewer) are skipped in every mean,
    and so is a resample that drew only NaN entries.

    >>> hierarchical_bootstrap(torch.full((3, 5), 0.25))
    Interval(mean=0.25, low=0.25, high=0.25)
    """
    if values.ndim != 2 or values.numel() == 0:
        raise ValueError(f"values must be (seeds, images) with both at least 1, got shape {tuple(values.shape)}")
    values = values.double()
    seeds, images = values.shape
    generator = torch.Generator().manual_seed(settings.seed)
    drawn_seeds = torch.randint(seeds, (settings.resamples, seeds, 1), generator=generator)
    drawn_images = torch.randint(images, (settings.resamples, seeds, images), generator=generator)
    means = values[drawn_seeds, drawn_images].reshape(settings.resamples, -1).nanmean(dim=1)
    means = means[~means.isnan()]  # a resample that drew only NaN entries (of a NaN-padded seed) has no mean
    tail = (1.0 - settings.level) / 2
    low, high = torch.quantile(means, torch.tensor([tail, 1.0 - tail], dtype=torch.double)).tolist()
    return Interval(values.nanmean().item(), low, high)


def verdict(difference: Interval, higher_is_better: bool) -> Verdict:
    """ "ahead" when the interval of subject minus reference excludes 0 on the better side, "behind"
    on the worse side, "tied" when it contains 0.

    >>> verdict(Interval(0.02, 0.01, 0.03), higher_is_better=True), verdict(Interval(0.02, 0.01, 0.03), False)
    ('ahead', 'behind')
    """
    if difference.low <= 0.0 <= difference.high:
        return "tied"
    return "ahead" if (difference.low > 0.0) == higher_is_better else "behind"
