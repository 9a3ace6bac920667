"""Faithfulness violation test against a numpy reference, a hand-built case and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradskip_lightning.metrics import FaithfulnessViolation, faithfulness_violation
from tests.conftest import make_tiny_vit

from .helpers import (
    mean_cell_segmenter,
    np_default_blur,
    np_paste,
    np_patch_relevance,
    np_softmax_probs,
    one_patch_case,
)
from .test_insertion_deletion import TwoWay


def np_violation(model, images, targets, maps, patch, top_k, baseline):
    """Plain-loop reference: violation per image (all perturbed images scored in one forward)."""
    pairs, relevances, pair_targets = [], [], []
    for b in range(len(images)):
        image = images[b].numpy()
        relevance = np_patch_relevance(maps[b].numpy(), patch)
        chosen = np.argsort(-np.abs(relevance), kind="stable")[:top_k]
        removed = {"zeros": np.zeros_like(image), "blur": np_default_blur(image)}[baseline]
        pairs += [image, np_paste(image, removed, chosen, patch)]
        pair_targets += [int(targets[b])] * 2
        relevances.append(relevance[chosen].sum())
    probs = np_softmax_probs(model, pairs, pair_targets)
    return np.array([relevances[b] * (probs[2 * b] - probs[2 * b + 1]) < 0 for b in range(len(images))])


@pytest.mark.parametrize(("top_k", "baseline"), [(1, "zeros"), (3, "blur")])
def test_matches_numpy_reference_on_random_inputs(top_k, baseline):
    model = make_tiny_vit(seed=2).double()
    generator = torch.Generator().manual_seed(top_k)
    images = torch.randn(12, 3, 32, 32, generator=generator, dtype=torch.float64)
    maps = torch.randn(12, 32, 32, generator=generator, dtype=torch.float64)  # signed relevance
    targets = torch.arange(12) % 4
    violations = faithfulness_violation(model, images, targets, maps, patch_size=8, top_k=top_k, baseline=baseline)
    reference = np_violation(model, images, targets, maps, 8, top_k, baseline)
    assert violations.dtype == torch.bool
    np.testing.assert_array_equal(violations.numpy(), reference)
    assert 0 < reference.sum() < 12  # the draw exercises both outcomes


def test_one_patch_model_right_map_no_violation_reversed_map_violation():
    model, images, targets, maps = one_patch_case(batch=3)
    assert not faithfulness_violation(model, images, targets, maps, patch_size=8).any()
    assert faithfulness_violation(model, images, targets, -maps, patch_size=8).all()
    # the top-k variant removes the watched patch together with others: same verdict
    assert not faithfulness_violation(model, images, targets, maps, patch_size=8, top_k=4).any()


def test_metric_ratio_over_updates():
    model = make_tiny_vit(seed=2).double()
    images = torch.randn(10, 3, 32, 32, dtype=torch.float64)
    maps = torch.randn(10, 32, 32, dtype=torch.float64)
    targets = torch.arange(10) % 4
    metric = FaithfulnessViolation(patch_size=8)
    metric.update(model, images[:6], targets[:6], maps[:6])
    metric.update(model, images[6:], targets[6:], maps[6:])
    expected = faithfulness_violation(model, images, targets, maps, patch_size=8).double().mean()
    torch.testing.assert_close(metric.compute(), expected)


def test_bad_inputs_raise_clear_errors(tiny_vit):
    images, targets, maps = torch.randn(2, 3, 32, 32), torch.tensor([0, 1]), torch.rand(2, 32, 32)
    with pytest.raises(ValueError, match="must match images"):
        faithfulness_violation(tiny_vit, images, targets, maps.transpose(0, 1)[:2], patch_size=8)
    with pytest.raises(ValueError, match="NaN"):
        faithfulness_violation(tiny_vit, images, targets, maps / 0 * 0, patch_size=8)
    with pytest.raises(ValueError, match=r"top_k must be in \[1, 16\]"):
        faithfulness_violation(tiny_vit, images, targets, maps, patch_size=8, top_k=17)
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        FaithfulnessViolation(patch_size=8, top_k=0)


def test_sigmoid_activation_tests_each_label_alone():
    model = make_tiny_vit(seed=2).double()
    generator = torch.Generator().manual_seed(3)
    images = torch.randn(12, 3, 32, 32, generator=generator, dtype=torch.float64)
    maps = torch.randn(12, 32, 32, generator=generator, dtype=torch.float64)
    targets = torch.full((12,), 1)
    violations = faithfulness_violation(model, images, targets, maps, patch_size=8, activation="sigmoid")
    reference = np_violation(TwoWay(model, 1), images, torch.zeros(12), maps, 8, 1, "zeros")
    np.testing.assert_array_equal(violations.numpy(), reference)
    metric = FaithfulnessViolation(patch_size=8, activation="sigmoid")
    metric.update(model, images, targets, maps)
    assert float(metric.compute()) == pytest.approx(reference.mean())
    with pytest.raises(ValueError, match="activation must be one of"):
        faithfulness_violation(model, images, targets, maps, patch_size=8, activation="tanh")


def test_regions_score_the_mean_region_logit():
    images = torch.randn(4, 3, 32, 32, dtype=torch.float64)
    images[:, 0] = 0.0
    images[:, 0, 8:16, 16:24] = 1.0  # channel 0 is 1 on patch (1, 2) only: the object
    regions = torch.zeros(4, 8, 8, dtype=torch.bool)
    regions[:, 2:4, 4:6] = True
    maps = torch.rand(4, 32, 32, dtype=torch.float64)
    maps[:, 8:16, 16:24] = 10.0  # the object carries the largest relevance
    model = mean_cell_segmenter()
    # class 0 (logit 1 on the object, 0 once removed): positive relevance agrees, negative disagrees
    targets = torch.zeros(4, dtype=torch.long)
    assert not faithfulness_violation(model, images, targets, maps, patch_size=8, regions=regions).any()
    assert faithfulness_violation(model, images, targets, -maps, patch_size=8, regions=regions).all()
    # class 1 (logit -1, rises to 0 when the object goes): positive relevance is now the violation
    assert faithfulness_violation(model, images, 1 - targets, maps, patch_size=8, regions=regions).all()
    metric = FaithfulnessViolation(patch_size=8)
    metric.update(model, images[:2], targets[:2], maps[:2], regions[:2])
    metric.update(model, images[2:], targets[2:], -maps[2:], regions=regions[2:])
    assert float(metric.compute()) == 0.5
    with pytest.raises(ValueError, match=r"regions must have shape \(B, h, w\) with B = 4"):
        faithfulness_violation(model, images, targets, maps, patch_size=8, regions=regions[0])
