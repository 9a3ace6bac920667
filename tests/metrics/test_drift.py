"""Spearman and top-k IoU drift against scipy / numpy references."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from gradskip_lightning.metrics import ExplanationDrift, drift, spearman, topk_iou

from .helpers import ceil_count


def np_topk_iou(a: np.ndarray, b: np.ndarray, fraction: float) -> float:
    n = ceil_count(fraction, a.size)
    top_a = set(np.argsort(-a.ravel(), kind="stable")[:n].tolist())
    top_b = set(np.argsort(-b.ravel(), kind="stable")[:n].tolist())
    return len(top_a & top_b) / len(top_a | top_b)


@pytest.mark.parametrize("levels", [None, 5])
def test_spearman_matches_scipy_with_and_without_ties(levels):
    generator = torch.Generator().manual_seed(0)
    a = torch.rand(6, 12, 10, generator=generator, dtype=torch.float64)
    b = a + torch.rand(6, 12, 10, generator=generator, dtype=torch.float64)
    if levels is not None:  # heavy ties
        a, b = (a * levels).floor(), (b * levels).floor()
    result = spearman(a, b)
    for i in range(6):
        assert result[i].item() == pytest.approx(spearmanr(a[i].ravel(), b[i].ravel()).statistic, abs=1e-6)


def test_spearman_of_a_constant_map_is_nan_like_scipy():
    a = torch.ones(1, 4, 4)
    assert torch.isnan(spearman(a, torch.rand(1, 4, 4))).all()


@pytest.mark.parametrize("fraction", [0.1, 0.25, 1.0])
def test_topk_iou_matches_numpy(fraction):
    generator = torch.Generator().manual_seed(1)
    a = torch.rand(5, 16, 16, generator=generator)
    b = torch.where(torch.rand(5, 16, 16, generator=generator) > 0.5, a, torch.rand(5, 16, 16, generator=generator))
    a[0] = 0.0  # ties: row-major order decides
    result = topk_iou(a, b, top_k=fraction)
    for i in range(5):
        assert result[i].item() == pytest.approx(np_topk_iou(a[i].numpy(), b[i].numpy(), fraction), abs=1e-6)


def test_hand_cases():
    a = torch.arange(16.0).reshape(1, 4, 4)
    assert spearman(a, a).item() == pytest.approx(1.0)
    assert spearman(a, -a).item() == pytest.approx(-1.0)
    assert topk_iou(a, a, top_k=0.25).item() == 1.0
    assert topk_iou(a, -a, top_k=0.25).item() == 0.0
    b = a.clone()
    b[0, 3, :2] = 0.0  # top 4 of b: pixels 14, 15, 10, 11; of a: 12..15
    assert topk_iou(a, b, top_k=0.25).item() == pytest.approx(2 / 6)


def test_metric_means_over_updates_and_skips_undefined_spearman():
    generator = torch.Generator().manual_seed(2)
    a, b = torch.rand(7, 8, 8, generator=generator), torch.rand(7, 8, 8, generator=generator)
    a[6] = 1.0  # constant map: Spearman undefined
    metric = ExplanationDrift(top_k=0.2)
    metric.update(a[:3], b[:3])
    metric.update(a[3:], b[3:])
    whole = drift(a, b, top_k=0.2)
    result = metric.compute()
    torch.testing.assert_close(result["spearman"], whole["spearman"][:6].mean())
    torch.testing.assert_close(result["topk_iou"], whole["topk_iou"].mean())


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="must have the same shape"):
        drift(torch.rand(2, 8, 8), torch.rand(2, 8, 4))
    with pytest.raises(ValueError, match="maps_b contains NaN"):
        drift(torch.rand(2, 8, 8), torch.full((2, 8, 8), float("nan")))
    with pytest.raises(ValueError, match=r"fraction in \(0, 1\]"):
        topk_iou(torch.rand(1, 4, 4), torch.rand(1, 4, 4), top_k=0.0)
