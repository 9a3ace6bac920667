"""GradSkip as pure functions of captured tensors (no hooks, no model).

Shapes: B images, L blocks, H heads, N tokens (prefix tokens first, then P patches), D channels.
A relevance vector R is (B, N); propagation runs from the top block down. The algorithm and the
meaning of every option are in ``docs/method.md`` (the project's copy of the method doc).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from gradskip_lightning.core.tensors import BlockTensors, Capture, CaptureMode, Top
from gradskip_lightning.core.validation import required
from gradskip_lightning.methods.output import MethodOutput, normalise

AttentionWeighting = Literal["abs_grad", "pos_grad", "signed_grad", "none"]
Gate = Literal["token", "layer", "off"]
ClsMode = Literal["readout", "paper"]
HeadSelection = Literal["top_omega", "top_sparsity", "bottom_sparsity"]
Normalisation = Literal["rows", "layer"]
TokenWeighting = Literal["off", "grad_x_act"]
Readout = Literal["relevance", "grad_x_act"]


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
        attention_weighting: gradient factor G in W~: "abs_grad", "pos_grad", "signed_grad" (A * dy/dA
            with its sign: relevance may turn negative on the way down; the map is clamped at 0 at the
            end) or "none".
        normalisation: how W~ is scaled: "rows" (each row sums to 1) or "layer" (one scalar per block
            and image, so that the total relevance is kept while rows keep their relative mass).
        token_weighting: "grad_x_act" re-weights the relevance entering the attention branch over the
            query tokens by their contribution (<dy/du_i, a_i>)^+, keeping its total; "off".
        readout: "grad_x_act" multiplies the bottom patch relevance by the tokens' (<dy/du^1_j, u^1_j>)^+
            (gradient x activation after the bottom attention), keeping its total; "relevance" reads R^0.
        gate: skip gates per "token", per "layer" (default: it beat "token" on every score in
            docs/results/faithfulness.md), or "off" (beta_main = 1).
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
    normalisation: Normalisation = "rows"
    token_weighting: TokenWeighting = "off"
    readout: Readout = "relevance"
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
            ("normalisation", Normalisation),
            ("token_weighting", TokenWeighting),
            ("readout", Readout),
        ):
            allowed = get_args(choices)
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")

    @staticmethod
    def class_specific_overrides() -> dict[str, Any]:
        """The options the :meth:`class_specific` preset changes from the defaults (docs/method.md)."""
        return dict(CLASS_SPECIFIC)

    @classmethod
    def class_specific(cls, **changes: Any) -> GradSkipOptions:
        """The class-specific preset: maps that follow the explained class and the weights (class
        sensitivity and randomisation similarity measured in docs/results/faithfulness.md), ``changes`` on top."""
        return cls(**{**CLASS_SPECIFIC, **changes})

    @property
    def conserves(self) -> bool:
        """Whether every block step keeps the total relevance (W~ non-negative; the readout may rescale)."""
        return self.attention_weighting != "signed_grad"

    @property
    def needs_contributions(self) -> bool:
        """Whether a step needs the tokens' gradient x activation (x^{l-1}, a^l and dy/du^l)."""
        return TOKEN_WEIGHTS[self.token_weighting] is not None or READOUT_WEIGHTS[self.readout] is not None


#: A token's gradient x activation at a block, (B, N), from x^{l-1}, a^l and dy/du^l, each (B, N, D).
TokenContribution = Callable[[Tensor, Tensor, Tensor], Tensor]
#: ``token_weighting`` -> the weights of the queries' relevance entering the attention branch (None: unchanged):
#: "grad_x_act", the attention branch's contribution <dy/du_i, a_i>.
TOKEN_WEIGHTS: dict[str, TokenContribution | None] = {
    "off": None,
    "grad_x_act": lambda block_input, branch, grad: (grad * branch).sum(dim=-1),
}
#: ``readout`` -> the weights of the bottom patch relevance, from the bottom block (None: R^0 as it is):
#: "grad_x_act", the token's contribution after the bottom attention <dy/du^1_j, u^1_j>.
READOUT_WEIGHTS: dict[str, TokenContribution | None] = {
    "relevance": None,
    "grad_x_act": lambda block_input, branch, grad: (grad * (block_input + branch)).sum(dim=-1),
}

#: What :meth:`GradSkipOptions.class_specific` changes from the defaults.
CLASS_SPECIFIC: dict[str, Any] = {"attention_weighting": "pos_grad", "normalisation": "layer"}


def sort_rows(rows: Tensor) -> Tensor:
    """``rows`` sorted ascending along the last axis, values only; float32/float64 CPU tensors go
    through NumPy's SIMD sort (faster than ``torch.sort`` on CPU: see the cost notes in docs/results/cost.md)."""
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
    "signed_grad": lambda attn, grad: attn * grad,
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
        (B, N, M), non-negative except with ``attention_weighting="signed_grad"``.
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


def _layer_scale(mass: Tensor, empty: Tensor, kept: Tensor) -> Tensor:
    """One k per image, (B, N): sum_i |kept_i| / sum_i |kept_i| mass_i over the rows with mass."""
    held = torch.where(empty, torch.zeros_like(kept), kept.abs())
    k = held.sum(dim=-1, keepdim=True) / (held * mass).sum(dim=-1, keepdim=True).clamp_min(torch.finfo(mass.dtype).tiny)
    return k.expand_as(mass)


#: ``normalisation`` -> the scale of each row of W~, (B, N), from the rows' absolute mass (B, N), their
#: emptiness (B, N) and the relevance sent in (B, N).
ROW_SCALES: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {
    "rows": lambda mass, empty, kept: 1.0 / mass.clamp_min(torch.finfo(mass.dtype).tiny),
    "layer": _layer_scale,
}


def attention_weights(w: Tensor, kept: Tensor, normalisation: Normalisation) -> tuple[Tensor, Tensor]:
    """W~ (B, N, M) scaled for one step, and its rows without mass ``empty`` (B, N) (given 0 weights).

    "rows": w_ij / sum_j |w_ij|. "layer": w * k with one k per image, k = sum_i |kept_i| /
    sum_i |kept_i| sum_j |w_ij| over the rows with mass, so that sum_j (W^T kept)_j = sum_i kept_i for
    non-negative W while rows keep their relative mass; ``kept`` (B, N) is the relevance sent in.
    """
    mass = w.abs().sum(dim=-1)
    empty = mass <= 0
    scale = ROW_SCALES[normalisation](mass, empty, kept)
    return torch.where(empty[..., None], torch.zeros_like(w), w * scale[..., None]), empty


def reweight(relevance: Tensor, weights: Tensor) -> Tensor:
    """``relevance`` (B, N) times ``weights``^+ (B, N), rescaled to keep sum |relevance| per image;
    unchanged where the product is all 0."""
    weighted = relevance * weights.clamp_min(0)
    total, new = relevance.abs().sum(dim=-1, keepdim=True), weighted.abs().sum(dim=-1, keepdim=True)
    return torch.where(new > 0, weighted * total / new.clamp_min(torch.finfo(new.dtype).tiny), relevance)


def attention_step(
    kept: Tensor, w: Tensor, normalisation: Normalisation = "rows", key_to_token: Tensor | None = None
) -> Tensor:
    """W~'s share of one step, (B, N): kept (B, N) sent down the scaled W~ (:func:`attention_weights`
    of w (B, N, M)), then through S (M, N) when ``key_to_token`` is given; empty rows keep their share.

    With S, rownorm(W) S = rownorm(W S) (S's rows sum to 1), so the (N, N) matrix is never formed:
    O(B N M) instead of O(B N M N).
    """
    weights, empty = attention_weights(w, kept, normalisation)
    through = torch.einsum("bij,bi->bj", weights, kept)
    if key_to_token is not None:
        through = through @ key_to_token
    return through + torch.where(empty, kept, torch.zeros_like(kept))


def propagate_through_keys(relevance: Tensor, w: Tensor, key_to_token: Tensor, beta_main: Tensor) -> Tensor:
    """:func:`propagate_block` with M = rows_or_identity(W S), without forming the (N, N) matrix M.

    Args:
        relevance: R^l, (B, N); w: W, (B, N, M), non-negative; key_to_token: S, (M, N);
            beta_main: (B, N).
    """
    return attention_step(beta_main * relevance, w, "rows", key_to_token) + (1.0 - beta_main) * relevance


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
    contribution: Tensor | None = None  # the read-out's token weights (B, N) (READOUT_WEIGHTS), when asked


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
    beta, token_weights, contribution = torch.ones_like(relevance), None, None
    if options.gate != "off" or options.needs_contributions:
        block_input = required(tensors.block_input, "gradskip: the block's block_input")
        branch = required(tensors.branch, "gradskip: the block's branch")
        branch_grad = required(tensors.branch_grad, "gradskip: the block's branch_grad")
        if options.gate != "off":
            beta = skip_gates(block_input, branch, branch_grad, options.gate, options.eps)
        weigh, read = TOKEN_WEIGHTS[options.token_weighting], READOUT_WEIGHTS[options.readout]
        token_weights = None if weigh is None else weigh(block_input, branch, branch_grad)
        contribution = None if read is None else read(block_input, branch, branch_grad)
    kept = beta * relevance
    if token_weights is not None:
        kept = reweight(kept, token_weights)
    below = attention_step(kept, w, options.normalisation, key_to_token) + (1.0 - beta) * relevance
    return BlockStep(tensors.layer, relevance, below, omega, g_tilde, s_tilde, beta, contribution)


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
        self.needs_branch = options.gate != "off" or options.needs_contributions
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
        patch = readout(steps[0], patches, self.options)
        if self.options.completeness:
            explained = self.top.logits.gather(1, self.top.targets[:, None])
            patch = patch * explained / patch.sum(dim=-1, keepdim=True)
        stack = lambda name: torch.stack([getattr(s, name) for s in steps], dim=1)  # noqa: E731 - (B, L, ...)
        return MethodOutput(patch, stack("omega"), stack("grad_flow"), stack("sparsity"), stack("gates"))


def readout(bottom: BlockStep, tokens: int, options: GradSkipOptions) -> Tensor:
    """The map (B, tokens) from the bottom step: the last ``tokens`` entries of R^0, times the read-out's
    token weights (:data:`READOUT_WEIGHTS`) when there are any, clamped at 0 with ``"signed_grad"``."""
    relevance = bottom.relevance_below[:, -tokens:]
    if bottom.contribution is not None:
        relevance = reweight(relevance, bottom.contribution[:, -tokens:])
    return relevance if options.conserves else relevance.clamp_min(0)


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
    or tokens (SegFormer's stages, Swin's), as :class:`~gradskip_lightning.core.explanation.Explanation`
    fields ({} for the baselines); and (B,) True where all of them are finite."""
    finite = torch.ones(batch, dtype=torch.bool)
    if not steps:
        return {}, finite
    bottom_first = steps[::-1]
    for step in bottom_first:
        for name in _INTERNALS.values():
            finite &= torch.isfinite(getattr(step, name)).flatten(1).all(dim=1).cpu()
    return {field: _padded([getattr(s, name) for s in bottom_first]) for field, name in _INTERNALS.items()}, finite
