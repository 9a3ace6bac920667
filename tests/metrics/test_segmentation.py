"""Segmentation scores against a numpy reference and a hand case."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gradskip_lightning.metrics import SegmentationScores, segmentation_scores


def np_segmentation(maps: np.ndarray, masks: np.ndarray) -> dict[str, float]:
    tp = fp = fn = tn = 0
    for m, mask in zip(maps, masks):
        predicted = m > m.mean()
        tp += np.sum(predicted & mask)
        fp += np.sum(predicted & ~mask)
        fn += np.sum(~predicted & mask)
        tn += np.sum(~predicted & ~mask)
    fg, bg = tp / (tp + fp + fn), tn / (tn + fp + fn)
    accuracy = (tp + tn) / (tp + fp + fn + tn)
    return {"pixel_accuracy": accuracy, "iou_foreground": fg, "iou_background": bg, "mean_iou": (fg + bg) / 2}


def test_matches_numpy_reference_accumulated_over_batches():
    generator = torch.Generator().manual_seed(0)
    maps = torch.rand(10, 16, 24, generator=generator) ** 3
    masks = torch.rand(10, 16, 24, generator=generator) > 0.6
    masks[3] = False  # an image without object is allowed
    metric = SegmentationScores()
    metric.update(maps[:4], masks[:4])
    metric.update(maps[4:], masks[4:])
    reference = np_segmentation(maps.numpy(), masks.numpy())
    for scores in (metric.compute(), segmentation_scores(maps, masks)):
        assert set(scores) == set(reference)
        for key, value in reference.items():
            assert scores[key].item() == pytest.approx(value, abs=1e-6)


def test_hand_case():
    maps = torch.zeros(1, 4, 4)
    maps[0, :2, :2] = 1.0  # above the mean (0.25): the top-left 2 x 2 quarter
    masks = torch.zeros(1, 4, 4, dtype=torch.bool)
    masks[0, :2, :3] = True  # 6 pixels: 4 hit, 2 missed
    scores = segmentation_scores(maps, masks)
    assert scores["pixel_accuracy"].item() == pytest.approx(14 / 16)
    assert scores["iou_foreground"].item() == pytest.approx(4 / 6)
    assert scores["iou_background"].item() == pytest.approx(10 / 12)
    assert scores["mean_iou"].item() == pytest.approx((4 / 6 + 10 / 12) / 2)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="masks must have the shape of maps"):
        segmentation_scores(torch.rand(2, 8, 8), torch.ones(2, 8, 9, dtype=torch.bool))
    with pytest.raises(ValueError, match="NaN"):
        segmentation_scores(torch.full((1, 8, 8), float("nan")), torch.ones(1, 8, 8, dtype=torch.bool))
