"""CP-LRP: a known answer against an explicit one-block implementation, conservation on a
bias-free ReLU model, batch = singles and a clean model on every family's tiny instance."""

from __future__ import annotations

import pytest
import timm
import torch
from torch import Tensor, nn

from gradskip_lightning.families.timm_vit import TimmViTExplainer
from gradskip_lightning.methods import token_relevance
from tests.core.helpers import capture, hooks_on
from tests.families.timm_vit.test_architectures import FAMILIES, images_for, tiny


def vit(depth: int, **extra) -> nn.Module:
    torch.manual_seed(0)
    kwargs = dict(img_size=32, patch_size=8, depth=depth, embed_dim=32, num_heads=2, num_classes=3)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, **{**kwargs, **extra}).eval().double()


def constant_std_norm(norm: nn.LayerNorm, x: Tensor) -> Tensor:
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / (var + norm.eps).sqrt().detach() * norm.weight + norm.bias


def explicit_lrp(model: nn.Module, x0: Tensor, targets: Tensor) -> Tensor:
    """Gradient x input at x^0 through a one-block ViT written out by hand, softmax and LN std
    detached: (B, N, D) -> (B, N)."""
    x0 = x0.detach().clone().requires_grad_(True)
    block, attn = model.blocks[0], model.blocks[0].attn
    b, n, d = x0.shape
    h = attn.num_heads
    q, k, v = attn.qkv(constant_std_norm(block.norm1, x0)).reshape(b, n, 3, h, d // h).permute(2, 0, 3, 1, 4)
    probabilities = (q @ k.transpose(-2, -1) * attn.scale).softmax(dim=-1).detach()
    x1 = x0 + attn.proj((probabilities @ v).transpose(1, 2).reshape(b, n, d))
    x2 = x1 + block.mlp(constant_std_norm(block.norm2, x1))
    logits = model.head(constant_std_norm(model.norm, x2)[:, 0])
    (grad,) = torch.autograd.grad(logits.gather(1, targets[:, None]).sum(), x0)
    return (grad * x0).sum(dim=-1)


def test_one_block_matches_the_explicit_implementation():
    model = vit(depth=1)
    x, targets = torch.randn(3, 3, 32, 32, dtype=torch.float64), torch.tensor([0, 2, 1])
    x0 = capture(model, x, targets).block_input[0]
    expected = explicit_lrp(model, x0, targets)[:, 1:].reshape(3, 4, 4)
    got = TimmViTExplainer(model, "lrp").explain(x, targets).token_maps
    torch.testing.assert_close(got, expected.float(), rtol=1e-5, atol=1e-7)
    # holding softmax and std constant changes the answer: plain gradient x input differs
    x0 = x0.clone().requires_grad_(True)
    plain = torch.autograd.grad(model.forward_head(model.norm(model.blocks(x0))).gather(1, targets[:, None]).sum(), x0)
    assert not torch.allclose((plain[0] * x0).sum(-1)[:, 1:].reshape(3, 4, 4).float(), got, atol=1e-4)


def test_relevance_over_all_tokens_sums_to_the_logit_without_biases():
    model = vit(depth=3, act_layer="relu")
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.zero_()
    x, targets = torch.randn(4, 3, 32, 32, dtype=torch.float64), torch.tensor([0, 1, 2, 0])
    cap = capture(model, x, targets, conservative=True)
    total = token_relevance(cap.block_input[0], cap.input_grad).sum(dim=-1)
    torch.testing.assert_close(total, cap.logits.gather(1, targets[:, None])[:, 0], rtol=1e-9, atol=1e-9)


def test_conservative_capture_leaves_forward_values_unchanged():
    model = vit(depth=2)
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(capture(model, x, torch.tensor([0, 1]), conservative=True).logits, expected)


@pytest.mark.parametrize("label", FAMILIES)
def test_batch_equals_singles_and_model_is_left_clean(label):
    model = tiny(label)
    explainer = TimmViTExplainer(model, "lrp")
    x, targets = images_for(explainer, 3), torch.tensor([0, 1, 2])
    batch = explainer.explain(x, targets)
    singles = torch.cat([explainer.explain(x[i : i + 1], targets[i : i + 1]).token_maps for i in range(3)])
    assert batch.valid.all() and batch.token_maps.std() > 0
    assert (batch.token_maps - singles).abs().max() / batch.token_maps.abs().max() < 1e-5
    assert all(p.grad is None for p in model.parameters()) and hooks_on(model) == 0
    assert not model.training
