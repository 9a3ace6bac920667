"""Patch size, baselines, blur and the batched runner."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gradskip_lightning.core.validation import as_patch_size
from gradskip_lightning.metrics import (
    CountingModel,
    gaussian_blur,
    insertion_deletion,
    make_baseline,
    perturbed_probabilities,
    region_scores,
)
from gradskip_lightning.metrics.perturbation import patch_relevance, rank_patches, step_counts
from tests.conftest import make_tiny_vit

from .helpers import mean_cell_segmenter, np_gaussian_blur, np_patch_relevance


def test_patch_size_is_an_int_or_a_pair_given_by_the_caller():
    assert as_patch_size(8, (32, 32)) == (8, 8)
    assert as_patch_size((4, 8), (32, 32)) == as_patch_size([4, 8]) == (4, 8)
    assert as_patch_size(np.int64(8)) == (8, 8)
    for bad in (None, 8.0, "8", True, (8, 8.0)):
        with pytest.raises(TypeError, match="patch_size"):
            as_patch_size(bad, (32, 32))
    with pytest.raises(ValueError, match="got 3 values"):
        as_patch_size((8, 8, 8))
    with pytest.raises(ValueError, match="must be positive"):
        as_patch_size((0, 8))
    with pytest.raises(ValueError, match=r"image size \(32, 32\) is not a multiple of the patch size \(5, 5\)"):
        as_patch_size(5, (32, 32))


def test_step_counts_round_k_p_over_k():
    assert step_counts(16, 16).tolist() == list(range(17))
    assert step_counts(16, 3).tolist() == [0, 5, 11, 16]  # 5.33 -> 5, 10.67 -> 11
    assert step_counts(4, 4).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="steps must be in"):
        step_counts(16, 17)


def test_patch_relevance_and_stable_ranking_match_numpy():
    maps = torch.rand(3, 32, 32, dtype=torch.float64)
    maps[0] = 1.0  # all patches tie: row-major order
    relevance = patch_relevance(maps, (8, 8))
    for b in range(3):
        reference = np_patch_relevance(maps[b].numpy(), 8)
        np.testing.assert_allclose(relevance[b].numpy(), reference, atol=1e-12)
        assert rank_patches(relevance)[b].tolist() == np.argsort(-reference, kind="stable").tolist()
    assert rank_patches(relevance)[0].tolist() == list(range(16))


@pytest.mark.parametrize("size", [32, 224])
def test_default_blur_matches_numpy_with_scaled_kernel(size):
    images = torch.rand(2, 3, size, size, dtype=torch.float64)
    sigma = 5 * size / 224
    kernel = max(3, 2 * round(sigma) + 1)
    assert (size, kernel) in {(32, 3), (224, 11)}
    blurred = gaussian_blur(images)
    for b in range(2):
        np.testing.assert_allclose(blurred[b].numpy(), np_gaussian_blur(images[b].numpy(), kernel, sigma), atol=1e-6)


def test_baselines_and_their_errors():
    images = torch.rand(2, 3, 8, 8)
    assert torch.equal(make_baseline(images, "zeros"), torch.zeros_like(images))
    colour = torch.tensor([1.0, 2.0, 3.0])[:, None, None]
    assert torch.equal(make_baseline(images, colour)[1, :, 4, 4], torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="does not broadcast"):
        make_baseline(images, torch.zeros(4, 8, 8))
    with pytest.raises(ValueError, match='"zeros", "blur" or a tensor'):
        make_baseline(images, "noise")


def test_runner_chunks_give_the_same_probabilities_and_count_forwards(tiny_vit):
    torch.manual_seed(0)
    base, fill = torch.randn(3, 3, 32, 32), torch.zeros(3, 3, 32, 32)
    masks = torch.rand(3, 5, 4, 4) > 0.5
    targets = torch.tensor([0, 3, 1])
    counted = CountingModel(tiny_vit)
    whole = perturbed_probabilities(counted, base, fill, masks, targets, batch_size=64)
    assert counted.calls == 1 and counted.images == 15
    chunked = perturbed_probabilities(counted, base, fill, masks, targets, batch_size=4)
    assert counted.calls == 1 + math.ceil(15 / 4)
    torch.testing.assert_close(chunked, whole, atol=1e-6, rtol=0)
    # one image by hand: sample 2, step 3
    pixel = masks[2, 3].repeat_interleave(8, 0).repeat_interleave(8, 1)
    with torch.no_grad():
        expected = tiny_vit(torch.where(pixel, fill[2], base[2])[None]).softmax(1)[0, 1]
    torch.testing.assert_close(whole[2, 3], expected, atol=1e-6, rtol=0)


def test_insertion_deletion_batches_forwards_and_leaves_the_model_alone():
    vit = make_tiny_vit().train()  # the caller's mode is kept, not changed
    images, targets, maps = torch.randn(5, 3, 32, 32), torch.zeros(5, dtype=torch.long), torch.rand(5, 32, 32)
    counted = CountingModel(vit)
    before = {k: v.clone() for k, v in vit.state_dict().items()}
    insertion_deletion(counted, images, targets, maps, patch_size=8, steps=16, batch_size=50)
    # the 2 x 5 x 15 inner steps in chunks of 50; the clean images, the starts and one zeros image once each
    assert counted.images == 2 * 5 * 15 + 5 + 5 + 1 and counted.calls == 3 + 3
    assert vit.training and all(p.grad is None for p in vit.parameters())
    assert all(torch.equal(before[k], v) for k, v in vit.state_dict().items())


def test_runner_rejects_bad_model_output_and_targets(tiny_vit):
    base = torch.randn(1, 3, 32, 32)
    masks = torch.zeros(1, 1, 4, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"logits \(n, num_classes\)"):
        perturbed_probabilities(lambda x: x.sum(), base, base, masks, torch.tensor([0]), batch_size=8)
    with pytest.raises(ValueError, match=r"targets must be in \[0, 4\); got \[4\]"):
        perturbed_probabilities(tiny_vit, base, base, masks, torch.tensor([4]), batch_size=8)
    with pytest.raises(ValueError, match="batch_size"):
        perturbed_probabilities(tiny_vit, base, base, masks, torch.tensor([0]), batch_size=0)


def test_runner_scores_sigmoid_or_softmax_probabilities(tiny_vit):
    from gradskip_lightning.metrics.perturbation import class_probabilities

    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    masks = torch.zeros(2, 1, 4, 4, dtype=torch.bool)  # one step, nothing perturbed: the plain images
    targets = torch.tensor([1, 3])
    with torch.no_grad():
        logits = tiny_vit(images)
    for activation, expected in (("softmax", logits.softmax(1)), ("sigmoid", logits.sigmoid())):
        probs = perturbed_probabilities(tiny_vit, images, images, masks, targets, batch_size=4, activation=activation)
        torch.testing.assert_close(probs[:, 0], expected[[0, 1], targets])
        torch.testing.assert_close(class_probabilities(logits, targets, activation), expected[[0, 1], targets])
    with pytest.raises(ValueError, match="activation must be one of"):
        perturbed_probabilities(tiny_vit, images, images, masks, targets, batch_size=4, activation="relu")


def test_region_scores_average_the_target_logit_over_the_region_only():
    logits = torch.randn(3, 4, 6, 5, dtype=torch.float64)
    regions = torch.rand(3, 6, 5, generator=torch.Generator().manual_seed(0)) > 0.5
    targets = torch.tensor([3, 0, 2])
    expected = torch.stack([logits[b, targets[b]][regions[b]].mean() for b in range(3)])
    torch.testing.assert_close(region_scores(logits, targets, regions), expected)
    logits[~regions[:, None].expand_as(logits)] = float("inf")  # outside the region: never read
    torch.testing.assert_close(region_scores(logits, targets, regions), expected)


def test_runner_with_regions_chunks_give_the_same_scores():
    model = CountingModel(mean_cell_segmenter())
    generator = torch.Generator().manual_seed(1)
    images = torch.randn(3, 3, 32, 32, generator=generator, dtype=torch.float64)
    masks = torch.rand(3, 5, 4, 4, generator=generator) > 0.5
    regions = torch.rand(3, 8, 8, generator=generator) > 0.5
    targets = torch.tensor([1, 0, 1])
    scores = [
        perturbed_probabilities(
            model, images, torch.zeros_like(images), masks, targets, batch_size=size, regions=regions
        )
        for size in (4, 15)
    ]
    torch.testing.assert_close(scores[0], scores[1], atol=1e-12, rtol=0)
    assert model.calls == 4 + 1
    with torch.no_grad():  # step by step: the pasted images, then the mean region logit
        pixels = masks.repeat_interleave(8, dim=2).repeat_interleave(8, dim=3)
        for s in range(5):
            perturbed = torch.where(pixels[:, s, None], torch.zeros_like(images), images)
            expected = region_scores(model.model(perturbed), targets, regions)
            torch.testing.assert_close(scores[0][:, s], expected, atol=1e-12, rtol=0)
