"""GradSkip and the baselines for SegFormer, as pure functions of a :class:`SegmentationCapture`.

Shapes as in :mod:`gradskip_lightning.segmentation.capture`: B images, (h_s, w_s) stage s's
token grid, N_s its tokens, M_s its reduced keys. Relevance runs from the top stage down, one
block at a time, then through each stage transition; every step conserves the total (the
method and every [ours] choice: the "SegFormer" section of ``docs/method.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from gradskip_lightning.adapters import BlockTensors
from gradskip_lightning.methods.baselines import NoOptions, RandomOptions, chefer_step, random_relevance, rollout_step
from gradskip_lightning.methods.gradskip import BlockStep, GradSkipOptions, block_step, propagate_block, readout
from gradskip_lightning.methods.output import normalise
from gradskip_lightning.methods.registry import HasOptions
from gradskip_lightning.registry import Registry
from gradskip_lightning.segmentation.capture import SegmentationCapture, StageTensors
from gradskip_lightning.validation import required

SegmentationMethod = Literal["gradskip", "raw_attention", "rollout", "chefer", "random"]
#: The methods whose every step conserves the total relevance.
CONSERVING: tuple[SegmentationMethod, ...] = ("gradskip", "raw_attention", "rollout")

#: One block down: (R^l (B, N), the block's tensors, S (M, N)) -> R^{l-1} (B, N).
BlockRule = Callable[[Tensor, BlockTensors, Tensor], Tensor]


def cell_spread(
    coarse: tuple[int, int], fine: tuple[int, int], stride: int, device: torch.device, dtype: torch.dtype
) -> Tensor:
    """(N_coarse, N_fine): row i spreads coarse token (a, b) uniformly over the fine tokens of its
    stride cell [a*stride, (a+1)*stride) x [b*stride, (b+1)*stride), clipped to the fine grid.

    Example:
        >>> cell_spread((1, 2), (1, 3), 2, torch.device("cpu"), torch.float32)
        tensor([[0.5000, 0.5000, 0.0000],
                [0.0000, 0.0000, 1.0000]])

    Raises:
        ValueError: a coarse token's cell holds no fine token.
    """
    rows, cols = (
        (torch.arange(f, device=device)[None, :] // stride == torch.arange(c, device=device)[:, None]).to(dtype)
        for c, f in zip(coarse, fine)
    )
    cells = torch.einsum("ik,jl->ijkl", rows, cols).reshape(coarse[0] * coarse[1], fine[0] * fine[1])
    if (cells.sum(dim=-1) == 0).any():
        raise ValueError(f"A {coarse} grid at stride {stride} over a {fine} grid has cells with no token.")
    return normalise(cells)


def spread_to_cells(relevance: Tensor, coarse: tuple[int, int], fine: tuple[int, int], stride: int) -> Tensor:
    """``relevance @ cell_spread(coarse, fine, stride)`` without the (N_coarse, N_fine) matrix:
    (B, N_coarse) -> (B, N_fine), each coarse token's relevance split evenly over its stride cell.

    Example:
        >>> spread_to_cells(torch.tensor([[1.0, 2.0]]), (1, 2), (1, 3), 2)
        tensor([[0.5000, 0.5000, 2.0000]])

    Raises:
        ValueError: a coarse token's cell holds no fine token.
    """
    rows, cols = (torch.arange(f, device=relevance.device) // stride for f in fine)
    inside = ((rows < coarse[0])[:, None] & (cols < coarse[1])[None, :]).flatten()
    cell = (rows[:, None] * coarse[1] + cols[None, :]).flatten().clamp_max(coarse[0] * coarse[1] - 1)
    counts = torch.bincount(cell[inside], minlength=coarse[0] * coarse[1])
    if (counts == 0).any():
        raise ValueError(f"A {coarse} grid at stride {stride} over a {fine} grid has cells with no token.")
    return torch.where(inside, (relevance / counts.to(relevance.dtype))[:, cell], 0.0)


def key_to_token(stage: StageTensors) -> Tensor:
    """S (M_s, N_s): each reduced key spread uniformly over the sr x sr window of tokens it pools."""
    h, w = stage.grid
    attn = stage.blocks[0].attn
    keys = (h // stage.reduction, w // stage.reduction)
    if keys[0] * keys[1] != attn.shape[-1]:
        raise ValueError(f"Stage {stage.index}: {attn.shape[-1]} keys, expected {keys} from grid {stage.grid}.")
    return cell_spread(keys, stage.grid, stage.reduction, attn.device, attn.dtype)


def decoder_starts(capture: SegmentationCapture) -> list[Tensor]:
    """Start relevance of every stage (bottom first), (B, N_s): (dy/dz_s * z_s)^+ summed over
    channels, all stages divided by their common total, so that together they sum to 1 per image
    in proportion to their mass; an image whose total is 0 starts uniform over the top stage."""
    starts = [(s.output_grad * s.output).sum(dim=-1).clamp_min(0) for s in capture.stages]
    total = torch.stack([s.sum(dim=-1) for s in starts]).sum(dim=0)[:, None]  # (B, 1)
    scaled = [torch.where(total > 0, s / total.clamp_min(torch.finfo(s.dtype).tiny), 0.0) for s in starts]
    top = scaled[-1]
    scaled[-1] = torch.where(total > 0, top, torch.full_like(top, 1.0 / top.shape[-1]))
    return scaled


@dataclass
class BlockRelevance:
    """Relevance across one block: R^l above it and R^{l-1} below, (B, N_s)."""

    stage: int
    layer: int  # the block's index over all stages, 0 = bottom
    above: Tensor
    below: Tensor


@dataclass
class StageRelevance:
    """Relevance through stage s, (B, N_s) unless said.

    Attributes:
        start: the stage's own decoder start; top: what enters its top block (start plus what
            came down from stage s+1); bottom: what leaves its bottom block; passed_down: bottom
            spread onto stage s-1's grid, (B, N_{s-1}), None for stage 0.
    """

    stage: int
    start: Tensor
    top: Tensor
    bottom: Tensor
    passed_down: Tensor | None


@dataclass
class SegmentationRelevance:
    """A method's result: ``token_map`` (B, h_0, w_0) over the stage-0 grid (summing to 1 per
    image), and every step, top first (none for the random floor); ``steps`` holds GradSkip's
    internals (None for the baselines)."""

    token_map: Tensor
    blocks: list[BlockRelevance]
    stages: list[StageRelevance]
    steps: list[BlockStep] | None = None


def propagate(capture: SegmentationCapture, rule: BlockRule) -> SegmentationRelevance:
    """Run ``rule`` down every block from the top stage; stage transitions spread relevance
    uniformly over each token's stride cell; each stage's start joins at its top block."""
    starts = decoder_starts(capture)
    blocks: list[BlockRelevance] = []
    stages: list[StageRelevance] = []
    arriving = None
    for stage in reversed(capture.stages):
        s = stage.index
        top = starts[s] if arriving is None else arriving + starts[s]
        relevance, spread = top, key_to_token(stage)
        for tensors in reversed(stage.blocks):
            below = rule(relevance, tensors, spread)
            blocks.append(BlockRelevance(s, tensors.layer, relevance, below))
            relevance = below
        arriving = None
        if s > 0:
            arriving = spread_to_cells(relevance, stage.grid, capture.stages[s - 1].grid, stage.stride)
        stages.append(StageRelevance(s, starts[s], top, relevance, arriving))
    h, w = capture.stages[0].grid
    return SegmentationRelevance(relevance.reshape(-1, h, w), blocks, stages)


def gradskip_segmentation(capture: SegmentationCapture, options: GradSkipOptions) -> SegmentationRelevance:
    """GradSkip: each block by :func:`~gradskip_lightning.methods.gradskip.block_step` with S;
    MixFFN passes relevance through.

    Raises:
        ValueError: ``options.completeness`` (not defined for a region target yet).
    """
    if options.completeness:
        raise ValueError("completeness=True is not supported for segmentation; use completeness=False.")
    steps: list[BlockStep] = []

    def rule(relevance: Tensor, tensors: BlockTensors, spread: Tensor) -> Tensor:
        steps.append(block_step(relevance, tensors, options, spread))
        return steps[-1].relevance_below

    result = propagate(capture, rule)
    result.steps = steps
    if steps[-1].contribution is not None or not options.conserves:  # the bottom step: stage 0's first block
        shape = result.token_map.shape
        result.token_map = normalise(readout(steps[-1], shape[1] * shape[2], options)).reshape(shape)
    return result


def raw_attention_segmentation(capture: SegmentationCapture, options: NoOptions | None = None) -> SegmentationRelevance:
    """Raw attention: the top block (last block of the top stage) by rownorm(mean_h A S), every
    other block passes relevance through; same transitions and decoder starts (the ViT baseline
    reads the CLS row of that matrix; SegFormer has no CLS token). ``options`` is unused. Applied
    as (R^T mean_h A) S, never forming the (N, N) matrix."""
    top = capture.stages[-1].blocks[-1].layer

    def rule(relevance: Tensor, tensors: BlockTensors, spread: Tensor) -> Tensor:
        if tensors.layer != top:
            return relevance
        return propagate_block(relevance, tensors.attn.mean(dim=1)) @ spread  # rows of A and S sum to 1

    return propagate(capture, rule)


def rollout_segmentation(capture: SegmentationCapture, options: NoOptions | None = None) -> SegmentationRelevance:
    """Rollout: each block by rownorm(mean_h A S + I) (:func:`rollout_step`, without the (N, N)
    matrix), from the same decoder starts (``options`` is unused)."""
    return propagate(capture, lambda r, tensors, spread: rollout_step(r, tensors.attn, spread))


def chefer_segmentation(capture: SegmentationCapture, options: NoOptions | None = None) -> SegmentationRelevance:
    """Chefer et al. 2021: each block by R + S^T (mean_h (dA * A)^+)^T R, through the same stage
    transitions and from the same decoder starts (does not conserve; the map is then divided by
    its total so that it sums to 1 like the others; ``options`` is unused)."""

    def step(relevance: Tensor, tensors: BlockTensors, spread: Tensor) -> Tensor:
        return chefer_step(
            relevance, tensors.attn, required(tensors.attn_grad, "chefer: the block's attn_grad"), spread
        )

    result = propagate(capture, step)
    result.token_map = normalise(result.token_map.flatten(1)).reshape(result.token_map.shape)
    return result


def random_segmentation(capture: SegmentationCapture, options: RandomOptions) -> SegmentationRelevance:
    """The random floor: a uniform random map over the stage-0 grid, summing to 1 per image
    (:func:`~gradskip_lightning.methods.baselines.random_relevance`: row b depends only on
    (seed, b, grid))."""
    h, w = capture.stages[0].grid
    batch, device = capture.logits.shape[0], capture.logits.device
    relevance = normalise(random_relevance(batch, h * w, options.seed, device).to(capture.logits.dtype))
    return SegmentationRelevance(relevance.reshape(batch, h, w), [], [])


@dataclass(frozen=True)
class SegmentationSpec(HasOptions):
    """One segmentation method: its propagation over a capture and its options dataclass."""

    propagation: Callable[[SegmentationCapture, Any], SegmentationRelevance]
    options: type


#: The SegFormer family's methods, in the order of :data:`SegmentationMethod` (a test checks both agree).
SEGMENTATION_METHODS: Registry[SegmentationSpec] = Registry("segmentation method")
SEGMENTATION_METHODS.register("gradskip", SegmentationSpec(gradskip_segmentation, GradSkipOptions))
SEGMENTATION_METHODS.register("raw_attention", SegmentationSpec(raw_attention_segmentation, NoOptions))
SEGMENTATION_METHODS.register("rollout", SegmentationSpec(rollout_segmentation, NoOptions))
SEGMENTATION_METHODS.register("chefer", SegmentationSpec(chefer_segmentation, NoOptions))
SEGMENTATION_METHODS.register("random", SegmentationSpec(random_segmentation, RandomOptions))


def segmentation_spec(method: str) -> SegmentationSpec:
    """The spec of ``method``; ValueError naming the choices for an unknown one.

    Example:
        >>> segmentation_spec("rollout").options.__name__
        'NoOptions'
    """
    return SEGMENTATION_METHODS[method]
