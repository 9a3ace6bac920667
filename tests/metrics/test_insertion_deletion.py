"""Insertion / deletion AUC against a numpy reference, a hand-built case and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradskip_lightning.metrics import InsertionDeletion, insertion_deletion
from tests.conftest import make_tiny_vit

from .helpers import (
    mean_cell_segmenter,
    np_default_blur,
    np_insertion_start,
    np_paste,
    np_patch_relevance,
    np_region_score,
    np_softmax_probs,
    np_trapezoid,
    one_patch_case,
)


def np_insertion_deletion(model, images, targets, maps, patch, steps, baseline, start="blur"):
    """Plain-loop reference: perturbed images built one by one, scored in one forward per image."""
    insertion, deletion = [], []
    for b in range(len(images)):
        image, target = images[b].numpy(), int(targets[b])
        order = np.argsort(-np_patch_relevance(maps[b].numpy(), patch), kind="stable")
        counts = [int(np.floor(k * len(order) / steps + 0.5)) for k in range(steps + 1)]
        blurred = np_insertion_start(image, start)
        removed = {"zeros": np.zeros_like(image), "blur": np_default_blur(image)}[baseline]
        deleted = [np_paste(image, removed, order[:n], patch) for n in counts]
        inserted = [np_paste(blurred, image, order[:n], patch) for n in counts]
        probs = np_softmax_probs(model, deleted + inserted, [target] * (2 * len(counts)))
        deletion.append(np_trapezoid(list(probs[: len(counts)])))
        insertion.append(np_trapezoid(list(probs[len(counts) :])))
    return np.array(insertion), np.array(deletion)


@pytest.mark.parametrize(
    ("steps", "baseline", "start"),
    [(16, "zeros", "blur"), (5, "blur", "blur"), (16, "zeros", "rise"), (5, "blur", "rise"), (4, "zeros", "mean"),
     (4, "zeros", "zeros")],
)  # fmt: skip
def test_matches_numpy_reference_on_random_inputs(steps, baseline, start):
    model = make_tiny_vit(seed=1).double()
    generator = torch.Generator().manual_seed(steps)
    images = torch.randn(3, 3, 32, 32, generator=generator, dtype=torch.float64)
    maps = torch.randn(3, 32, 32, generator=generator, dtype=torch.float64)
    targets = torch.tensor([0, 2, 3])
    scores = insertion_deletion(
        model, images, targets, maps, patch_size=8, steps=steps, deletion_baseline=baseline, insertion_start=start,
        batch_size=64,
    )  # fmt: skip
    insertion, deletion = np_insertion_deletion(model, images, targets, maps, 8, steps, baseline, start)
    np.testing.assert_allclose(scores["insertion_start"].numpy(), scores["insertion_curve"][:, 0].numpy())
    np.testing.assert_allclose(scores["insertion"].numpy(), insertion, atol=1e-6, rtol=0)
    np.testing.assert_allclose(scores["deletion"].numpy(), deletion, atol=1e-6, rtol=0)
    np.testing.assert_allclose(scores["insertion_minus_deletion"].numpy(), insertion - deletion, atol=1e-6, rtol=0)
    assert scores["insertion_curve"].shape == (3, steps + 1)


def test_tensor_baseline_is_used_for_deletion():
    model = make_tiny_vit(seed=1).double()
    images = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    maps = torch.rand(2, 32, 32, dtype=torch.float64)
    targets = torch.tensor([1, 2])
    zeros = insertion_deletion(model, images, targets, maps, patch_size=8, deletion_baseline="zeros")
    given = insertion_deletion(model, images, targets, maps, patch_size=8, deletion_baseline=torch.zeros(3, 1, 1))
    two = torch.full((3, 1, 1), 2.0)
    shifted = insertion_deletion(model, images, targets, maps, patch_size=8, deletion_baseline=two)
    torch.testing.assert_close(given["deletion"], zeros["deletion"])
    assert not torch.allclose(shifted["deletion"], zeros["deletion"])
    torch.testing.assert_close(shifted["insertion"], zeros["insertion"])


def test_one_patch_model_right_map_floor_deletion_ceiling_insertion():
    model, images, targets, maps = one_patch_case()
    floor = 1 / (1 + np.exp(5))  # p(class 0) with the patch gone (m = 0)
    ceiling = 1 / (1 + np.exp(-5))  # with the pattern present (m = 1)
    right = insertion_deletion(model, images, targets, maps, patch_size=8, steps=16)
    # deletion: ceiling at 0 %, floor from the first step on: (ceiling + floor) / 2 / 16 + 15 / 16 * floor
    np.testing.assert_allclose(right["deletion"].numpy(), (ceiling + floor) / 32 + 15 / 16 * floor, atol=1e-6)
    assert (right["deletion"] < 0.05).all()
    assert (right["insertion"] > 0.95).all()  # blurred start (m ~ 0.02), revealed at the first step
    reversed_ = insertion_deletion(model, images, targets, -maps, patch_size=8, steps=16)
    assert (reversed_["deletion"] > 0.95).all()
    assert (reversed_["insertion"] < 0.05).all()


def test_metric_class_averages_over_updates():
    model = make_tiny_vit().double()
    images = torch.randn(6, 3, 32, 32, dtype=torch.float64)
    maps = torch.rand(6, 32, 32, dtype=torch.float64)
    targets = torch.tensor([0, 1, 2, 3, 0, 1])
    metric = InsertionDeletion(patch_size=8, steps=8)
    metric.update(model, images[:4], targets[:4], maps[:4])
    metric.update(model, images[4:], targets[4:], maps[4:])
    whole = insertion_deletion(model, images, targets, maps, patch_size=8, steps=8)
    result = metric.compute()
    assert set(result) == {"insertion", "deletion", "insertion_minus_deletion", "insertion_start"}
    for key in result:
        torch.testing.assert_close(result[key], whole[key].mean(), atol=1e-12, rtol=0)


def test_bad_inputs_raise_clear_errors(tiny_vit):
    images, targets, maps = torch.randn(2, 3, 32, 32), torch.tensor([0, 1]), torch.rand(2, 32, 32)
    with pytest.raises(ValueError, match=r"maps \(B, H, W\) must match images"):
        insertion_deletion(tiny_vit, images, targets, maps[:, :16], patch_size=8)
    with pytest.raises(ValueError, match=r"maps \(B, H, W\) must match images"):
        insertion_deletion(tiny_vit, images, targets, maps[:1], patch_size=8)
    with pytest.raises(ValueError, match="NaN"):
        insertion_deletion(tiny_vit, images, targets, maps.masked_fill(maps > 0.9, float("nan")), patch_size=8)
    with pytest.raises(ValueError, match="steps must be in"):
        insertion_deletion(tiny_vit, images, targets, maps, patch_size=8, steps=17)
    with pytest.raises(ValueError, match=r"targets must have shape \(2,\)"):
        insertion_deletion(tiny_vit, images, targets[:1], maps, patch_size=8)
    with pytest.raises(ValueError, match="not a multiple of the patch size"):
        insertion_deletion(tiny_vit, images, targets, maps, patch_size=6)
    with pytest.raises(TypeError, match="patch_size"):  # no longer guessed from the model
        insertion_deletion(tiny_vit, images, targets, maps)
    with pytest.raises(TypeError, match="patch_size is required"):
        insertion_deletion(tiny_vit, images, targets, maps, patch_size=None)
    with pytest.raises(TypeError, match="patch_size"):
        InsertionDeletion(steps=4)
    with pytest.raises(TypeError, match="steps must be an int"):
        InsertionDeletion(patch_size=8, steps=4.0)


class TwoWay(torch.nn.Module):
    """Logits [x_c, 0] of one class c of a model: their softmax at 0 is the sigmoid of x_c."""

    def __init__(self, model: torch.nn.Module, cls: int) -> None:
        super().__init__()
        self.model, self.cls = model, cls

    def forward(self, images):
        logit = self.model(images)[:, self.cls]
        return torch.stack([logit, torch.zeros_like(logit)], dim=1)


def test_sigmoid_activation_scores_each_label_alone():
    model = make_tiny_vit(seed=1).double()
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(3, 3, 32, 32, generator=generator, dtype=torch.float64)
    maps = torch.randn(3, 32, 32, generator=generator, dtype=torch.float64)
    targets = torch.full((3,), 2)
    scores = insertion_deletion(model, images, targets, maps, patch_size=8, steps=4, activation="sigmoid")
    insertion, deletion = np_insertion_deletion(TwoWay(model, 2), images, torch.zeros(3), maps, 8, 4, "zeros")
    np.testing.assert_allclose(scores["insertion"].numpy(), insertion, atol=1e-6, rtol=0)
    np.testing.assert_allclose(scores["deletion"].numpy(), deletion, atol=1e-6, rtol=0)
    softmax = insertion_deletion(model, images, targets, maps, patch_size=8, steps=4)
    assert not torch.allclose(softmax["insertion"], scores["insertion"])
    metric = InsertionDeletion(patch_size=8, steps=4, activation="sigmoid")
    metric.update(model, images, targets, maps)
    assert float(metric.compute()["insertion"]) == pytest.approx(insertion.mean(), abs=1e-6)
    with pytest.raises(ValueError, match="activation must be one of"):
        InsertionDeletion(patch_size=8, activation="relu")


# ---------------------------------------------------------------- segmentation: the mean region logit


def np_region_insertion_deletion(images, targets, maps, regions, patch, steps, baseline, start="blur"):
    """Plain-loop reference for :func:`helpers.mean_cell_segmenter`: curves of the mean region logit."""
    insertion, deletion = [], []
    for b in range(len(images)):
        image, target, region = images[b].numpy(), int(targets[b]), regions[b].numpy()
        order = np.argsort(-np_patch_relevance(maps[b].numpy(), patch), kind="stable")
        counts = [int(np.floor(k * len(order) / steps + 0.5)) for k in range(steps + 1)]
        blurred = np_insertion_start(image, start)
        removed = {"zeros": np.zeros_like(image), "blur": np_default_blur(image)}[baseline]
        deletion.append([np_region_score(np_paste(image, removed, order[:n], patch), target, region) for n in counts])
        insertion.append([np_region_score(np_paste(blurred, image, order[:n], patch), target, region) for n in counts])
    return np.array(insertion), np.array(deletion)


@pytest.mark.parametrize(("steps", "baseline"), [(16, "zeros"), (5, "blur")])
def test_regions_score_the_mean_region_logit_like_numpy(steps, baseline):
    generator = torch.Generator().manual_seed(steps)
    images = torch.randn(3, 3, 32, 32, generator=generator, dtype=torch.float64) + 1
    maps = torch.randn(3, 32, 32, generator=generator, dtype=torch.float64)
    regions = torch.rand(3, 8, 8, generator=generator) > 0.7  # on the 8 x 8 logits grid
    targets = torch.tensor([0, 1, 0])
    scores = insertion_deletion(
        mean_cell_segmenter(),
        images,
        targets,
        maps,
        patch_size=8,
        steps=steps,
        deletion_baseline=baseline,
        batch_size=7,
        regions=regions,
    )
    insertion, deletion = np_region_insertion_deletion(images, targets, maps, regions, 8, steps, baseline)
    np.testing.assert_allclose(scores["insertion_curve"].numpy(), insertion, atol=1e-12, rtol=0)
    np.testing.assert_allclose(scores["deletion_curve"].numpy(), deletion, atol=1e-12, rtol=0)
    np.testing.assert_allclose(scores["deletion"].numpy(), [np_trapezoid(list(c)) for c in deletion], atol=1e-12)
    assert scores["insertion_curve"][:, -1].abs().max() > 1  # logits, not probabilities


def test_regions_deleting_the_object_patch_first_drops_its_logit_to_zero():
    images = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    images[:, 0] = 0.0
    images[:, 0, 8:16, 16:24] = 1.0  # channel 0 is 1 on patch (1, 2) only
    regions = torch.zeros(2, 8, 8, dtype=torch.bool)
    regions[:, 2:4, 4:6] = True  # the logit cells of patch (1, 2): target logit 1 until it is deleted
    maps = torch.rand(2, 32, 32, dtype=torch.float64)
    maps[:, 8:16, 16:24] = 10.0  # ranked first
    targets = torch.zeros(2, dtype=torch.long)
    model = mean_cell_segmenter()
    right = insertion_deletion(model, images, targets, maps, patch_size=8, steps=16, regions=regions)
    expected = torch.zeros(2, 17, dtype=torch.float64)
    expected[:, 0] = 1.0
    torch.testing.assert_close(right["deletion_curve"], expected)
    torch.testing.assert_close(right["deletion"], torch.full((2,), 1 / 32, dtype=torch.float64))
    assert (right["insertion_curve"][:, 0] < 0.9).all()  # blurred: the object's value spread out
    torch.testing.assert_close(right["insertion_curve"][:, 1:], torch.ones(2, 16, dtype=torch.float64))
    wrong = insertion_deletion(model, images, targets, -maps, patch_size=8, steps=16, regions=regions)
    torch.testing.assert_close(wrong["deletion"], torch.full((2,), 1 - 1 / 32, dtype=torch.float64))
    metric = InsertionDeletion(patch_size=8, steps=16)
    metric.update(model, images[:1], targets[:1], maps[:1], regions[:1])
    metric.update(model, images[1:], targets[1:], -maps[1:], regions=regions[1:])
    assert float(metric.compute()["deletion"]) == pytest.approx(0.5)


def test_regions_bad_inputs_raise_clear_errors(tiny_vit):
    images, targets, maps = torch.randn(2, 3, 32, 32), torch.tensor([0, 1]), torch.rand(2, 32, 32)
    model, regions = mean_cell_segmenter().float(), torch.ones(2, 8, 8, dtype=torch.bool)
    with pytest.raises(TypeError, match="regions must be a bool tensor"):
        insertion_deletion(model, images, targets, maps, patch_size=8, regions=regions.float())
    with pytest.raises(ValueError, match=r"regions must have shape \(B, h, w\) with B = 2"):
        insertion_deletion(model, images, targets, maps, patch_size=8, regions=regions[:1])
    empty = regions.clone()
    empty[1] = False
    with pytest.raises(ValueError, match=r"regions \[1\] are empty"):
        insertion_deletion(model, images, targets, maps, patch_size=8, regions=empty)
    with pytest.raises(ValueError, match=r"must return logits \(n, K, h, w\) on the same grid, got \(\d+, 4\)"):
        insertion_deletion(tiny_vit, images, targets, maps, patch_size=8, regions=regions)  # a classifier
    with pytest.raises(ValueError, match=r"on the same grid, got \(\d+, 2, 8, 8\)"):
        insertion_deletion(model, images, targets, maps, patch_size=8, regions=regions[:, :4, :4])
    with pytest.raises(ValueError, match=r"targets must be in \[0, 2\)"):
        insertion_deletion(model, images, torch.tensor([0, 2]), maps, patch_size=8, regions=regions)
