"""Cascading model-parameter randomisation on a copy of a tiny timm ViT."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradskip_lightning.families.timm_vit import adapter_for
from gradskip_lightning.metrics import parameter_randomisation
from tests.conftest import make_tiny_vit
from tests.core.helpers import split_head

from .helpers import Wrapper


def saliency(model: nn.Module, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """A real (simple) explanation: |d logit / d x| summed over channels, (B, H, W)."""
    images = images.clone().requires_grad_(True)
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(model(images).gather(1, targets[:, None]).sum(), images)
    return grad.abs().sum(1)


def test_cascade_decorrelates_maps_and_never_touches_the_model():
    model = Wrapper(make_tiny_vit(depth=2)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    images, targets = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    rng = torch.random.get_rng_state()
    curve = parameter_randomisation(model, images, targets, saliency, seed=0, cascade_for=adapter_for)
    assert curve.layers == ("head", "blocks.1", "blocks.0")
    assert curve.similarity.shape == (3, 4)
    assert ((curve.similarity >= -1) & (curve.similarity <= 1)).all()
    assert curve.mean[-1] < 0.5  # fully randomised: maps well away from the original ones
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # bit-identical
    assert not model.training and all(p.grad is None for p in model.parameters())
    assert torch.equal(torch.random.get_rng_state(), rng)  # the global RNG is left alone
    again = parameter_randomisation(model, images, targets, saliency, seed=0, cascade_for=adapter_for)
    torch.testing.assert_close(again.similarity, curve.similarity, atol=0, rtol=0)
    other = parameter_randomisation(
        model, images, targets, saliency, similarity="topk_iou", seed=1, cascade_for=adapter_for
    )
    assert ((other.similarity >= 0) & (other.similarity <= 1)).all()


def test_an_external_head_is_randomised_first():
    headed = make_tiny_vit(depth=2)
    images, targets = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    curve = parameter_randomisation(split_head(headed), images, targets, saliency, seed=0, cascade_for=adapter_for)
    reference = parameter_randomisation(headed, images, targets, saliency, seed=0, cascade_for=adapter_for)
    assert curve.layers == ("head", "blocks.1", "blocks.0")
    # The head outside the backbone is re-initialised at step 0 exactly as the backbone's own head.
    torch.testing.assert_close(curve.similarity, reference.similarity)


def test_rejects_a_missing_cascade_models_without_a_vit_and_unknown_similarity(tiny_vit):
    images, targets = torch.randn(1, 3, 32, 32), torch.tensor([0])
    with pytest.raises(TypeError, match="cascade_for"):  # no longer guessed: the caller passes it
        parameter_randomisation(tiny_vit, images, targets, saliency)
    with pytest.raises(TypeError, match="cascade_for must be a callable model -> Cascading"):
        parameter_randomisation(tiny_vit, images, targets, saliency, cascade_for=adapter_for(tiny_vit))
    with pytest.raises(TypeError, match="Linear as a timm_vit model: it holds 0"):
        parameter_randomisation(nn.Linear(3, 2), images, targets, saliency, cascade_for=adapter_for)
    with pytest.raises(ValueError, match="similarity must be"):
        parameter_randomisation(tiny_vit, images, targets, saliency, similarity="cosine", cascade_for=adapter_for)
    with pytest.raises(TypeError, match="similarity must be"):
        parameter_randomisation(tiny_vit, images, targets, saliency, similarity=0.5, cascade_for=adapter_for)
