"""Adapters for backbones whose blocks are not timm's: the tensors are read at hook points the
adapter names per block (:class:`BlockPoints`), and the pass is a :class:`HookedPass`, the
:class:`~gradskip_lightning.adapters.streaming.StreamedPass` with its hooks placed there.

A :class:`HookedAdapter` says where each block's attention probabilities, attention branch and
value vectors appear, how to make the probabilities exist on the path to the output for one call
(:meth:`HookedAdapter.explain_mode`: torchvision's explicit attention, HF's eager attention) and
how to hold them constant in the backward (:meth:`HookedAdapter.constant_attention`, for CP-LRP).
Everything else (streaming, the order of the blocks, the gradient hooks, the checks) is the
timm pass's.

Shapes: B images, H heads, N tokens (prefix tokens first), D channels, A = H * head width.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from gradskip_lightning.adapters.base import Adapter, eval_mode, parameter_holders_outside
from gradskip_lightning.adapters.conservative import constant_hooks
from gradskip_lightning.adapters.streaming import PassState, StreamedPass
from gradskip_lightning.adapters.tensors import BlockVisitor, Top
from gradskip_lightning.adapters.values import value_norms

__all__ = ["BlockPoints", "HookedAdapter", "HookedPass"]


@dataclass(frozen=True)
class BlockPoints:
    """Where one block's tensors appear in its forward.

    Attributes:
        probabilities: the module whose output is A^l (B, H, N, N), or holds it at
            ``probabilities_index`` of a tuple; A^l must be on the path to the block's output.
        branch: the module whose output in its first call of the block is a^l (B, N, D), the
            attention branch as added to the residual stream (or its ``branch_index`` of a tuple).
        values: the module whose output is the value vectors (B, N, A).
        heads: H, the attention's heads.
    """

    probabilities: nn.Module
    branch: nn.Module
    values: nn.Module
    heads: int
    probabilities_index: int | None = None
    branch_index: int | None = None


def _pick(out: Any, index: int | None) -> Tensor:
    return out if index is None else out[index]


class HookedAdapter(Adapter):
    """An adapter whose tensors are read at the :class:`BlockPoints` it names.

    Subclasses set :attr:`family` and :attr:`backbone_types` and define :meth:`check`,
    :attr:`blocks`, :meth:`block_points`, :attr:`head`, :meth:`norm_scope`, :meth:`readout` and the
    geometry properties; :meth:`explain_mode` and :meth:`constant_attention` where the attention
    needs a per-call switch.
    """

    def block_points(self, block: nn.Module) -> BlockPoints:
        """Where ``block``'s tensors appear."""
        raise NotImplementedError

    @property
    def head(self) -> nn.Module | None:
        """The backbone's own classifier head, None when it has none."""
        raise NotImplementedError

    @contextmanager
    def explain_mode(self, model: nn.Module | None = None) -> Iterator[None]:
        """Eval mode of ``model`` (default the backbone) and the backbone, restored on exit."""
        with eval_mode(self.backbone if model is None else model, self.backbone):
            yield

    @contextmanager
    def constant_attention(self) -> Iterator[None]:
        """Inside :meth:`explain_mode`: the attention probabilities held constant in the backward
        (their forward value unchanged), for one conservative pass."""
        raise NotImplementedError

    def cascade(self, model: nn.Module) -> list[tuple[str, list[nn.Module]]]:
        """As :meth:`Adapter.cascade`, with the head :attr:`head`."""
        outside = parameter_holders_outside(model, self.backbone)
        head = [] if self.head is None else [self.head]
        blocks = [(f"blocks.{i}", [block]) for i, block in reversed(list(enumerate(self.blocks)))]
        return [("head", head + outside), *blocks]

    def run(self, model: nn.Module, images: Tensor, targets: Tensor | None, visitor: BlockVisitor) -> Top:
        """As :meth:`Adapter.run`, through a :class:`HookedPass`."""
        return HookedPass(self, model, visitor).run(images, targets)


class HookedPass(StreamedPass):
    """:class:`StreamedPass` with its hooks at the adapter's :class:`BlockPoints`; a conservative
    pass also runs inside :meth:`HookedAdapter.constant_attention`.

    Args:
        adapter: the adapter of the backbone inside ``model``.
        model: the module whose forward maps images to logits (B, C).
        visitor: the consumer; its ``mode`` picks the pass.
    """

    adapter: HookedAdapter

    def __init__(self, adapter: HookedAdapter, model: nn.Module, visitor: BlockVisitor) -> None:
        self.adapter = adapter
        self.model = model
        self.visitor = visitor
        self.mode = visitor.mode
        self.streaming = self.mode == "gradients"
        self.blocks = adapter.blocks
        self.points = [adapter.block_points(block) for block in self.blocks]
        self.attentions = []  # value vectors come from their own hook point, never from an attention's input
        self.state = PassState()
        self.branched: set[int] = set()  # blocks whose branch module has run once in this pass

    def forward(self, images: Tensor) -> Tensor:
        if self.mode != "conservative":
            return super().forward(images)
        with self.adapter.constant_attention():
            return super().forward(images)

    def install(self, handles: list[RemovableHandle]) -> None:
        for i, (block, points) in enumerate(zip(self.blocks, self.points)):
            handles.append(block.register_forward_pre_hook(partial(self.on_block_input, i), with_kwargs=True))
            handles.append(points.probabilities.register_forward_hook(partial(self.on_probabilities, i)))
            handles.append(points.branch.register_forward_hook(partial(self.on_first_branch, i)))
            if self.visitor.needs_value_norm:
                handles.append(points.values.register_forward_hook(partial(self.on_value_vectors, i)))
        handles.append(self.blocks[-1].register_forward_hook(self.on_output))
        handles.append(self.blocks[0].register_forward_pre_hook(self.on_input, with_kwargs=True))
        if self.mode == "conservative":  # the attention is held by constant_attention; the norms here
            handles += constant_hooks([], self.adapter.norm_scope())

    def on_probabilities(self, i: int, module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        """A^l (B, H, N, N) from the probability point (see :meth:`StreamedPass.on_attn`)."""
        self.on_attn(i, module, args, _pick(out, self.points[i].probabilities_index))

    def on_first_branch(self, i: int, module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        """a^l (B, N, D) from the branch point's first call in block ``i`` (a drop-path module may
        run again for the MLP branch; see :meth:`StreamedPass.on_branch`)."""
        if i not in self.branched:
            self.branched.add(i)
            self.on_branch(i, module, args, _pick(out, self.points[i].branch_index))

    def on_value_vectors(self, i: int, _module: nn.Module, _args: tuple[Any, ...], out: Tensor) -> None:
        """||v^l|| (B, H, N) from the value vectors (B, N, A)."""
        heads: Any = SimpleNamespace(num_heads=self.points[i].heads)  # what value_norms reads
        with torch.no_grad():
            self.state.value_norm[i] = value_norms(heads, out.detach())
