"""GradSkip as pure functions of captured tensors (no hooks, no model).

Shapes: B images, L blocks, H heads, N tokens (prefix tokens first, then P patches), D channels.
A relevance vector R is (B, N); propagation runs from the top block down. The algorithm and the
meaning of every option are in ``docs/method.md`` (the project's copy of the method doc).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from gradskip_lightning.adapters import BlockTensors, Capture, CaptureMode, Top
from gradskip_lightning.methods.output import MethodOutput, normalise
from gradskip_lightning.methods.registry import METHOD_SPECS, MethodSpec
from gradskip_lightning.validation import required

AttentionWeighting = Literal["abs_grad", "pos_grad", "none"]
Gate = Literal["token", "layer", "off"]
ClsMode = Literal["readout", "paper"]
HeadSelection = Literal["top_omega", "top_sparsity", "bottom_sparsity"]


@dataclass(frozen=True)
class GradSkipOptions:
    """Every [ours] choice of the method doc, named so an ablation can switch it.

    Args:
        alpha: weight of gradient flow against Gini sparsity in omega, in [0, 1].
        grad_threshold: heads with g < tau * max_q g are zeroed, tau in [0, 1).
        head_top_fraction: fraction of heads kept per layer, in (0, 1].
        head_selection: which heads are kept when ``head_top_fraction < 1``: the highest omega
            ("top_omega"), the sparsest ("top_sparsity", the paper's ablation) or the least
            sparse ("bottom_sparsity", the paper's negative control).
        attention_weighting: gradient factor G in W~: "abs_grad", "pos_grad" or "none".
        gate: skip gates per "token", per "layer" (default: it beat "token" on every score in
            docs/benchmarks.md), or "off" (beta_main = 1).
        cls_mode: "readout" (start at the tokens the head reads) or "paper" (patches only).
        completeness: scale each patch map so that it sums to the explained logit.
        value_norm: multiply W~ by the value-vector norm ||v_j||.
        eps: added to denominators of the gates.
    """

    alpha: float = 0.5
    grad_threshold: float = 0.05
    head_top_fraction: float = 1.0
    head_selection: HeadSelection = "top_omega"
    attention_weighting: AttentionWeighting = "abs_grad"
    gate: Gate = "layer"
    cls_mode: ClsMode = "readout"
    completeness: bool = False
    value_norm: bool = True
    eps: float = 1e-12

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        if not 0.0 <= self.grad_threshold < 1.0:
            raise ValueError(f"grad_threshold must be in [0, 1), got {self.grad_threshold}")
        if not 0.0 < self.head_top_fraction <= 1.0:
            raise ValueError(f"head_top_fraction must be in (0, 1], got {self.head_top_fraction}")
        for name, choices in (
            ("attention_weighting", AttentionWeighting),
            ("gate", Gate),
            ("cls_mode", ClsMode),
            ("head_selection", HeadSelection),
        ):
            allowed = get_args(choices)
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")


def sort_rows(rows: Tensor) -> Tensor:
    """``rows`` sorted ascending along the last axis, values only; float32/float64 CPU tensors go
    through NumPy's SIMD sort (faster than ``torch.sort`` on CPU: see the cost notes in docs/benchmarks.md)."""
    if rows.device.type == "cpu" and rows.dtype in (torch.float32, torch.float64):
        return torch.from_numpy(np.sort(rows.detach().numpy(), axis=-1))
    return rows.sort(dim=-1).values


def gini(rows: Tensor) -> Tensor:
    """Gini coefficient of non-negative rows, (..., n) -> (...): 0 uniform, 1 - 1/n one-hot."""
    v = sort_rows(rows)
    n = v.shape[-1]
    coef = 2 * torch.arange(1, n + 1, device=v.device, dtype=v.dtype) - n - 1
    total = v.sum(dim=-1)
    num = (v * coef).sum(dim=-1)
    return torch.where(total > 0, num / (n * total).clamp_min(torch.finfo(v.dtype).tiny), torch.zeros_like(total))


def head_weights(attn: Tensor, attn_grad: Tensor, options: GradSkipOptions) -> tuple[Tensor, Tensor, Tensor]:
    """Head importance of one block.

    Args:
        attn: A, (B, H, N, M); attn_grad: dy/dA, (B, H, N, M) (M keys; M = N for a ViT).

    Returns:
        (omega, g~, s~), each (B, H); omega sums to 1 over heads (0 where every head is 0).
    """
    g = (attn * attn_grad).abs().mean(dim=(-2, -1))
    g = torch.where(g >= options.grad_threshold * g.amax(dim=-1, keepdim=True), g, torch.zeros_like(g))
    g_tilde = normalise(g)
    s_tilde = normalise(gini(attn).mean(dim=-1))
    omega = options.alpha * g_tilde + (1.0 - options.alpha) * s_tilde
    if options.head_top_fraction < 1.0:
        keep = max(1, round(options.head_top_fraction * omega.shape[-1]))
        score = {"top_omega": omega, "top_sparsity": s_tilde, "bottom_sparsity": -s_tilde}[options.head_selection]
        top = score.topk(keep, dim=-1).indices
        mask = torch.zeros_like(omega).scatter_(-1, top, 1.0)
        omega = normalise(omega * mask)
    return omega, g_tilde, s_tilde


#: ``attention_weighting`` -> A * G(grad A), per head: (B, H, N, N), (B, H, N, N) -> (B, H, N, N).
GRADIENT_FACTORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "abs_grad": lambda attn, grad: attn * grad.abs(),
    "pos_grad": lambda attn, grad: (attn * grad).clamp_min(0),
    "none": lambda attn, grad: attn,
}


def mixed_attention(
    attn: Tensor, attn_grad: Tensor, value_norm: Tensor | None, omega: Tensor, options: GradSkipOptions
) -> Tensor:
    """W~ of one block before row normalisation: the omega-weighted, gradient-weighted attention.

    Args:
        attn, attn_grad: (B, H, N, M) (M keys: M = N for a ViT); value_norm: ||v_{q,j}||,
            (B, H, M), needed with ``options.value_norm``; omega: (B, H).

    Returns:
        (B, N, M), non-negative.
    """
    per_head = GRADIENT_FACTORS[options.attention_weighting](attn, attn_grad)
    if options.value_norm:
        per_head = per_head * required(value_norm, "gradskip (value_norm=True): the block's value_norm")[:, :, None, :]
    return torch.einsum("bh,bhij->bij", omega, per_head)


def rows_or_identity(w: Tensor) -> Tensor:
    """A square (B, N, N) matrix row-normalised, its all-zero rows replaced by identity rows."""
    n = w.shape[-1]
    eye = torch.eye(n, device=w.device, dtype=w.dtype).expand_as(w)
    empty = w.sum(dim=-1, keepdim=True) <= 0
    return torch.where(empty, eye, normalise(w))


def skip_gates(block_input: Tensor, branch: Tensor, branch_grad: Tensor, gate: Gate, eps: float = 1e-12) -> Tensor:
    """beta_main per token, (B, N), from x^{l-1}, a^l and dy/du^l, each (B, N, D).

    c_main = |<g, a>|, c_skip = |<g, x>|, beta_main = c_main / (c_main + c_skip + eps); "layer"
    uses the sums of c over tokens, "off" returns ones.
    """
    if gate == "off":
        return torch.ones(branch.shape[:2], device=branch.device, dtype=branch.dtype)
    c_main = (branch_grad * branch).sum(dim=-1).abs()
    c_skip = (branch_grad * block_input).sum(dim=-1).abs()
    if gate == "layer":
        c_main = c_main.sum(dim=-1, keepdim=True).expand_as(c_skip)
        c_skip = c_skip.sum(dim=-1, keepdim=True).expand_as(c_main)
    return c_main / (c_main + c_skip + eps)


def propagate_block(relevance: Tensor, matrix: Tensor, beta_main: Tensor | None = None) -> Tensor:
    """One step down: R^{l-1} = M^T (beta * R^l) + (1 - beta) * R^l; without beta, M^T R^l.

    Args:
        relevance: R^l, (B, N); matrix: M, (B, N, N); beta_main: (B, N) or None.
    """
    if beta_main is None:
        return torch.einsum("bij,bi->bj", matrix, relevance)
    return torch.einsum("bij,bi->bj", matrix, beta_main * relevance) + (1.0 - beta_main) * relevance


def propagate_through_keys(relevance: Tensor, w: Tensor, key_to_token: Tensor, beta_main: Tensor) -> Tensor:
    """:func:`propagate_block` with M = rows_or_identity(W S), without forming the (N, N) matrix M.

    W >= 0 and S's rows sum to 1, so W S has W's row sums and W's empty rows: rownorm(W S) =
    rownorm(W) S, and R^{l-1} = S^T rownorm(W)^T (beta R^l) + [empty rows] beta R^l + (1 - beta) R^l,
    O(B N M) instead of O(B N M N).

    Args:
        relevance: R^l, (B, N); w: W, (B, N, M), non-negative; key_to_token: S, (M, N);
            beta_main: (B, N).
    """
    kept = beta_main * relevance
    empty = w.sum(dim=-1) <= 0
    through = torch.einsum("bij,bi->bj", normalise(w), kept) @ key_to_token
    return through + torch.where(empty, kept, torch.zeros_like(kept)) + (1.0 - beta_main) * relevance


def patch_tokens_only(tensors: BlockTensors, prefix: int) -> BlockTensors:
    """Block tensors restricted to patch tokens, attention rows re-normalised (``cls_mode="paper"``)."""
    cut = lambda t: None if t is None else t[..., prefix:, :]  # noqa: E731 - token axis -2 of (B, N, D)
    return BlockTensors(
        layer=tensors.layer,
        attn=normalise(tensors.attn[:, :, prefix:, prefix:]),
        value_norm=None if tensors.value_norm is None else tensors.value_norm[:, :, prefix:],
        block_input=cut(tensors.block_input),
        branch=cut(tensors.branch),
        attn_grad=None if tensors.attn_grad is None else tensors.attn_grad[:, :, prefix:, prefix:],
        branch_grad=cut(tensors.branch_grad),
    )


@dataclass
class BlockStep:
    """One block of the top-down propagation (B images, N tokens propagated, H heads)."""

    layer: int  # l - 1: the block's index, 0 = bottom
    relevance_above: Tensor  # R^l, (B, N)
    relevance_below: Tensor  # R^{l-1}, (B, N)
    omega: Tensor  # (B, H)
    grad_flow: Tensor  # g~ (B, H)
    sparsity: Tensor  # s~ (B, H)
    gates: Tensor  # beta_main (B, N)


def start_relevance(top: Top, options: GradSkipOptions) -> Tensor:
    """R^L, (B, N): the read-out, or for ``cls_mode="paper"`` max(0, <grad x^L, x^L>) over the
    patch tokens (uniform where that is all zero)."""
    if options.cls_mode == "readout":
        return top.readout
    p = top.num_prefix_tokens
    output_grad = required(top.output_grad, "gradskip (cls_mode='paper'): the gradient of x^L")
    start = (output_grad[:, p:] * top.output[:, p:]).sum(dim=-1).clamp_min(0)
    uniform = torch.full_like(start, 1.0 / start.shape[-1])
    return torch.where(start.sum(dim=-1, keepdim=True) > 0, start, uniform)


def block_step(
    relevance: Tensor, tensors: BlockTensors, options: GradSkipOptions, key_to_token: Tensor | None = None
) -> BlockStep:
    """GradSkip through one block: R^l (B, N) and the block's tensors -> :class:`BlockStep`.

    ``key_to_token``: S (M, N), rows summing to 1, for attentions over M reduced keys (SegFormer:
    W~ becomes rownorm(W S)); None where the keys are the N tokens.
    """
    attn, attn_grad = tensors.attn, required(tensors.attn_grad, "gradskip: the block's attn_grad")
    omega, g_tilde, s_tilde = head_weights(attn, attn_grad, options)
    w = mixed_attention(attn, attn_grad, tensors.value_norm, omega, options)
    if options.gate == "off":
        beta = torch.ones_like(relevance)
    else:
        block_input, branch = required(tensors.block_input, "gradskip: the block's block_input"), tensors.branch
        branch_grad = required(tensors.branch_grad, "gradskip: the block's branch_grad")
        beta = skip_gates(
            block_input, required(branch, "gradskip: the block's branch"), branch_grad, options.gate, options.eps
        )
    if key_to_token is None:
        below = propagate_block(relevance, rows_or_identity(w), beta)
    else:
        below = propagate_through_keys(relevance, w, key_to_token, beta)
    return BlockStep(tensors.layer, relevance, below, omega, g_tilde, s_tilde, beta)


class GradSkipVisitor:
    """GradSkip streamed through one pass: :func:`block_step` on each block as its gradients
    arrive (top first); keeps only R and the per-block internals (B, H) and (B, N).

    Args:
        options: the method's options.
    """

    mode: CaptureMode = "gradients"

    def __init__(self, options: GradSkipOptions) -> None:
        self.options = options
        self.needs_value_norm = options.value_norm
        self.needs_branch = options.gate != "off"
        self.steps: list[BlockStep] = []  # top block first

    def start(self, top: Top) -> None:
        self.top = top
        self.relevance = start_relevance(top, self.options)

    def block(self, tensors: BlockTensors) -> None:
        if self.options.cls_mode == "paper":
            tensors = patch_tokens_only(tensors, self.top.num_prefix_tokens)
        step = block_step(self.relevance, tensors, self.options)
        self.steps.append(step)
        self.relevance = step.relevance_below

    def result(self) -> MethodOutput:
        """Patch relevance (B, P) and head weights, gradient flow, sparsity (B, L, H), gates (B, L, N)."""
        steps = self.steps[::-1]  # bottom block first
        patches = self.top.grid_size[0] * self.top.grid_size[1]
        patch = steps[0].relevance_below[:, -patches:]
        if self.options.completeness:
            explained = self.top.logits.gather(1, self.top.targets[:, None])
            patch = patch * explained / patch.sum(dim=-1, keepdim=True)
        stack = lambda name: torch.stack([getattr(s, name) for s in steps], dim=1)  # noqa: E731 - (B, L, ...)
        return MethodOutput(patch, stack("omega"), stack("grad_flow"), stack("sparsity"), stack("gates"))


def propagation(capture: Capture, options: GradSkipOptions) -> list[BlockStep]:
    """GradSkip's propagation over a full capture, one :class:`BlockStep` per block, top block first."""
    visitor = GradSkipVisitor(options)
    capture.replay(visitor)
    return visitor.steps


def _padded(rows: list[Tensor]) -> Tensor:
    """Per-layer (B, n_l) tensors -> (B, L, max n_l), NaN past each row's end."""
    width = max(r.shape[-1] for r in rows)
    return torch.stack([F.pad(r.float(), (0, width - r.shape[-1]), value=math.nan) for r in rows], dim=1)


#: Explanation field -> the :class:`BlockStep` attribute it stacks.
_INTERNALS = {"head_weights": "omega", "grad_flow": "grad_flow", "sparsity": "sparsity", "gates": "gates"}


def padded_internals(steps: list[BlockStep] | None, batch: int) -> tuple[dict[str, Tensor], Tensor]:
    """GradSkip's head statistics and gates of ``steps`` (top block first, as the propagation
    makes them) stacked bottom block first, (B, L, ...) NaN-padded where layers differ in heads
    or tokens (SegFormer's stages, Swin's), as :class:`~gradskip_lightning.explanation.Explanation`
    fields ({} for the baselines); and (B,) True where all of them are finite."""
    finite = torch.ones(batch, dtype=torch.bool)
    if not steps:
        return {}, finite
    bottom_first = steps[::-1]
    for step in bottom_first:
        for name in _INTERNALS.values():
            finite &= torch.isfinite(getattr(step, name)).flatten(1).all(dim=1).cpu()
    return {field: _padded([getattr(s, name) for s in bottom_first]) for field, name in _INTERNALS.items()}, finite


METHOD_SPECS.register("gradskip", MethodSpec(GradSkipVisitor, GradSkipOptions))
