"""Segmentation scores against numpy references (pooled and per image), sklearn and hand cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradskip_lightning.metrics import (
    SegmentationScores,
    average_precision,
    segmentation_scores,
    segmentation_scores_per_image,
)


def np_confusion(m: np.ndarray, mask: np.ndarray) -> np.ndarray:
    predicted = m > m.mean()
    return np.array(
        [np.sum(predicted & mask), np.sum(predicted & ~mask), np.sum(~predicted & mask), np.sum(~predicted & ~mask)]
    )


def np_scores(confusion: np.ndarray) -> dict[str, float]:
    tp, fp, fn, tn = confusion.astype(float)
    with np.errstate(invalid="ignore"):
        fg, bg = tp / (tp + fp + fn), tn / (tn + fp + fn)
    accuracy = (tp + tn) / (tp + fp + fn + tn)
    return {"pixel_accuracy": accuracy, "iou_foreground": fg, "iou_background": bg, "mean_iou": (fg + bg) / 2}


def np_average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    """scikit-learn's definition, one threshold at a time: sum of (R_n - R_n-1) * P_n, highest threshold first."""
    scores, labels = scores.ravel(), labels.ravel()
    if not labels.any():
        return float("nan")
    total, previous_recall = 0.0, 0.0
    for threshold in sorted(set(scores.tolist()), reverse=True):
        selected = scores >= threshold
        hits = np.sum(selected & labels)
        recall = hits / labels.sum()
        total += (recall - previous_recall) * hits / selected.sum()
        previous_recall = recall
    return total


def random_case(seed: int = 0, batch: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """Maps (B, 16, 24) with ties (values rounded to 0.05) and masks; image 3 has no object."""
    generator = torch.Generator().manual_seed(seed)
    maps = (torch.rand(batch, 16, 24, generator=generator) ** 3 * 20).round() / 20
    masks = torch.rand(batch, 16, 24, generator=generator) > 0.6
    masks[3] = False
    return maps, masks


def test_pooled_scores_match_numpy_reference_accumulated_over_batches():
    maps, masks = random_case()
    metric = SegmentationScores()
    metric.update(maps[:4], masks[:4])
    metric.update(maps[4:], masks[4:])
    pooled = sum(np_confusion(m, mask) for m, mask in zip(maps.numpy(), masks.numpy()))
    reference = np_scores(pooled)
    precisions = [np_average_precision(m, mask) for m, mask in zip(maps.numpy(), masks.numpy())]
    reference["average_precision"] = np.nanmean(precisions)  # image 3 (empty mask) left out
    for scores in (metric.compute(), segmentation_scores(maps, masks)):
        assert set(scores) == set(reference)
        for key, value in reference.items():
            assert scores[key].item() == pytest.approx(value, abs=1e-9), key


def test_per_image_scores_match_numpy_reference():
    maps, masks = random_case(seed=1)
    scores = segmentation_scores_per_image(maps, masks)
    assert set(scores) == {"pixel_accuracy", "iou_foreground", "iou_background", "mean_iou", "average_precision"}
    for b, (m, mask) in enumerate(zip(maps.numpy(), masks.numpy())):
        reference = {**np_scores(np_confusion(m, mask)), "average_precision": np_average_precision(m, mask)}
        for key, value in reference.items():
            assert scores[key].shape == (len(maps),)
            np.testing.assert_allclose(scores[key][b].item(), value, atol=1e-9, err_msg=f"{key}, image {b}")
    assert scores["average_precision"][3].isnan()  # no object: no positives to rank
    assert scores["iou_foreground"][3].item() == 0.0  # no object, but pixels predicted as one


def test_average_precision_matches_sklearn():
    metrics = pytest.importorskip("sklearn.metrics")
    maps, masks = random_case(seed=2)
    precision = average_precision(maps, masks)
    for b in (0, 1, 2, 4, 9):
        expected = metrics.average_precision_score(masks[b].numpy().ravel(), maps[b].numpy().ravel())
        assert precision[b].item() == pytest.approx(expected, abs=1e-9)


def test_hand_cases():
    maps = torch.zeros(1, 4, 4)
    maps[0, :2, :2] = 1.0  # above the mean (0.25): the top-left 2 x 2 quarter
    masks = torch.zeros(1, 4, 4, dtype=torch.bool)
    masks[0, :2, :3] = True  # 6 pixels: 4 hit, 2 missed
    scores = segmentation_scores(maps, masks)
    assert scores["pixel_accuracy"].item() == pytest.approx(14 / 16)
    assert scores["iou_foreground"].item() == pytest.approx(4 / 6)
    assert scores["iou_background"].item() == pytest.approx(10 / 12)
    assert scores["mean_iou"].item() == pytest.approx((4 / 6 + 10 / 12) / 2)
    # AP: the 4 ones are all object (precision 1, recall 4/6), then the 12 tied zeros (precision 6/16)
    assert scores["average_precision"].item() == pytest.approx(4 / 6 * 1 + 2 / 6 * 6 / 16)

    ranked = torch.arange(16.0).reshape(1, 4, 4)  # 15 highest: object pixels at ranks 1, 3 and 4
    object_pixels = torch.zeros(1, 4, 4, dtype=torch.bool)
    object_pixels.view(-1)[[15, 13, 12]] = True
    assert average_precision(ranked, object_pixels).item() == pytest.approx((1 / 1 + 2 / 3 + 3 / 4) / 3)
    assert average_precision(ranked, ranked >= 12).item() == 1.0  # the object ranked first
    assert average_precision(torch.ones(1, 4, 4), object_pixels).item() == pytest.approx(3 / 16)  # no ranking


def test_scores_are_invariant_to_min_max_normalisation():
    maps, masks = random_case(seed=3)
    low, high = maps.amin(dim=(1, 2), keepdim=True), maps.amax(dim=(1, 2), keepdim=True)
    normalised = (maps - low) / (high - low)
    for key, value in segmentation_scores_per_image(maps, masks).items():
        torch.testing.assert_close(segmentation_scores_per_image(normalised, masks)[key], value, equal_nan=True)
        torch.testing.assert_close(segmentation_scores_per_image(3 * maps + 1, masks)[key], value, equal_nan=True)


def test_metric_without_any_object_gives_nan_average_precision():
    metric = SegmentationScores()
    metric.update(torch.rand(2, 8, 8), torch.zeros(2, 8, 8, dtype=torch.bool))
    result = metric.compute()
    assert result["average_precision"].isnan()
    assert result["iou_background"].item() > 0


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="masks must have the shape of maps"):
        segmentation_scores(torch.rand(2, 8, 8), torch.ones(2, 8, 9, dtype=torch.bool))
    with pytest.raises(ValueError, match="NaN"):
        segmentation_scores(torch.full((1, 8, 8), float("nan")), torch.ones(1, 8, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match="masks must be bool or hold only"):
        segmentation_scores_per_image(torch.rand(1, 8, 8), torch.full((1, 8, 8), 2))
    with pytest.raises(ValueError, match=r"maps must have shape \(B, H, W\)"):
        average_precision(torch.rand(8, 8), torch.ones(8, 8, dtype=torch.bool))
