"""Class sensitivity: Spearman between the maps of the top-1 and top-2 classes, on a real tiny ViT."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import spearmanr

from gradskip_lightning.families.timm_vit import TimmViTExplainer
from gradskip_lightning.metrics import ClassSensitivity, class_sensitivity, explain_class_sensitivity
from gradskip_lightning.metrics.sensitivity import runner_up_classes
from tests.conftest import make_tiny_vit


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))


def test_runner_up_is_the_best_other_class():
    logits = torch.tensor([[0.0, 3.0, 2.0, 1.0], [5.0, 5.0, -1.0, 0.0]])
    assert runner_up_classes(logits, torch.tensor([1, 0])).tolist() == [2, 1]


def test_functional_matches_scipy_and_the_metric_averages_it():
    generator = torch.Generator().manual_seed(1)
    a = torch.rand(5, 8, 8, generator=generator, dtype=torch.float64)
    b = a + torch.rand(5, 8, 8, generator=generator, dtype=torch.float64)
    a[4] = 1.0  # constant map: undefined, left out of the mean
    result = class_sensitivity(a, b)
    for i in range(4):
        assert result[i].item() == pytest.approx(spearmanr(a[i].ravel(), b[i].ravel()).statistic, abs=1e-9)
    assert result[4].isnan()
    metric = ClassSensitivity()
    metric.update(a[:2], b[:2])
    metric.update(a[2:], b[2:])
    assert metric.compute().item() == pytest.approx(result[:4].mean().item(), abs=1e-12)
    assert not metric.higher_is_better


def test_rollout_is_class_agnostic():
    explainer = TimmViTExplainer(make_tiny_vit(), "rollout")
    sensitivity = explain_class_sensitivity(explainer, torch.randn(4, 3, 32, 32))
    assert sensitivity.shape == (4,)
    assert torch.equal(sensitivity, torch.ones(4, dtype=torch.float64))


@pytest.mark.parametrize("method", ["gradskip", "chefer"])
def test_gradient_methods_depend_on_the_class(method, images):
    explainer = TimmViTExplainer(make_tiny_vit(), method)
    sensitivity = explain_class_sensitivity(explainer, images)
    assert sensitivity.shape == (4,)
    assert (sensitivity < 0.999).all(), sensitivity
    # the maps really are of the top-1 and the runner-up class
    logits = explainer.explain(images).logits
    top2 = logits.topk(2, dim=1).indices
    direct = class_sensitivity(explainer.explain(images, top2[:, 0]).maps, explainer.explain(images, top2[:, 1]).maps)
    assert torch.allclose(sensitivity, direct, atol=1e-9)
