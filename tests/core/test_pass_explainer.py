"""Several methods explained from one pass: the same maps as each method's own pass, in fewer forwards."""

from __future__ import annotations

import pytest
import torch

from gradskip_lightning.core.pass_explainer import explain_each
from gradskip_lightning.families import explainer_for
from tests.conftest import make_tiny_vit


def _forwards(model: torch.nn.Module) -> list[int]:
    """A counter of ``model``'s forward calls (one element per call)."""
    calls: list[int] = []
    model.register_forward_hook(lambda *_: calls.append(1))
    return calls


def test_methods_that_capture_alike_share_one_pass_and_give_each_methods_own_maps(tiny_vit):
    images = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([0, 2, 1])
    names = ["chefer", "lrp", "gradskip", "rollout"]  # gradients, conservative, gradients, forward
    explainers = [explainer_for(tiny_vit, method=name) for name in names]
    alone = [explainer.explain(images, targets) for explainer in explainers]
    calls = _forwards(tiny_vit)
    each = explain_each(explainers, images, targets)
    assert len(calls) == 3  # chefer and gradskip in one pass; lrp and rollout each in its own
    for name, one, shared in zip(names, alone, each, strict=True):
        assert shared.method == name and torch.equal(shared.token_maps, one.token_maps)
        assert torch.equal(shared.targets, targets) and torch.equal(shared.logits, one.logits)
    assert torch.equal(each[2].head_weights, alone[2].head_weights)  # GradSkip's internals too
    with pytest.raises(ValueError, match="capture mode"):
        explainers[0].explain_together([explainers[1]], images, targets)
    other = explainer_for(make_tiny_vit(seed=1), method="gradskip")
    with pytest.raises(ValueError, match="another network"):
        explainers[0].explain_together([other], images, targets)
