"""Streaming: the order blocks reach a visitor, what the engine keeps, and replay of a full capture."""

from __future__ import annotations

import weakref

import pytest
import torch

from gradskip_lightning.core.tensors import BlockTensors, CaptureMode, Top
from gradskip_lightning.families.timm_vit import TimmViTExplainer, adapter_for
from gradskip_lightning.methods import PASS_METHODS
from tests.conftest import make_tiny_vit
from tests.core.helpers import capture


class OrderVisitor:
    """Logs the calls, and whether earlier blocks' attention is still alive when a block arrives."""

    needs_value_norm = True
    needs_branch = True

    def __init__(self, mode: CaptureMode) -> None:
        self.mode = mode
        self.calls: list[object] = []
        self.earlier: list[weakref.ref] = []
        self.alive_at_block: list[int] = []

    def start(self, top: Top) -> None:
        self.calls.append("start")
        self.grad_enabled_at_start = torch.is_grad_enabled()

    def block(self, tensors: BlockTensors) -> None:
        self.calls.append(tensors.layer)
        self.alive_at_block.append(sum(ref() is not None for ref in self.earlier))
        self.earlier.append(weakref.ref(tensors.attn))
        assert (tensors.attn_grad is not None) == (self.mode == "gradients")
        assert tensors.block_input is not None and tensors.branch is not None and tensors.value_norm is not None


@pytest.mark.parametrize(
    ("mode", "order"),
    [("gradients", ["start", 2, 1, 0]), ("forward", [0, 1, 2, "start"]), ("conservative", [0, 1, 2, "start"])],
)
def test_blocks_arrive_in_the_order_of_the_mode_and_are_dropped_after_their_step(mode, order):
    model = make_tiny_vit(depth=3)
    visitor = OrderVisitor(mode)
    top = adapter_for(model).run(model, torch.randn(2, 3, 32, 32), None, visitor)
    assert visitor.calls == order
    # The engine keeps no block once the visitor had it (the visitor kept only weak references).
    assert visitor.alive_at_block == [0, 0, 0]
    assert (top.output_grad is not None) == (mode == "gradients")
    assert (top.input_grad is not None) == (mode == "conservative")
    assert not visitor.grad_enabled_at_start


@pytest.mark.parametrize("method", PASS_METHODS.names)
def test_streamed_maps_equal_the_replay_of_a_full_capture(method):
    model = make_tiny_vit()
    x, targets = torch.randn(3, 3, 32, 32), torch.tensor([0, 1, 2])
    spec = PASS_METHODS[method]
    visitor = spec.step(spec.make_options(method))
    capture(
        model, x, targets, with_gradients=spec.step.mode != "forward", conservative=spec.step.mode == "conservative"
    ).replay(visitor)
    streamed = TimmViTExplainer(model, method).explain(x, targets).token_maps
    torch.testing.assert_close(streamed, visitor.result().patch_relevance.reshape(3, 4, 4), rtol=1e-5, atol=1e-7)


def test_replay_refuses_a_capture_of_a_poorer_mode():
    model = make_tiny_vit()
    forward_only = capture(model, torch.randn(1, 3, 32, 32), with_gradients=False)
    assert forward_only.attn_grad is None and forward_only.output_grad is None
    with pytest.raises(ValueError, match="'gradients' method needs a capture taken in that mode"):
        forward_only.replay(PASS_METHODS["chefer"].step(PASS_METHODS["chefer"].make_options("chefer")))
