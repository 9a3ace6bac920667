"""One pass of :meth:`PassAdapter.run <gradskip_lightning.core.adapter.PassAdapter.run>`: hooks, forward, backward.

A :class:`StreamedPass` lives for one call. Its forward hooks, at the adapter's
:class:`BlockPoints`, keep each block's tensors in a
:class:`PassState` until the block is complete; :meth:`StreamedPass.deliver` then hands them to the
visitor and drops them: during the forward (modes "forward" and "conservative", bottom block
first) or as each dy/dA^l arrives in the backward (mode "gradients", top block first). A
conservative pass also runs inside the adapter's ``constant_attention()``. Order and meaning of the
tensors: :mod:`gradskip_lightning.core.tensors`.

Shapes: B images, H heads, N tokens (prefix tokens first), D channels, C classes, A = H * head width.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from gradskip_lightning.core.conservative import constant_norm_hooks
from gradskip_lightning.core.tensors import BlockTensors, BlockVisitor, CaptureMode, Top
from gradskip_lightning.core.validation import check_logits

__all__ = ["BlockPoints", "PassState", "StreamedPass", "Streamed", "value_norms"]


@dataclass(frozen=True)
class BlockPoints:
    """Where one block's tensors appear in its forward.

    Attributes:
        probabilities: the module whose output is A^l (B, H, N, N), or holds it at
            ``probabilities_index`` of a tuple; A^l must be on the path to the block's output.
        branch: the module whose output in its first call of the block is a^l (B, N, D), the
            attention branch as added to the residual stream (or its ``branch_index`` of a tuple).
        values: the module whose output holds the value vectors; ``value_vectors`` takes them out of
            it, (B, N, A) (None: the output is them).
        heads: H, the attention's heads; value_heads: its value heads (grouped-query attention),
            None: as many as ``heads``.
        attention, values_from_input: for an attention that may apply its value weight functionally
            (``values`` then never runs): the attention module, and its values (B, N, A) from its
            input (B, N, D).
    """

    probabilities: nn.Module
    branch: nn.Module
    values: nn.Module
    heads: int
    probabilities_index: int | None = None
    branch_index: int | None = None
    value_vectors: Callable[[Tensor], Tensor] | None = None
    value_heads: int | None = None
    attention: nn.Module | None = None
    values_from_input: Callable[[Tensor], Tensor] | None = None


class Streamed(Protocol):
    """What the pass reads of its :class:`~gradskip_lightning.core.adapter.PassAdapter` (which implements it)."""

    backbone: Any

    @property
    def blocks(self) -> list[nn.Module]: ...

    def block_points(self, block: nn.Module) -> BlockPoints: ...

    @property
    def num_prefix_tokens(self) -> int: ...

    @property
    def grid_size(self) -> tuple[int, int]: ...

    @property
    def pool_input_module(self) -> nn.Module | None: ...

    def explain_mode(self, model: nn.Module | None = None) -> AbstractContextManager[None]: ...

    def constant_attention(self) -> AbstractContextManager[None]: ...

    def norm_scope(self) -> list[nn.Module]: ...

    def readout(self, batch: int, pool_input: Tensor | None, device: torch.device, dtype: torch.dtype) -> Tensor: ...


def _pick(out: Any, index: int | None) -> Tensor:
    return out if index is None else out[index]


def value_norms(v: Tensor, heads: int, value_heads: int | None = None) -> Tensor:
    """||v_{q,j}|| per head, (B, H, N), from values (B, N, A) of ``value_heads`` heads (None: ``heads``);
    grouped-query value heads are repeated to the ``heads`` query heads.

    Example:
        >>> value_norms(torch.ones(1, 2, 8), heads=4, value_heads=2)[0, :, 0]
        tensor([2., 2., 2., 2.])
    """
    b, n, _ = v.shape
    value_heads = value_heads or heads
    norms = v.reshape(b, n, value_heads, -1).norm(dim=-1).transpose(1, 2)
    return norms.repeat_interleave(heads // value_heads, dim=1)


@dataclass
class PassState:
    """What one pass holds between its hooks; a block's tensors wait here until it is delivered.

    Attributes:
        calls: attention calls seen (one per block when the forward runs the backbone once).
        delivered: blocks handed to the visitor.
        bottom: A^1 as the forward made it, in the graph, (B, H, N, N): where the backward of mode
            "gradients" stops.
        output: x^L, the last block's output, in the graph (outside mode "forward"), (B, N, D).
        pool_input: the tokens entering attention pooling (pooling "map"), (B, N or P, D).
        input_tokens: x^0, block 0's input, in the graph (outside mode "forward"), (B, N, D).
        attn: A^l by block index, (B, H, N, N).
        value_norm: ||v^l|| by block index, (B, H, N).
        attn_input: the attention's input by block index, (B, N, D), until its A^l exists.
        block_input: x^{l-1} by block index, (B, N, D).
        branch: a^l by block index, (B, N, D).
        branch_grad: dy/du^l by block index, (B, N, D) (mode "gradients").
    """

    calls: int = 0
    delivered: int = 0
    bottom: Tensor | None = None
    output: Tensor | None = None
    pool_input: Tensor | None = None
    input_tokens: Tensor | None = None
    attn: dict[int, Tensor] = field(default_factory=dict)
    value_norm: dict[int, Tensor] = field(default_factory=dict)
    attn_input: dict[int, Tensor] = field(default_factory=dict)
    block_input: dict[int, Tensor] = field(default_factory=dict)
    branch: dict[int, Tensor] = field(default_factory=dict)
    branch_grad: dict[int, Tensor] = field(default_factory=dict)


class StreamedPass:
    """One call of :meth:`PassAdapter.run`: hooks on the backbone, ``model(images)``, the backward.

    Args:
        adapter: the adapter of the backbone inside ``model``.
        model: the module whose forward maps images to logits (B, C).
        visitor: the consumer; its ``mode`` picks the pass.
    """

    def __init__(self, adapter: Streamed, model: nn.Module, visitor: BlockVisitor) -> None:
        self.adapter = adapter
        self.model = model
        self.visitor = visitor
        self.mode: CaptureMode = visitor.mode
        self.streaming = self.mode == "gradients"  # blocks go out in the backward, else in the forward
        self.blocks: list[nn.Module] = adapter.blocks
        self.points = [adapter.block_points(block) for block in self.blocks]
        self.state = PassState()
        self.branched: set[int] = set()  # blocks whose branch module has run once in this pass

    def run(self, images: Tensor, targets: Tensor | None) -> Top:
        """The whole pass, once per object; arguments, result and errors as in :meth:`PassAdapter.run`."""
        graph = torch.enable_grad() if self.mode != "forward" else torch.no_grad()
        with self.adapter.explain_mode(self.model), torch.inference_mode(False), graph:
            logits = self.forward(images)
            self.check(logits, images.shape[0])
            top = self.make_top(logits, targets, images)
            if self.mode == "forward":
                self.finish_forward(top)
                return top
            y = logits.gather(1, top.targets[:, None]).sum()
            del logits  # the graph holds what the backward needs
            if self.mode == "conservative":
                self.backward_conservative(top, y)
            else:
                self.backward_gradients(top, y)
        return top

    # -- the steps of the pass -------------------------------------------------------------------
    def forward(self, images: Tensor) -> Tensor:
        """``model`` on a copy of ``images`` (B, C, H, W) with the hooks installed (removed on any exit),
        inside the adapter's ``constant_attention()`` in mode "conservative".

        Returns:
            What the model returns, the logits (B, C) unless :meth:`check` refuses it.
        """
        if self.mode == "conservative":
            with self.adapter.constant_attention():
                return self.hooked_forward(images)
        return self.hooked_forward(images)

    def hooked_forward(self, images: Tensor) -> Tensor:
        """``model`` on a copy of ``images`` with the hooks installed, removed on any exit."""
        handles: list[RemovableHandle] = []
        try:
            self.install(handles)
            # A fresh leaf that requires grad: the graph exists even for a frozen model, and the
            # clone is a normal tensor even when the caller's batch is an inference tensor.
            x = images.detach().clone().requires_grad_(self.mode != "forward")
            return self.model(x)
        finally:
            for handle in handles:
                handle.remove()

    def install(self, handles: list[RemovableHandle]) -> None:
        """Register the hooks of the pass at the adapter's block points, appending each handle to
        ``handles`` as soon as it exists, so that the caller removes every one, also after a failure
        half-way."""
        for i, (block, points) in enumerate(zip(self.blocks, self.points)):
            handles.append(block.register_forward_pre_hook(partial(self.on_block_input, i), with_kwargs=True))
            handles.append(points.probabilities.register_forward_hook(partial(self.on_probabilities, i)))
            handles.append(points.branch.register_forward_hook(partial(self.on_first_branch, i)))
            if self.visitor.needs_value_norm:
                if points.attention is not None:
                    hook = partial(self.on_attn_input, i)
                    handles.append(points.attention.register_forward_pre_hook(hook, with_kwargs=True))
                handles.append(points.values.register_forward_hook(partial(self.on_values, i)))
        handles.append(self.blocks[-1].register_forward_hook(self.on_output))
        handles.append(self.blocks[0].register_forward_pre_hook(self.on_input, with_kwargs=True))
        pool = self.adapter.pool_input_module
        if pool is not None:
            handles.append(pool.register_forward_pre_hook(self.on_pool_input))
        if self.mode == "conservative":  # the attention is held by constant_attention(); the norms here
            handles += constant_norm_hooks(self.adapter.norm_scope())

    def check(self, logits: Tensor, batch: int) -> None:
        """Raise ValueError unless the forward returned logits (batch, C) and ran each block once."""
        check_logits(self.model, logits, batch)
        ran = self.state.calls
        if ran != len(self.blocks) or self.state.output is None:
            raise ValueError(
                f"{type(self.model).__name__}.forward must run its {type(self.adapter.backbone).__name__} once, "
                f"through all {len(self.blocks)} blocks; {ran} block attentions ran."
            )

    def make_top(self, logits: Tensor, targets: Tensor | None, images: Tensor) -> Top:
        """The :class:`Top` of the checked forward: logits (B, C), ``targets`` (B,) or the predicted classes,
        the pooling's readout (B, N) and x^L (B, N, D)."""
        if targets is None:
            targets = logits.detach().argmax(dim=1)
        with torch.no_grad():
            readout = self.adapter.readout(images.shape[0], self.state.pool_input, images.device, images.dtype)
        output = self.state.output
        assert output is not None  # check() refuses a forward without it
        return Top(
            logits.detach(), targets, readout, output.detach(), self.adapter.num_prefix_tokens, self.adapter.grid_size
        )

    def finish_forward(self, top: Top) -> None:
        """Mode "forward": the blocks went out during the forward; start the visitor, still without graph."""
        self.visitor.start(top)

    def backward_conservative(self, top: Top, y: Tensor) -> None:
        """Mode "conservative": the blocks went out during the forward; dy/dx^0 and x^0 (B, N, D) into
        ``top``, then ``visitor.start``."""
        x0 = self.state.input_tokens
        assert x0 is not None  # check(): block 0 ran
        (top.input_grad,) = torch.autograd.grad(y, x0)
        top.input_tokens = x0.detach()
        with torch.no_grad():
            self.visitor.start(top)

    def backward_gradients(self, top: Top, y: Tensor) -> None:
        """Mode "gradients": one activation-only backward of ``y`` down to A^1, streaming: ``visitor.start``
        when dy/dx^L arrives, then each block as soon as its dy/dA^l exists (top block first).

        Raises:
            ValueError: a block's attention got no gradient.
        """
        output, bottom = self.state.output, self.state.bottom
        assert output is not None and bottom is not None  # check(): every block ran
        output.register_hook(partial(self.on_output_grad, top))
        # The graph holds what the backward needs. The gradient hooks on x^L and A^1 hold this pass:
        # the state keeping them would be a reference cycle, alive after the call until a garbage collection.
        del output
        self.state.output = self.state.bottom = None
        torch.autograd.grad(y, bottom)
        delivered = self.state.delivered
        if delivered != len(self.blocks):
            raise ValueError(f"Only {delivered} of {len(self.blocks)} block attentions got a gradient.")

    def deliver(self, i: int, attn_grad: Tensor | None = None) -> None:
        """Hand block ``i``'s tensors to ``visitor.block`` (without graph) and drop them here.

        Args:
            i: the block index (0 = bottom).
            attn_grad: dy/dA^l (B, H, N, N) in mode "gradients", else None.
        """
        s = self.state
        tensors = BlockTensors(
            i,
            attn=s.attn.pop(i),
            value_norm=s.value_norm.pop(i, None),
            block_input=s.block_input.pop(i, None),
            branch=s.branch.pop(i, None),
            attn_grad=attn_grad,
            branch_grad=s.branch_grad.pop(i, None),
        )
        s.delivered += 1
        with torch.no_grad():
            self.visitor.block(tensors)

    # -- forward hooks: block i's tensors as the forward makes them ------------------------------
    def on_block_input(self, i: int, _module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Block pre-hook: x^{l-1} (B, N, D), when the visitor needs the branch."""
        if self.visitor.needs_branch:
            self.state.block_input[i] = (args[0] if args else kwargs["x"]).detach()

    def on_attn_input(self, i: int, _module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Attention pre-hook: its input (B, N, D), for values it projects functionally (see :meth:`on_attn`)."""
        self.state.attn_input[i] = (args[0] if args else kwargs["x"]).detach()

    def on_values(self, i: int, _module: nn.Module, _args: tuple[Any, ...], out: Tensor) -> None:
        """Value-point hook: ||v^l|| (B, H, N) from the value vectors (B, N, A) in its output."""
        points = self.points[i]
        with torch.no_grad():
            vectors = out.detach() if points.value_vectors is None else points.value_vectors(out)
            self.state.value_norm[i] = value_norms(vectors, points.heads, points.value_heads)

    def on_probabilities(self, i: int, module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        """Probability-point hook: A^l (B, H, N, N), at its index of a tuple output (see :meth:`on_attn`)."""
        self.on_attn(i, module, args, _pick(out, self.points[i].probabilities_index))

    def on_attn(self, i: int, _module: nn.Module, _args: tuple[Any, ...], out: Tensor) -> None:
        """A^l (B, H, N, N); ||v^l|| from the attention's input when no value hook caught the values;
        in mode "gradients", the hook of dy/dA^l."""
        s = self.state
        s.calls += 1
        s.attn[i] = out.detach()
        x = s.attn_input.pop(i, None)  # kept only when the visitor needs ||v||
        points = self.points[i]
        if x is not None and i not in s.value_norm and points.values_from_input is not None:
            with torch.no_grad():
                s.value_norm[i] = value_norms(points.values_from_input(x), points.heads, points.value_heads)
        if self.streaming:
            out.register_hook(partial(self.on_attn_grad, i))
            if s.bottom is None:
                s.bottom = out  # the backward runs down to block 0's A

    def on_first_branch(self, i: int, module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        """Branch-point hook: a^l (B, N, D) from its first call in block ``i`` (a drop-path module may
        run again for the MLP branch), at its index of a tuple output (see :meth:`on_branch`)."""
        if i not in self.branched:
            self.branched.add(i)
            self.on_branch(i, module, args, _pick(out, self.points[i].branch_index))

    def on_branch(self, i: int, _module: nn.Module, _args: tuple[Any, ...], out: Tensor) -> None:
        """a^l (B, N, D) and the hook of its gradient, when the visitor needs the branch; outside mode
        "gradients", block ``i`` is complete: delivered."""
        if self.visitor.needs_branch:
            self.state.branch[i] = out.detach()
            if self.streaming:
                out.register_hook(partial(self.on_branch_grad, i))
        if not self.streaming:
            self.deliver(i)

    def on_output(self, _module: nn.Module, _args: tuple[Any, ...], out: Tensor) -> None:
        """Last block's hook: x^L (B, N, D)."""
        self.state.output = out

    def on_pool_input(self, _module: nn.Module, args: tuple[Any, ...]) -> None:
        """Attention-pool pre-hook: the tokens it reads (B, N or P, D)."""
        self.state.pool_input = args[0].detach()

    def on_input(self, _module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Block 0 pre-hook: x^0 (B, N, D), in the graph."""
        self.state.input_tokens = args[0] if args else kwargs["x"]

    # -- gradient hooks (mode "gradients") -------------------------------------------------------
    def on_output_grad(self, top: Top, grad: Tensor) -> None:
        """dy/dx^L (B, N, D), the first gradient of the backward: into ``top``, then ``visitor.start``."""
        top.output_grad = grad.detach()
        with torch.no_grad():
            self.visitor.start(top)

    def on_attn_grad(self, i: int, grad: Tensor) -> None:
        """dy/dA^l (B, H, N, N): block ``i`` is complete: delivered."""
        self.deliver(i, grad.detach())

    def on_branch_grad(self, i: int, grad: Tensor) -> None:
        """dy/du^l (B, N, D); it arrives before block ``i``'s dy/dA^l."""
        self.state.branch_grad[i] = grad.detach()
