"""GradSkip and the baselines through a Swin Transformer: visitors of the timm pass that run each
block's step on its windows and carry relevance down through the patch mergings.

A window attention is block-diagonal over the (shifted) grid: each method's ViT step runs on the
windows as a batch of B * nW (:meth:`BlockWindows.split`), and the result goes back to the grid
(:meth:`BlockWindows.merge`), so shifts are undone by the same index that made them. GradSkip's head
weights stay per image and head: omega is computed over every query row of an image's windows. At
each patch merging a token's relevance is spread evenly over the 2 x 2 cell it merged. Relevance
starts from the average pooling (uniform over the top stage) and ends on the stage-0 grid. The
choices: the "Swin" section of ``docs/method.md``.

Shapes: B images, N_s tokens of stage s, nW windows, w tokens per window, H heads, D channels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

import torch
from torch import Tensor

from gradskip_lightning.core.methods import MethodSpec
from gradskip_lightning.core.registry import Registry
from gradskip_lightning.core.tensors import BlockTensors, CaptureMode, Top
from gradskip_lightning.core.validation import required
from gradskip_lightning.families.swin.adapter import BlockWindows, SwinLayout
from gradskip_lightning.methods.baselines import NoOptions, RandomOptions, chefer_step, random_relevance, rollout_matrix
from gradskip_lightning.methods.gradskip import (
    BlockStep,
    GradSkipOptions,
    head_weights,
    mixed_attention,
    propagate_block,
    rows_or_identity,
    skip_gates,
    start_relevance,
)
from gradskip_lightning.methods.lrp import token_relevance

__all__ = ["SWIN_METHODS", "SwinMethod", "SwinVisitor", "window_block_step"]

#: The names of :data:`SWIN_METHODS`, in its order (the structure test checks that both agree).
SwinMethod = Literal["gradskip", "raw_attention", "rollout", "chefer", "lrp", "random"]


def _tokens(grid_tensor: Tensor | None, name: str) -> Tensor:
    """(B, h, w, D) on a stage's grid -> (B, N, D)."""
    return required(grid_tensor, f"gradskip: the block's {name}").flatten(1, 2)


def window_block_step(
    relevance: Tensor, tensors: BlockTensors, windows: BlockWindows, options: GradSkipOptions
) -> BlockStep:
    """GradSkip through one Swin block: R^l (B, N_s) -> :class:`BlockStep` with R^{l-1} (B, N_s).

    omega (B, H) from all of an image's windows (Gini over each query's w window keys);
    W~ = rows_or_identity of the omega-weighted, gradient- and value-weighted attention per window;
    the gates from the block's tensors on the grid; R^{l-1} = W~^T (beta R^l) + (1 - beta) R^l per window.
    """
    attn, attn_grad = tensors.attn, required(tensors.attn_grad, "gradskip: the block's attn_grad")
    omega, g_tilde, s_tilde = head_weights(windows.per_image(attn), windows.per_image(attn_grad), options)
    per_window = omega.repeat_interleave(windows.windows, dim=0)
    w = mixed_attention(attn, attn_grad, tensors.value_norm, per_window, options)
    if options.gate == "off":
        beta = torch.ones_like(relevance)
    else:
        x, a = _tokens(tensors.block_input, "block_input"), _tokens(tensors.branch, "branch")
        beta = skip_gates(x, a, _tokens(tensors.branch_grad, "branch_grad"), options.gate, options.eps)
    below = windows.merge(propagate_block(windows.split(relevance), rows_or_identity(w), windows.split(beta)))
    return BlockStep(tensors.layer, relevance, below, omega, g_tilde, s_tilde, beta)


class SwinVisitor:
    """What the Swin methods share: the layout, the top, and the walk down the stages.

    Subclasses set :attr:`mode` and define :meth:`relevance`; gradient methods stream (blocks top
    first, :meth:`arrive` before each), forward methods keep per-block matrices and walk at the end.

    Attributes:
        steps: GradSkip's block steps (top first), None for the baselines.
    """

    mode: CaptureMode
    needs_value_norm = False
    needs_branch = False
    steps: list[BlockStep] | None = None

    def __init__(self, options: Any, layout: SwinLayout) -> None:
        self.options = options
        self.layout = layout
        self.stage = len(layout.grids) - 1

    def start(self, top: Top) -> None:
        self.top = top
        self.current = top.readout  # (B, N_L), the average pooling

    def block(self, tensors: BlockTensors) -> None:
        """Ignore the block (methods that read only the top)."""

    def arrive(self, layer: int) -> BlockWindows:
        """Carry the current relevance down to block ``layer``'s stage; that block's windows."""
        windows = self.layout.blocks[layer]
        self.current = self.layout.descend(self.current, self.stage, windows.stage)
        self.stage = windows.stage
        return windows

    def bottom(self) -> Tensor:
        """The current relevance carried down to the stage-0 grid, (B, N_0)."""
        return self.layout.descend(self.current, self.stage, 0)

    def relevance(self) -> Tensor:
        """Relevance of every stage-0 token, (B, N_0)."""
        raise NotImplementedError


class SwinGradSkipVisitor(SwinVisitor):
    """GradSkip streamed through the backward: :func:`window_block_step` as each block's gradients arrive."""

    mode: CaptureMode = "gradients"
    steps: list[BlockStep]

    def __init__(self, options: GradSkipOptions, layout: SwinLayout) -> None:
        super().__init__(options, layout)
        self.needs_value_norm = options.value_norm
        self.needs_branch = options.gate != "off"
        self.steps = []

    def start(self, top: Top) -> None:
        super().start(top)
        grad = top.output_grad
        flat = replace(top, output=top.output.flatten(1, 2), output_grad=None if grad is None else grad.flatten(1, 2))
        self.current = start_relevance(flat, self.options)  # the read-out, or (cls_mode="paper") <grad x^L, x^L>^+

    def block(self, tensors: BlockTensors) -> None:
        windows = self.arrive(tensors.layer)  # first: it carries the relevance to the block's stage
        step = window_block_step(self.current, tensors, windows, self.options)
        self.steps.append(step)
        self.current = step.relevance_below

    def relevance(self) -> Tensor:
        relevance = self.bottom()
        if self.options.completeness:
            explained = self.top.logits.gather(1, self.top.targets[:, None])
            relevance = relevance * explained / relevance.sum(dim=-1, keepdim=True)
        return relevance


class SwinCheferVisitor(SwinVisitor):
    """Chefer et al. 2021 per window, R + (mean_h (dA * A)^+)^T R, streamed through the backward."""

    mode: CaptureMode = "gradients"

    def block(self, tensors: BlockTensors) -> None:
        windows = self.arrive(tensors.layer)
        attn_grad = required(tensors.attn_grad, "chefer: the block's attn_grad")
        self.current = windows.merge(chefer_step(windows.split(self.current), tensors.attn, attn_grad))

    def relevance(self) -> Tensor:
        return self.bottom()


class SwinRolloutVisitor(SwinVisitor):
    """Rollout per window, rownorm(mean_h A + I), from the forward: keeps each block's (B * nW, w, w)."""

    mode: CaptureMode = "forward"

    def __init__(self, options: NoOptions, layout: SwinLayout) -> None:
        super().__init__(options, layout)
        self.matrices: list[Tensor] = []  # bottom block first

    def block(self, tensors: BlockTensors) -> None:
        self.matrices.append(rollout_matrix(tensors.attn))

    def relevance(self) -> Tensor:
        for layer in reversed(range(len(self.matrices))):
            windows = self.arrive(layer)
            self.current = windows.merge(propagate_block(windows.split(self.current), self.matrices[layer]))
        return self.bottom()


class SwinRawAttentionVisitor(SwinVisitor):
    """Raw attention: the top block by its head-mean attention per window, every other block passing
    relevance through, then the patch mergings (as SegFormer's raw attention; no CLS row to read)."""

    mode: CaptureMode = "forward"

    def block(self, tensors: BlockTensors) -> None:
        self.last = tensors  # the forward delivers the top block last

    def relevance(self) -> Tensor:
        windows = self.arrive(self.last.layer)
        self.current = windows.merge(propagate_block(windows.split(self.current), self.last.attn.mean(dim=1)))
        return self.bottom()


class SwinLrpVisitor(SwinVisitor):
    """CP-LRP: gradient x input at the stage-0 tokens entering block 0, signed."""

    mode: CaptureMode = "conservative"

    def relevance(self) -> Tensor:
        tokens, grad = required(self.top.input_tokens, "lrp: the block's input_tokens"), self.top.input_grad
        return token_relevance(tokens.flatten(1, 2), required(grad, "lrp: the block's input_grad").flatten(1, 2))


class SwinRandomVisitor(SwinVisitor):
    """The random floor over the stage-0 grid (:func:`random_relevance`)."""

    mode: CaptureMode = "forward"

    def relevance(self) -> Tensor:
        h, w = self.layout.grids[0]
        return random_relevance(self.top.logits.shape[0], h * w, self.options.seed, self.top.logits.device)


#: The Swin family's methods: name -> the visitor factory, (options, layout) -> a fresh visitor of one
#: pass, and its options dataclass; in the order of :data:`SwinMethod`. GradSkip's class-specific
#: readings (W~ scaled per layer, token and read-out weights) are not windowed: refused.
SWIN_METHODS: Registry[MethodSpec[Callable[[Any, SwinLayout], SwinVisitor]]] = Registry(
    "Swin method",
    {
        "gradskip": MethodSpec(
            SwinGradSkipVisitor, GradSkipOptions, unsupported=("normalisation", "token_weighting", "readout")
        ),
        "raw_attention": MethodSpec(SwinRawAttentionVisitor, NoOptions),
        "rollout": MethodSpec(SwinRolloutVisitor, NoOptions),
        "chefer": MethodSpec(SwinCheferVisitor, NoOptions),
        "lrp": MethodSpec(SwinLrpVisitor, NoOptions),
        "random": MethodSpec(SwinRandomVisitor, RandomOptions),
    },
)
