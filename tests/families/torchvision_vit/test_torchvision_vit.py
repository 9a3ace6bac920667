"""torchvision's ViT through its explicit-attention adapter: the same logits, the timm family's
maps for the same weights, the method doc's properties, nothing left patched."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchvision.models import VisionTransformer

from gradskip_lightning.core.explanation import UnsupportedModel
from gradskip_lightning.core.streaming import value_norms
from gradskip_lightning.families import explainer_for
from gradskip_lightning.families.timm_vit import TimmViTExplainer
from gradskip_lightning.families.torchvision_vit import FAMILY, TorchvisionViTAdapter, TorchvisionViTExplainer
from gradskip_lightning.methods import PASS_METHODS, GradSkipOptions, propagation
from gradskip_lightning.metrics import parameter_randomisation
from tests.conftest import make_tiny_vit
from tests.core.helpers import Classifier, capture, hooks_on
from tests.transplant import timm_to_torchvision

TARGETS = torch.tensor([0, 1, 2])


def torchvision_adapter(model: nn.Module) -> TorchvisionViTAdapter:
    return TorchvisionViTAdapter(FAMILY.find(model))


def tiny(seed: int = 0, **overrides) -> VisionTransformer:
    """2 blocks, width 32, 16 patches of 8 px; the head re-drawn (torchvision initialises it to 0)."""
    torch.manual_seed(seed)
    kwargs = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=4)
    model = VisionTransformer(**{**kwargs, **overrides})
    nn.init.normal_(model.heads.head.weight, std=0.3)
    return model.eval()


def images(batch: int = 3, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(batch, 3, 32, 32, dtype=dtype)


def patched(model: VisionTransformer) -> list[bool]:
    return ["forward" in block.self_attention.__dict__ for block in model.encoder.layers]


def test_explicit_attention_gives_the_same_logits_and_leaves_nothing_patched():
    model = tiny()
    x = images()
    with torch.no_grad():
        reference = model(x)
    adapter = torchvision_adapter(model)
    assert adapter.architecture == "torchvision_vision_transformer"
    with adapter.explain_mode(model), torch.no_grad():
        assert all(patched(model))
        explicit = model(x)
    torch.testing.assert_close(explicit, reference, rtol=1e-5, atol=1e-5)
    assert not any(patched(model)) and hooks_on(model) == 0
    cap = capture(model, x, TARGETS)
    torch.testing.assert_close(cap.logits, reference, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cap.attn[0].sum(-1), torch.ones(3, 2, 17))


@pytest.mark.parametrize("method", PASS_METHODS.names)
def test_every_method_leaves_the_model_as_it_was(method):
    model = tiny().train()
    explanation = explainer_for(model, method).explain(images(), TARGETS)
    assert explanation.valid.all() and explanation.token_maps.shape == (3, 4, 4)
    assert all(m.training for m in model.modules()) and not any(patched(model)) and hooks_on(model) == 0
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("method", PASS_METHODS.names)
def test_maps_are_the_timm_family_maps_of_the_same_weights(method):
    timm_vit = make_tiny_vit(num_classes=4, embed_dim=32, num_heads=2).eval()
    x = images()
    ours = TorchvisionViTExplainer(timm_to_torchvision(timm_vit), method).explain(x, TARGETS)
    reference = TimmViTExplainer(timm_vit, method).explain(x, TARGETS)
    torch.testing.assert_close(ours.logits, reference.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.token_maps, reference.token_maps, rtol=1e-4, atol=1e-6)


def test_batch_equals_singles_and_relevance_is_conserved():
    model = tiny().double()
    explainer = TorchvisionViTExplainer(model)
    x = images(4, torch.float64)
    targets = torch.tensor([0, 1, 2, 3])
    batch = explainer.explain(x, targets).maps
    singles = torch.cat([explainer.explain(x[i : i + 1], targets[i : i + 1]).maps for i in range(4)])
    assert (batch - singles).abs().max() / batch.abs().max() < 1e-10
    for step in propagation(capture(model, x, targets), GradSkipOptions(gate="token")):
        torch.testing.assert_close(step.relevance_below.sum(-1), step.relevance_above.sum(-1), rtol=1e-10, atol=0)


def test_a_block_without_attention_output_passes_relevance_through():
    model = tiny()
    with torch.no_grad():
        model.encoder.layers[1].self_attention.out_proj.weight.zero_()
        model.encoder.layers[1].self_attention.out_proj.bias.zero_()
    top, bottom = propagation(capture(model, images(), TARGETS), GradSkipOptions(gate="token"))
    assert top.layer == 1 and (top.gates == 0).all()
    torch.testing.assert_close(top.relevance_below, top.relevance_above)
    assert not torch.allclose(bottom.relevance_below, bottom.relevance_above)


def test_value_norms_are_those_of_the_in_proj_values():
    model = tiny()
    x = images()
    tokens = {}
    hook = model.encoder.layers[1].ln_1.register_forward_hook(lambda _m, _a, out: tokens.setdefault("x", out))
    try:
        cap = capture(model, x)
    finally:
        hook.remove()
    attention = model.encoder.layers[1].self_attention
    v = nn.functional.linear(tokens["x"], attention.in_proj_weight[64:], attention.in_proj_bias[64:])
    torch.testing.assert_close(cap.value_norm[1], value_norms(v, attention.num_heads))


def test_external_head_gives_the_maps_of_the_headed_model():
    headed = tiny()
    backbone = tiny()
    backbone.heads = nn.Identity()
    module = Classifier(backbone, headed.heads).eval()
    explainer = TorchvisionViTExplainer(module)
    assert explainer.adapter.num_classes == 0 and explainer.num_classes == 4
    torch.testing.assert_close(explainer.explain(images()).maps, TorchvisionViTExplainer(headed).explain(images()).maps)


def test_randomised_weights_decorrelate_the_maps():
    explain = lambda m, x, t: TorchvisionViTExplainer(m, "gradskip").explain(x, t).maps  # noqa: E731
    curve = parameter_randomisation(tiny(), images(), TARGETS, explain, cascade_for=torchvision_adapter)
    assert curve.layers == ("head", "blocks.1", "blocks.0")
    assert curve.mean[-1] < 0.5, curve.mean


def test_a_zero_key_attention_is_refused_with_its_reason():
    model = tiny()
    layer = model.encoder.layers[0]
    layer.self_attention = nn.MultiheadAttention(32, 2, batch_first=True, add_zero_attn=True)
    with pytest.raises(UnsupportedModel, match="VisionTransformer: encoder layer 0 adds a zero key"):
        torchvision_adapter(model)
