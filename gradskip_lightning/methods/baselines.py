"""The baselines GradSkip is compared with, as pure functions of captured tensors.

Shapes: B images, L blocks, H heads, N tokens (prefix tokens first, then P patches).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gradskip_lightning.adapters import Capture
from gradskip_lightning.methods.gradskip import propagate_block
from gradskip_lightning.methods.output import MethodOutput, normalise


@dataclass(frozen=True)
class NoOptions:
    """The options of a method that takes none."""


@dataclass(frozen=True)
class RandomOptions:
    """Options of the random floor.

    Args:
        seed: seed of the generator, restarted at every call: the same seed and batch size give
            the same maps, and image b of a batch gets the same map whatever the images are.
    """

    seed: int = 0


def raw_attention(attn_last: Tensor, readout: Tensor) -> Tensor:
    """Last-block attention of the read-out token(s), head mean: (B, H, N, N), (B, N) -> (B, N)."""
    return torch.einsum("bij,bi->bj", attn_last.mean(dim=1), readout)


def rollout(attn: list[Tensor], readout: Tensor) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020): readout^T M_L ... M_1, M = rownorm(mean_h A + I).

    Args:
        attn: L tensors (B, H, N, N), bottom block first; readout: (B, N). Returns (B, N).
    """
    relevance = readout
    for a in reversed(attn):
        mean = a.mean(dim=1)
        m = normalise(mean + torch.eye(mean.shape[-1], device=mean.device, dtype=mean.dtype))
        relevance = propagate_block(relevance, m)
    return relevance


def chefer(attn: list[Tensor], attn_grad: list[Tensor], readout: Tensor) -> Tensor:
    """Chefer et al. 2021 generic attention explainability: readout^T prod_l (I + mean_h (dA * A)^+).

    Args:
        attn, attn_grad: L tensors (B, H, N, N), bottom block first; readout: (B, N). Returns (B, N).
    """
    relevance = readout
    for a, g in zip(reversed(attn), reversed(attn_grad)):
        mean = (g * a).clamp_min(0).mean(dim=1)
        relevance = relevance + propagate_block(relevance, mean)
    return relevance


def random_relevance(batch: int, num_patches: int, seed: int, device: torch.device) -> Tensor:
    """A uniform random patch map, (B, P): the floor every method must beat.

    The generator restarts at ``seed`` on every call, so row b depends only on (seed, b, P).

    Example:
        >>> a = random_relevance(2, 4, seed=0, device=torch.device("cpu"))
        >>> torch.equal(a, random_relevance(2, 4, seed=0, device=torch.device("cpu")))
        True
    """
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(batch, num_patches, generator=generator).to(device)


def _patches(relevance: Tensor, capture: Capture) -> MethodOutput:
    return MethodOutput(relevance[:, capture.num_prefix_tokens :])


def raw_attention_method(capture: Capture, _options: NoOptions) -> MethodOutput:
    """:func:`raw_attention` of the last block from the read-out tokens."""
    return _patches(raw_attention(capture.attn[-1], capture.readout), capture)


def rollout_method(capture: Capture, _options: NoOptions) -> MethodOutput:
    """:func:`rollout` from the read-out tokens."""
    return _patches(rollout(capture.attn, capture.readout), capture)


def chefer_method(capture: Capture, _options: NoOptions) -> MethodOutput:
    """:func:`chefer` from the read-out tokens (needs the backward)."""
    return _patches(chefer(capture.attn, capture.attn_grad, capture.readout), capture)


def random_method(capture: Capture, options: RandomOptions) -> MethodOutput:
    """:func:`random_relevance` over the capture's patch grid."""
    h, w = capture.grid_size
    return MethodOutput(random_relevance(capture.logits.shape[0], h * w, options.seed, capture.logits.device))
