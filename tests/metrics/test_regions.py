"""Relevance mass and rank accuracy: hand-built maps, a numpy reference, empty regions, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gradskip_lightning.metrics import (
    RelevanceMassAccuracy,
    RelevanceRankAccuracy,
    relevance_mass_accuracy,
    relevance_rank_accuracy,
)


def np_mass_accuracy(a: np.ndarray, s: np.ndarray) -> float:
    if not s.any():
        return math.nan
    positive = np.clip(a, 0, None)
    return float(positive[s].sum() / positive.sum())


def np_rank_accuracy(a: np.ndarray, s: np.ndarray) -> float:
    k = int(s.sum())
    if k == 0:
        return math.nan
    top = np.argsort(-a.ravel(), kind="stable")[:k]  # ties: row-major order
    return float(np.isin(top, np.flatnonzero(s.ravel())).sum() / k)


def test_hand_built_maps():
    maps = torch.zeros(3, 4, 4)
    masks = torch.zeros(3, 4, 4, dtype=torch.bool)
    masks[:, :2, :2] = True  # a 2 x 2 region in the corner
    maps[0, :2, :2] = 1.0  # all relevance inside
    maps[1, 2:, 2:] = 1.0  # all relevance outside
    maps[1, 0, 0] = -5.0  # negative relevance inside does not count
    maps[2, 0, :] = torch.tensor([3.0, 1.0, 2.0, 2.0])  # 4 of 8 inside; top 4 = 3, 2, 2, 1 -> 2 inside
    assert relevance_mass_accuracy(maps, masks).tolist() == [1.0, 0.0, 0.5]
    assert relevance_rank_accuracy(maps, masks).tolist() == [1.0, 0.0, 0.5]


def test_rank_accuracy_breaks_ties_in_row_major_order():
    maps = torch.zeros(1, 2, 2)  # all tied: the first K pixels in row-major order are the top K
    first = torch.tensor([[[True, False], [False, False]]])
    last = torch.tensor([[[False, False], [False, True]]])
    assert relevance_rank_accuracy(maps, first).item() == 1.0
    assert relevance_rank_accuracy(maps, last).item() == 0.0


@pytest.mark.parametrize("seed", [0, 1])
def test_match_numpy_reference(seed):
    generator = torch.Generator().manual_seed(seed)
    maps = torch.randn(6, 12, 10, generator=generator, dtype=torch.float64)
    maps[1] = (maps[1] * 2).round()  # ties
    masks = torch.rand(6, 12, 10, generator=generator) > 0.7
    mass, rank = relevance_mass_accuracy(maps, masks), relevance_rank_accuracy(maps, masks)
    for i in range(6):
        a, s = maps[i].numpy(), masks[i].numpy()
        assert mass[i].item() == pytest.approx(np_mass_accuracy(a, s), abs=1e-6)
        assert rank[i].item() == pytest.approx(np_rank_accuracy(a, s), abs=1e-6)


def test_empty_region_or_no_positive_relevance_is_nan_and_left_out_of_the_mean():
    maps = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 2.0], [3.0, 4.0]], [[-1.0, -1.0], [-1.0, -1.0]]])
    masks = torch.tensor([[[1, 0], [0, 0]], [[0, 0], [0, 0]], [[1, 1], [0, 0]]])
    mass = relevance_mass_accuracy(maps, masks)
    assert mass[0].item() == 1.0 and mass[1:].isnan().all()  # empty region; no positive relevance
    rank = relevance_rank_accuracy(maps, masks)
    assert rank[0].item() == 1.0 and rank[1].isnan() and rank[2].item() == 1.0
    for metric, expected in ((RelevanceMassAccuracy(), 1.0), (RelevanceRankAccuracy(), 1.0)):
        metric.update(maps, masks)
        assert metric.compute().item() == expected
    only_empty = RelevanceRankAccuracy()
    only_empty.update(maps[1:2], masks[1:2])
    assert only_empty.compute().isnan()


def test_metric_means_per_image_over_updates():
    generator = torch.Generator().manual_seed(3)
    maps = torch.rand(8, 16, 16, generator=generator)
    masks = torch.rand(8, 16, 16, generator=generator) > 0.5
    pairs = ((RelevanceMassAccuracy(), relevance_mass_accuracy), (RelevanceRankAccuracy(), relevance_rank_accuracy))
    for metric, score in pairs:
        metric.update(maps[:3], masks[:3])
        metric.update(maps[3:], masks[3:])
        assert metric.compute().item() == pytest.approx(score(maps, masks).mean().item(), abs=1e-12)


@pytest.mark.parametrize("score", [relevance_mass_accuracy, relevance_rank_accuracy])
def test_bad_input(score):
    maps = torch.rand(2, 4, 4)
    with pytest.raises(ValueError, match="masks must have the shape"):
        score(maps, torch.ones(2, 4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="only the values 0 and 1"):
        score(maps, torch.full((2, 4, 4), 2))
    with pytest.raises(ValueError, match=r"\(B, H, W\)"):
        score(maps[0], torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="NaN"):
        score(torch.full((2, 4, 4), float("nan")), torch.ones(2, 4, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="masks must be a torch.Tensor"):
        score(maps, np.ones((2, 4, 4), dtype=bool))
