"""The hierarchical bootstrap on data whose answer is known, and the ahead/tied/behind verdicts."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks.faithfulness.bootstrap import BootstrapSettings, hierarchical_bootstrap, verdict
from benchmarks.faithfulness.records import Interval


def test_a_constant_difference_gives_a_zero_width_interval_at_that_value():
    interval = hierarchical_bootstrap(torch.full((3, 40), 0.3, dtype=torch.double))
    assert math.isclose(interval.mean, 0.3) and math.isclose(interval.low, 0.3) and math.isclose(interval.high, 0.3)
    assert verdict(interval, higher_is_better=True) == "ahead"


def test_a_symmetric_difference_around_zero_is_tied():
    signs = torch.tensor([1.0, -1.0]).repeat(3, 20)  # (3 seeds, 40 images), mean exactly 0
    interval = hierarchical_bootstrap(signs)
    assert interval.mean == 0.0 and interval.low < -0.1 and interval.high > 0.1
    assert verdict(interval, higher_is_better=True) == verdict(interval, higher_is_better=False) == "tied"


def test_a_shifted_difference_is_ahead_or_behind_by_the_score_direction():
    values = 0.05 + 0.01 * torch.randn(3, 64, generator=torch.Generator().manual_seed(0))
    interval = hierarchical_bootstrap(values)
    assert 0.0 < interval.low < interval.mean < interval.high
    assert verdict(interval, higher_is_better=True) == "ahead"
    assert verdict(interval, higher_is_better=False) == "behind"


def test_the_seeds_are_resampled_not_only_the_images():
    # No spread within a seed, all of it between seeds: an image-only bootstrap would give zero width.
    values = torch.tensor([0.0, 1.0, 2.0]).unsqueeze(1).expand(3, 30)
    interval = hierarchical_bootstrap(values)
    assert interval.mean == 1.0 and interval.low < 0.5 and interval.high > 1.5
    # One seed: only the images vary.
    assert hierarchical_bootstrap(values[:1]) == Interval(0.0, 0.0, 0.0)


def test_the_interval_is_reproducible_and_its_level_sets_its_width():
    values = torch.rand(2, 50, generator=torch.Generator().manual_seed(1))
    assert hierarchical_bootstrap(values) == hierarchical_bootstrap(values)
    narrow = hierarchical_bootstrap(values, BootstrapSettings(level=0.5))
    wide = hierarchical_bootstrap(values)
    assert wide.low < narrow.low < narrow.high < wide.high


def test_a_seed_padded_with_nan_gives_a_finite_interval_even_when_a_resample_draws_only_padding():
    nan = math.nan
    values = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, nan, nan]], dtype=torch.double)  # 1 in 32 draws all NaN
    interval = hierarchical_bootstrap(values)
    assert interval.mean == pytest.approx(1 / 6) and interval.low == 0.0 and 0.2 < interval.high < 0.6


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="seeds, images"):
        hierarchical_bootstrap(torch.zeros(5))
    with pytest.raises(ValueError, match="resamples"):
        BootstrapSettings(resamples=0)
    with pytest.raises(ValueError, match="level"):
        BootstrapSettings(level=1.0)
