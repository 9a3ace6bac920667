"""Pointing game against a numpy reference, hand cases, per-class means and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradskip_lightning.metrics import PointingGame, default_tolerance, pointing_game


def np_pointing(maps: np.ndarray, masks: np.ndarray, tolerance: float) -> np.ndarray:
    hits = []
    for m, mask in zip(maps, masks):
        r, c = divmod(int(np.argmax(m)), m.shape[1])
        hit = False
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                if mask[i, j] and (i - r) ** 2 + (j - c) ** 2 <= tolerance**2:
                    hit = True
        hits.append(hit)
    return np.array(hits)


def test_default_tolerance_is_15_px_at_224():
    assert default_tolerance((224, 224)) == 15
    assert default_tolerance((32, 32)) == pytest.approx(15 * 32 / 224)


@pytest.mark.parametrize("tolerance", [None, 0.0, 3.5])
def test_matches_numpy_reference_on_random_inputs(tolerance):
    generator = torch.Generator().manual_seed(0)
    maps = torch.rand(40, 32, 32, generator=generator)
    masks = torch.rand(40, 32, 32, generator=generator) > 0.97
    masks[:, 0, 0] = True  # never empty
    hits = pointing_game(maps, masks, tolerance=tolerance)
    pixels = default_tolerance((32, 32)) if tolerance is None else tolerance
    reference = np_pointing(maps.numpy(), masks.numpy(), pixels)
    np.testing.assert_array_equal(hits.numpy(), reference)
    assert 0 < reference.sum() < 40


def test_hand_case_tolerance_in_pixels():
    maps = torch.zeros(1, 32, 32)
    maps[0, 10, 10] = 1.0
    mask = torch.zeros(1, 32, 32, dtype=torch.bool)
    mask[0, 10, 13] = True  # 3 px to the right of the maximum
    assert not pointing_game(maps, mask, tolerance=2.9).item()
    assert pointing_game(maps, mask, tolerance=3.0).item()
    mask_int = mask.long()
    assert pointing_game(maps, mask_int, tolerance=3.0).item()


def test_metric_overall_and_class_mean():
    maps = torch.zeros(4, 16, 16)
    maps[:, 2, 2] = 1.0
    masks = torch.zeros(4, 16, 16, dtype=torch.bool)
    masks[:, 12, 12] = True
    masks[0, 2, 2] = masks[1, 2, 2] = masks[2, 2, 2] = True  # hits: images 0, 1, 2
    targets = torch.tensor([0, 0, 1, 1])  # class 0: 2/2, class 1: 1/2, class 2: unseen
    metric = PointingGame(num_classes=3, tolerance=0)
    metric.update(maps[:3], masks[:3], targets[:3])
    metric.update(maps[3:], masks[3:], targets[3:])
    result = metric.compute()
    assert result["pointing_game"].item() == pytest.approx(3 / 4)
    assert result["pointing_game_class_mean"].item() == pytest.approx((1 + 0.5) / 2)


def test_bad_inputs_raise_clear_errors():
    maps, masks = torch.rand(2, 8, 8), torch.ones(2, 8, 8, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"masks \[1\] are empty"):
        pointing_game(maps, torch.stack([masks[0], ~masks[1]]))
    with pytest.raises(ValueError, match="masks must have the shape of maps"):
        pointing_game(maps, masks[:, :4])
    with pytest.raises(ValueError, match="NaN"):
        pointing_game(maps.masked_fill(maps > 0.5, float("nan")), masks)
    with pytest.raises(ValueError, match=r"only the values 0 and 1"):
        pointing_game(maps, masks.float() * 2)
    with pytest.raises(ValueError, match=r"shape \(B, H, W\)"):
        pointing_game(maps[0], masks[0])
    with pytest.raises(ValueError, match=r"targets must be in \[0, 2\); got \[0, 2\]"):
        PointingGame(num_classes=2).update(maps, masks, torch.tensor([0, 2]))
