"""The constant-denominator norms: same values as the norms, gradients with std / rms held constant."""

from __future__ import annotations

import pytest
import torch
from timm.layers import LayerNorm, RmsNorm, SimpleNorm
from torch import nn

from gradskip_lightning.core.conservative import constant_denominator_rule, constant_norm_hooks, detached_outputs


def randomised(norm: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for p in norm.parameters():
            p.copy_(torch.randn_like(p))
    return norm.double()


@pytest.mark.parametrize("norm", [nn.LayerNorm(6), LayerNorm(6), RmsNorm(6), SimpleNorm(6), nn.RMSNorm(6, eps=1e-6)])
def test_rule_keeps_the_value_and_holds_the_denominator_constant(norm):
    norm = randomised(norm)
    x = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    rule = constant_denominator_rule(norm)
    out = rule(norm, x)
    torch.testing.assert_close(out, norm(x))
    weight = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * weight).sum(), x)
    layer = isinstance(norm, nn.LayerNorm)
    centred = x - x.mean(-1, keepdim=True) if layer else x
    square = x.var(-1, keepdim=True) if isinstance(norm, SimpleNorm) else centred.pow(2).mean(-1, keepdim=True)
    denominator = (square + norm.eps).sqrt().detach()
    explicit = centred / denominator * norm.weight + (norm.bias if layer else 0)
    (expected,) = torch.autograd.grad((explicit * weight).sum(), x)
    torch.testing.assert_close(grad, expected)
    (full,) = torch.autograd.grad((norm(x) * weight).sum(), x)
    assert not torch.allclose(grad, full)  # the plain norm's gradient differs


def test_hooks_detach_attention_and_norm_outputs_only_while_installed():
    norm, drop = randomised(nn.LayerNorm(4)), nn.Dropout(0.0)
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    with detached_outputs([drop]):
        handles = constant_norm_hooks([nn.Sequential(norm)])
        assert not drop(x).requires_grad and norm(x).grad_fn.name() != "NativeLayerNormBackward0"
        for handle in handles:
            handle.remove()
    assert drop(x).requires_grad and norm(x).grad_fn.name() == "NativeLayerNormBackward0"
