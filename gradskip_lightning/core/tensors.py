"""What one explain pass hands the methods: per-block tensors as they appear, and the top.

Shapes: B images, H heads, N tokens (prefix tokens first, then P patches), D channels, C classes.

:meth:`Adapter.run <gradskip_lightning.core.adapter.Adapter.run>` streams a pass into a
:class:`BlockVisitor` (``start`` once, ``block`` once per block) and keeps nothing itself, so a
method holds only what its next step needs. The order depends on the :data:`CaptureMode`:

- ``"forward"``: no backward, no graph; blocks bottom first during the forward, then ``start``.
- ``"gradients"``: one activation-only backward; ``start`` when dy/dx^L arrives (first in the
  backward), then blocks top first, each as soon as its dy/dA^l exists.
- ``"conservative"``: attention and norm denominators held constant (CP-LRP); blocks bottom first
  during the forward (no per-block gradients), then ``start`` with dy/dx^0 after the backward.

:class:`Recorder` is the visitor that keeps everything: it builds the full :class:`Capture` that
tests and property checks read, and :meth:`Capture.replay` feeds a capture back to any visitor in
the order of its mode, so a method's block step is the same code on both paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from torch import Tensor

CaptureMode = Literal["forward", "gradients", "conservative"]


@dataclass
class BlockTensors:
    """Block l's tensors; the fields a visitor did not ask for are None.

    Attributes:
        layer: l - 1, the block's index (0 = bottom).
        attn: A^l, post-softmax attention probabilities, (B, H, N, N).
        value_norm: ||v^l_{q,j}||, each head's value-vector norm, (B, H, N).
        block_input: x^{l-1}, what reaches the residual sum beside the attention branch, (B, N, D).
        branch: a^l, the attention-branch output as added to the residual stream, (B, N, D).
        attn_grad: dy/dA^l, (B, H, N, N) (mode "gradients").
        branch_grad: dy/du^l (= dy/da^l), u^l = x^{l-1} + a^l, (B, N, D) (mode "gradients").
    """

    layer: int
    attn: Tensor
    value_norm: Tensor | None = None
    block_input: Tensor | None = None
    branch: Tensor | None = None
    attn_grad: Tensor | None = None
    branch_grad: Tensor | None = None


@dataclass
class Top:
    """The top of the propagation and the pass's outputs.

    Attributes:
        logits: (B, C); targets: (B,) the explained classes (y = sum_b logit[b, target_b]).
        readout: the token distribution the pooling reads, (B, N), rows summing to 1.
        output: x^L, the last block's output, (B, N, D); output_grad: dy/dx^L or None.
        input_tokens, input_grad: x^0 entering block 0 and dy/dx^0, (B, N, D) (mode "conservative").
    """

    logits: Tensor
    targets: Tensor
    readout: Tensor
    output: Tensor
    num_prefix_tokens: int
    grid_size: tuple[int, int]
    output_grad: Tensor | None = None
    input_tokens: Tensor | None = None
    input_grad: Tensor | None = None


class BlockVisitor(Protocol):
    """A consumer of one pass: what it needs, and its two callbacks (order: module doc)."""

    mode: CaptureMode
    needs_value_norm: bool  # compute ||v|| per block (an extra projection on BEiT/EVA)
    needs_branch: bool  # keep x^{l-1}, a^l and dy/du^l until the block's step

    def start(self, top: Top) -> None: ...

    def block(self, tensors: BlockTensors) -> None: ...


@dataclass
class Capture:
    """Every block's tensors of one batched pass (bottom block first; shapes in :class:`BlockTensors`
    and :class:`Top`). Built by :class:`Recorder`; for tests and property checks."""

    blocks: list[BlockTensors]
    top: Top
    mode: CaptureMode

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    def _field(self, name: str) -> list[Tensor] | None:
        values = [getattr(b, name) for b in self.blocks]
        return None if any(v is None for v in values) else values

    @property
    def attn(self) -> list[Tensor]:
        return [b.attn for b in self.blocks]

    @property
    def attn_grad(self) -> list[Tensor] | None:
        return self._field("attn_grad")

    @property
    def value_norm(self) -> list[Tensor] | None:
        return self._field("value_norm")

    @property
    def block_input(self) -> list[Tensor] | None:
        return self._field("block_input")

    @property
    def branch(self) -> list[Tensor] | None:
        return self._field("branch")

    @property
    def branch_grad(self) -> list[Tensor] | None:
        return self._field("branch_grad")

    @property
    def logits(self) -> Tensor:
        return self.top.logits

    @property
    def targets(self) -> Tensor:
        return self.top.targets

    @property
    def readout(self) -> Tensor:
        return self.top.readout

    @property
    def output(self) -> Tensor:
        return self.top.output

    @property
    def output_grad(self) -> Tensor | None:
        return self.top.output_grad

    @property
    def input_grad(self) -> Tensor | None:
        return self.top.input_grad

    @property
    def num_prefix_tokens(self) -> int:
        return self.top.num_prefix_tokens

    @property
    def grid_size(self) -> tuple[int, int]:
        return self.top.grid_size

    def replay(self, visitor: BlockVisitor) -> None:
        """Feed this capture to ``visitor`` as :meth:`Adapter.run` would in ``visitor.mode``.

        Raises:
            ValueError: the visitor's mode needs what this capture's mode did not record.
        """
        if visitor.mode not in (self.mode, "forward"):
            raise ValueError(f"A {visitor.mode!r} method needs a capture taken in that mode; this one is {self.mode!r}")
        if visitor.mode == "gradients":
            visitor.start(self.top)
            for tensors in reversed(self.blocks):
                visitor.block(tensors)
        else:
            for tensors in self.blocks:
                visitor.block(tensors)
            visitor.start(self.top)


class Recorder:
    """The visitor that keeps every block (what :meth:`Adapter.capture` returns as a :class:`Capture`)."""

    needs_value_norm = True
    needs_branch = True

    def __init__(self, mode: CaptureMode) -> None:
        self.mode = mode
        self.blocks: list[BlockTensors] = []
        self.top: Top | None = None

    def start(self, top: Top) -> None:
        self.top = top

    def block(self, tensors: BlockTensors) -> None:
        self.blocks.append(tensors)

    def capture(self) -> Capture:
        """The recorded pass, bottom block first."""
        if self.top is None:
            raise RuntimeError("Recorder.capture() before the pass started: no top was recorded")
        return Capture(sorted(self.blocks, key=lambda b: b.layer), self.top, self.mode)
