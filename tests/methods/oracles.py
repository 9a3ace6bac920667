"""Dense reference implementations of the baselines over lists of per-block tensors: each forms
every (B, N, N) matrix and multiplies them out, independently of the package's streamed steps."""

from __future__ import annotations

import torch
from torch import Tensor


def rollout(attn: list[Tensor], readout: Tensor) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020): readout^T M_L ... M_1, M = rownorm(mean_h A + I).

    attn: L tensors (B, H, N, N), bottom block first; readout: (B, N). Returns (B, N).
    """
    relevance = readout[:, None]  # (B, 1, N)
    for a in reversed(attn):
        m = a.mean(dim=1) + torch.eye(a.shape[-1], dtype=a.dtype)
        relevance = relevance @ (m / m.sum(dim=-1, keepdim=True))
    return relevance[:, 0]


def chefer(attn: list[Tensor], attn_grad: list[Tensor], readout: Tensor) -> Tensor:
    """Chefer et al. 2021: readout^T prod_l (I + mean_h (dA * A)^+), top block first.

    attn, attn_grad: L tensors (B, H, N, N), bottom block first; readout: (B, N). Returns (B, N).
    """
    relevance = readout[:, None]
    for a, g in zip(reversed(attn), reversed(attn_grad)):
        relevance = relevance @ (torch.eye(a.shape[-1], dtype=a.dtype) + (g * a).clamp_min(0).mean(dim=1))
    return relevance[:, 0]
