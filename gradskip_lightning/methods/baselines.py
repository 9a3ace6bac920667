"""The baselines GradSkip is compared with, as pure functions of captured tensors.

Shapes: B images, L blocks, H heads, N tokens (prefix tokens first, then P patches).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gradskip_lightning.core.tensors import BlockTensors, CaptureMode, Top
from gradskip_lightning.core.validation import required
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


def rollout_matrix(attn: Tensor) -> Tensor:
    """Rollout's matrix of one block, M = rownorm(mean_h A + I): (B, H, N, N) -> (B, N, N)
    (over M reduced keys: :func:`rollout_step`)."""
    mean = attn.mean(dim=1)
    return normalise(mean + torch.eye(mean.shape[-1], device=mean.device, dtype=mean.dtype))


def rollout_down(matrices: list[Tensor], readout: Tensor) -> Tensor:
    """readout^T M_L ... M_1 from the blocks' matrices (B, N, N), bottom block first: (B, N)."""
    relevance = readout
    for m in reversed(matrices):
        relevance = propagate_block(relevance, m)
    return relevance


def chefer_step(relevance: Tensor, attn: Tensor, attn_grad: Tensor, key_to_token: Tensor | None = None) -> Tensor:
    """One block down: R + (mean_h (dA * A)^+)^T R; (B, N), (B, H, N, N), (B, H, N, N) -> (B, N).

    With ``key_to_token`` S (M, N) for an attention (B, H, N, M) over M reduced keys: the matrix
    is mean_h (dA * A)^+ S.
    """
    matrix = (attn_grad * attn).clamp_min(0).mean(dim=1)
    down = propagate_block(relevance, matrix)
    return relevance + (down if key_to_token is None else down @ key_to_token)


def rollout_step(relevance: Tensor, attn: Tensor, key_to_token: Tensor) -> Tensor:
    """One rollout block down over M reduced keys, without forming rownorm(mean_h A S + I) (N, N):
    S's rows sum to 1, so the row sums are r = rowsum(mean_h A) + 1 and the step is
    S^T (mean_h A)^T (R / r) + R / r; (B, N), (B, H, N, M), (M, N) -> (B, N)."""
    mean = attn.mean(dim=1)
    scaled = relevance / (mean.sum(dim=-1) + 1.0)
    return propagate_block(scaled, mean) @ key_to_token + scaled


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


class BaselineVisitor:
    """What the baselines share: no value norms, no residual tensors; ``start`` keeps the top.
    Subclasses set :attr:`mode` and define ``block`` and ``patch_relevance``."""

    mode: CaptureMode
    needs_value_norm = False
    needs_branch = False

    def __init__(self, options: NoOptions | RandomOptions) -> None:
        self.options = options

    def start(self, top: Top) -> None:
        self.top = top

    def block(self, tensors: BlockTensors) -> None:
        """Ignore the block (methods that read only the top)."""

    def token_relevance(self) -> Tensor:
        """Relevance of every token, (B, N)."""
        raise NotImplementedError

    def result(self) -> MethodOutput:
        """The patch entries of :meth:`token_relevance`, (B, P)."""
        return MethodOutput(self.token_relevance()[:, self.top.num_prefix_tokens :])


class RawAttentionVisitor(BaselineVisitor):
    """:func:`raw_attention` of the last block; keeps one block's A."""

    mode: CaptureMode = "forward"

    def block(self, tensors: BlockTensors) -> None:
        self.last = tensors.attn

    def token_relevance(self) -> Tensor:
        return raw_attention(self.last, self.top.readout)


class RolloutVisitor(BaselineVisitor):
    """:func:`rollout` from the forward; keeps each block's head-mean matrix (B, N, N), not A^l."""

    mode: CaptureMode = "forward"

    def __init__(self, options: NoOptions) -> None:
        super().__init__(options)
        self.matrices: list[Tensor] = []

    def block(self, tensors: BlockTensors) -> None:
        self.matrices.append(rollout_matrix(tensors.attn))

    def token_relevance(self) -> Tensor:
        return rollout_down(self.matrices, self.top.readout)


class CheferVisitor(BaselineVisitor):
    """:func:`chefer` during the backward, top block first; keeps R (B, N)."""

    mode: CaptureMode = "gradients"

    def start(self, top: Top) -> None:
        super().start(top)
        self.relevance = top.readout

    def block(self, tensors: BlockTensors) -> None:
        self.relevance = chefer_step(
            self.relevance, tensors.attn, required(tensors.attn_grad, "chefer: the block's attn_grad")
        )

    def token_relevance(self) -> Tensor:
        return self.relevance


class RandomVisitor(BaselineVisitor):
    """:func:`random_relevance` over the patch grid (the forward only gives logits and targets)."""

    mode: CaptureMode = "forward"

    def __init__(self, options: RandomOptions) -> None:
        super().__init__(options)
        self.seed = options.seed

    def result(self) -> MethodOutput:
        h, w = self.top.grid_size
        batch, device = self.top.logits.shape[0], self.top.logits.device
        return MethodOutput(random_relevance(batch, h * w, self.seed, device))
