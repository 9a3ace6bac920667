"""GradSkip and the baselines for SegFormer, as pure functions of a :class:`SegmentationCapture`.

Shapes as in :mod:`gradskip_lightning.families.segformer.capture`: B images, (h_s, w_s) stage s's
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

from gradskip_lightning.core.methods import MethodSpec
from gradskip_lightning.core.registry import Registry
from gradskip_lightning.core.tensors import BlockTensors
from gradskip_lightning.core.validation import required
from gradskip_lightning.families.segformer.capture import SegmentationCapture, StageTensors
from gradskip_lightning.methods.baselines import NoOptions, RandomOptions, chefer_step, random_relevance, rollout_step
from gradskip_lightning.methods.gradskip import BlockStep, GradSkipOptions, block_step, propagate_block, readout
from gradskip_lightning.methods.grids import cell_spread, spread_to_cells
from gradskip_lightning.methods.output import normalise

#: The names of :data:`SEGFORMER_METHODS`, in its order (the structure test checks that both agree).
SegFormerMethod = Literal["gradskip", "raw_attention", "rollout", "chefer", "random"]
#: The methods whose every step conserves the total relevance.
CONSERVING: tuple[SegFormerMethod, ...] = ("gradskip", "raw_attention", "rollout")

#: One block down: (R^l (B, N), the block's tensors, S (M, N)) -> R^{l-1} (B, N).
BlockRule = Callable[[Tensor, BlockTensors, Tensor], Tensor]
#: A method's propagation: (capture, options) -> relevance.
Propagation = Callable[[SegmentationCapture, Any], "SegmentationRelevance"]


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


#: The SegFormer family's methods: name -> the propagation over a capture, (capture, options) ->
#: relevance, and its options dataclass; in the order of :data:`SegFormerMethod`.
SEGFORMER_METHODS: Registry[MethodSpec[Propagation]] = Registry(
    "SegFormer method",
    {
        "gradskip": MethodSpec(gradskip_segmentation, GradSkipOptions),
        "raw_attention": MethodSpec(raw_attention_segmentation, NoOptions),
        "rollout": MethodSpec(rollout_segmentation, NoOptions),
        "chefer": MethodSpec(chefer_segmentation, NoOptions),
        "random": MethodSpec(random_segmentation, RandomOptions),
    },
)
