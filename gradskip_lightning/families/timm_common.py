"""Where the value vectors of an attention are, and their per-head norms ||v_{q,j}|| (B, H, N)."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["value_norms", "value_projection", "values_from_input", "values_from_projection"]


def value_projection(attn: Any) -> nn.Module:
    """The module whose output holds the value vectors: ``v_proj``, or the fused ``qkv``."""
    v_proj = getattr(attn, "v_proj", None)
    return attn.qkv if v_proj is None else v_proj


def values_from_projection(attn: Any, out: Tensor) -> Tensor:
    """The values (B, N, A) in the output of :func:`value_projection`, copied (some attentions add
    their bias in place afterwards); a bias-free ``qkv`` gets the attention's ``v_bias``."""
    if getattr(attn, "v_proj", None) is not None:
        return out.detach().clone()
    width = out.shape[-1] // 3
    v = out.detach()[..., 2 * width :].clone()
    v_bias = getattr(attn, "v_bias", None)
    return v + v_bias.detach() if attn.qkv.bias is None and v_bias is not None else v


def values_from_input(attn: Any, x: Tensor) -> Tensor:
    """The values (B, N, A) recomputed from the attention's input x (B, N, D), for attentions that
    apply their ``qkv`` weight functionally (BEiT, EVA with a separate q/v bias)."""
    weight = attn.qkv.weight
    width = weight.shape[0] // 3
    bias = attn.qkv.bias[2 * width :] if attn.qkv.bias is not None else getattr(attn, "v_bias", None)
    return F.linear(x.detach(), weight[2 * width :].detach(), None if bias is None else bias.detach())


def value_norms(attn: Any, v: Tensor) -> Tensor:
    """||v_{q,j}|| per head, (B, H, N), from values (B, N, A); grouped-query value heads are
    repeated to the query heads."""
    b, n, _ = v.shape
    value_heads = getattr(attn, "num_kv_heads", None) or attn.num_heads
    norms = v.reshape(b, n, value_heads, -1).norm(dim=-1).transpose(1, 2)
    return norms.repeat_interleave(attn.num_heads // value_heads, dim=1)
