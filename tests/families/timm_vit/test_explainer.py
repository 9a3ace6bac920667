"""TimmViTExplainer: batching, the method doc's properties 1-4, and clear errors for bad input."""

from __future__ import annotations

import pytest
import timm
import torch

from gradskip_lightning import methods
from gradskip_lightning.families.timm_vit import TimmViTExplainer
from gradskip_lightning.methods import PASS_METHODS, GradSkipOptions
from tests.conftest import make_tiny_vit
from tests.core.helpers import capture


@pytest.mark.parametrize("method", PASS_METHODS.names)
def test_batch_of_16_equals_16_single_calls(method):
    model = make_tiny_vit(num_classes=5, seed=1)
    torch.manual_seed(0)
    x = torch.randn(16, 3, 32, 32)
    targets = torch.randint(0, 5, (16,))
    explainer = TimmViTExplainer(model, method)
    batch = explainer.explain(x, targets)
    singles = torch.cat([explainer.explain(x[i : i + 1], targets[i : i + 1]).maps for i in range(16)])
    if method == "random":  # the generator restarts at the seed on every call: image b gets row b of one draw
        assert torch.equal(singles, batch.maps[:1].expand(16, -1, -1))
        assert not torch.equal(batch.maps[0], batch.maps[1])
        return
    relative = (batch.maps - singles).abs().max() / batch.maps.abs().max()
    assert relative < 1e-5
    assert batch.maps.shape == (16, 32, 32) and batch.token_maps.shape == (16, 4, 4)
    assert batch.valid.all()


#: The class-specific options of GradSkip (docs/method.md, "Class-specific readings"), one at a time and the preset.
CLASS_SPECIFIC = (
    {"normalisation": "layer"},
    {"token_weighting": "grad_x_act"},
    {"readout": "grad_x_act"},
    {"attention_weighting": "signed_grad"},
    {"token_weighting": "grad_x_act", "gate": "off"},
    GradSkipOptions.class_specific_overrides(),
)


@pytest.mark.parametrize("options", CLASS_SPECIFIC, ids=str)
def test_class_specific_options_batch_equals_singles(options):
    model = make_tiny_vit(num_classes=5, seed=1)
    torch.manual_seed(0)
    x = torch.randn(8, 3, 32, 32)
    targets = torch.randint(0, 5, (8,))
    explainer = TimmViTExplainer(model, "gradskip", **options)
    batch = explainer.explain(x, targets)
    singles = torch.cat([explainer.explain(x[i : i + 1], targets[i : i + 1]).maps for i in range(8)])
    assert (batch.maps - singles).abs().max() / batch.maps.abs().max() < 1e-5
    assert batch.valid.all() and (batch.token_maps >= 0).all()


@pytest.mark.parametrize("options", CLASS_SPECIFIC, ids=str)
def test_class_specific_options_identity_block_and_conservation(options):
    model = make_tiny_vit(depth=3, init_values=1e-1)
    with torch.no_grad():
        model.blocks[1].ls1.gamma.zero_()  # a^2 = 0: the block is the identity on the attention path
    cap = capture(model, torch.randn(4, 3, 32, 32))
    opts = GradSkipOptions(**options)
    relevance = cap.readout
    for layer in reversed(range(3)):
        step = methods.block_step(relevance, cap.blocks[layer], opts)
        if layer == 1 and opts.gate != "off":
            torch.testing.assert_close(step.relevance_below, relevance, rtol=0, atol=0)
        if opts.conserves:
            torch.testing.assert_close(step.relevance_below.sum(-1), relevance.sum(-1))
        relevance = step.relevance_below


def test_random_floor_is_fixed_by_its_seed(tiny_vit):
    x = torch.randn(4, 3, 32, 32)
    first = TimmViTExplainer(tiny_vit, "random", seed=3).explain(x).token_maps
    torch.testing.assert_close(
        TimmViTExplainer(tiny_vit, "random", seed=3).explain(torch.randn(4, 3, 32, 32)).token_maps,
        first,
        rtol=0,
        atol=0,
    )  # same seed: the same maps, whatever the images
    other = TimmViTExplainer(tiny_vit, "random", seed=4).explain(x).token_maps
    assert (other - first).abs().min() > 0  # a different seed: every value differs
    assert ((first >= 0) & (first < 1)).all() and first.std() > 0.2  # uniform on [0, 1): std 0.29


def test_gradskip_outputs_shapes_and_targets_default_to_prediction(tiny_vit):
    x = torch.randn(4, 3, 32, 32)
    exp = TimmViTExplainer(tiny_vit).explain(x)
    assert torch.equal(exp.targets, tiny_vit(x).argmax(1))
    assert exp.head_weights.shape == exp.grad_flow.shape == exp.sparsity.shape == (4, 2, 3)
    assert exp.gates.shape == (4, 2, 17)
    torch.testing.assert_close(exp.head_weights.sum(-1), torch.ones(4, 2))
    assert ((exp.gates >= 0) & (exp.gates <= 1)).all()
    assert torch.all(exp.probabilities > 0) and exp.probabilities.shape == (4,)


def test_identity_block_passes_relevance_through_untouched():
    model = make_tiny_vit(init_values=1e-1)
    with torch.no_grad():
        model.blocks[1].ls1.gamma.zero_()  # a^2 = 0: the block is the identity on the attention path
    cap = capture(model, torch.randn(3, 3, 32, 32))
    beta = methods.skip_gates(cap.block_input[1], cap.branch[1], cap.branch_grad[1], "token")
    assert torch.all(beta == 0)
    options = GradSkipOptions()
    omega, _, _ = methods.head_weights(cap.attn[1], cap.attn_grad[1], options)
    w = methods.rows_or_identity(
        methods.mixed_attention(cap.attn[1], cap.attn_grad[1], cap.value_norm[1], omega, options)
    )
    relevance = torch.rand(3, 17)
    assert torch.equal(methods.propagate_block(relevance, w, beta), relevance)
    assert torch.all(TimmViTExplainer(model).explain(torch.randn(3, 3, 32, 32)).gates[:, 1] == 0)


@pytest.mark.parametrize("gate", ["token", "layer", "off"])
def test_relevance_is_conserved_at_every_block(gate):
    model = make_tiny_vit(depth=3)
    cap = capture(model, torch.randn(4, 3, 32, 32))
    options = GradSkipOptions(gate=gate)
    relevance = cap.readout
    for layer in reversed(range(3)):
        omega, _, _ = methods.head_weights(cap.attn[layer], cap.attn_grad[layer], options)
        w = methods.rows_or_identity(
            methods.mixed_attention(cap.attn[layer], cap.attn_grad[layer], cap.value_norm[layer], omega, options)
        )
        beta = methods.skip_gates(cap.block_input[layer], cap.branch[layer], cap.branch_grad[layer], gate)
        below = methods.propagate_block(relevance, w, beta)
        torch.testing.assert_close(below.sum(-1), relevance.sum(-1))
        relevance = below


def test_head_weights_on_constructed_heads():
    model = make_tiny_vit()
    d = 48 // 3
    with torch.no_grad():
        model.blocks[0].attn.proj.weight[:, 0:d] = 0  # head 0 of block 0 writes nothing
        model.blocks[0].attn.qkv.weight[d : 2 * d] = 0  # head 1: zero queries -> uniform attention
        model.blocks[0].attn.qkv.bias[d : 2 * d] = 0
    x = torch.randn(3, 3, 32, 32)
    exp = TimmViTExplainer(model).explain(x)
    assert torch.all(exp.grad_flow[:, 0, 0] == 0)
    assert torch.all(exp.grad_flow[:, 0, 1:] > 0)
    assert exp.sparsity[:, 0, 1].abs().max() < 1e-6
    assert torch.all(exp.sparsity[:, 0, [0, 2]] > 1e-3)
    only_g = TimmViTExplainer(model, alpha=1.0).explain(x)
    only_s = TimmViTExplainer(model, alpha=0.0).explain(x)
    torch.testing.assert_close(only_g.head_weights, exp.grad_flow)
    torch.testing.assert_close(only_s.head_weights, exp.sparsity)


def test_completeness_scales_each_map_to_the_explained_logit(tiny_vit):
    x = torch.randn(3, 3, 32, 32)
    exp = TimmViTExplainer(tiny_vit, completeness=True).explain(x, torch.tensor([0, 1, 2]))
    logit = exp.logits.gather(1, exp.targets[:, None])[:, 0]
    torch.testing.assert_close(exp.token_maps.sum(dim=(1, 2)), logit)


def test_paper_cls_mode_on_a_cls_pooled_model_falls_back_to_uniform_start(tiny_vit):
    exp = TimmViTExplainer(tiny_vit, cls_mode="paper").explain(torch.randn(2, 3, 32, 32))
    assert exp.gates.shape == (2, 2, 16)  # patch tokens only
    torch.testing.assert_close(exp.token_maps.sum(dim=(1, 2)), torch.ones(2))


def test_gap_model_paper_mode_starts_from_output_gradients():
    model = make_tiny_vit(global_pool="avg", class_token=False)
    exp = TimmViTExplainer(model, cls_mode="paper").explain(torch.randn(2, 3, 32, 32))
    assert exp.valid.all() and exp.token_maps.shape == (2, 4, 4)
    assert exp.token_maps.std() > 0


def test_bad_input_raises_clear_errors(tiny_vit):
    explainer = TimmViTExplainer(tiny_vit)
    with pytest.raises(ValueError, match=r"\(B, 3, 32, 32\).*\(2, 1, 32, 32\)"):
        explainer.explain(torch.randn(2, 1, 32, 32))
    with pytest.raises(ValueError, match=r"\(B, 3, 32, 32\).*\(2, 3, 28, 28\)"):
        explainer.explain(torch.randn(2, 3, 28, 28))
    with pytest.raises(TypeError, match="floating tensor"):  # a dtype mistake is a TypeError everywhere
        explainer.explain(torch.zeros(2, 3, 32, 32, dtype=torch.uint8))
    with pytest.raises(ValueError, match="regions are for segmentation"):
        explainer.explain(torch.randn(2, 3, 32, 32), regions=torch.ones(2, 4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"in \[0, 4\)"):
        explainer.explain(torch.randn(2, 3, 32, 32), torch.tensor([0, 4]))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        explainer.explain(torch.randn(2, 3, 32, 32), torch.tensor([0]))
    x = torch.randn(2, 3, 32, 32)
    x[1, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        explainer.explain(x)
    with pytest.raises(ValueError, match="Unknown method"):
        TimmViTExplainer(tiny_vit, "lime")
    with pytest.raises(ValueError, match="takes no option"):
        TimmViTExplainer(tiny_vit, "rollout", alpha=0.5)
    with pytest.raises(TypeError, match="ResNet"):
        TimmViTExplainer(timm.create_model("resnet18", pretrained=False))
    with pytest.raises(TypeError, match="no classifier head"):
        TimmViTExplainer(make_tiny_vit(num_classes=0))


def test_non_finite_gradients_mark_only_that_map_invalid(tiny_vit):
    x = torch.randn(3, 3, 32, 32)
    clean = TimmViTExplainer(tiny_vit).explain(x)

    def poison(_module, grad_input, _grad_output):
        g = grad_input[0].clone()
        g[0] = float("nan")  # an overflow in image 0's backward only
        return (g,)

    handle = tiny_vit.norm.register_full_backward_hook(poison)
    try:
        exp = TimmViTExplainer(tiny_vit).explain(x)
    finally:
        handle.remove()
    assert exp.valid.tolist() == [False, True, True]
    assert torch.all(exp.maps[0] == 0)
    torch.testing.assert_close(exp.maps[1:], clean.maps[1:])


def test_a_float64_model_is_explained_in_float64_to_rounding():
    model = make_tiny_vit(num_classes=5, seed=1).double()
    x = torch.randn(6, 3, 32, 32, dtype=torch.float64)
    explainer = TimmViTExplainer(model)
    batch = explainer.explain(x, torch.arange(6) % 5)
    singles = torch.cat([explainer.explain(x[i : i + 1], torch.tensor([i % 5])).maps for i in range(6)])
    assert batch.maps.dtype == torch.float32 and batch.logits.dtype == torch.float32
    assert (batch.maps - singles).abs().max() / batch.maps.abs().max() < 1e-6  # float32 rounding of the maps only
