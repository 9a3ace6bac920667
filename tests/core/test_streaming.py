"""The streamed pass: one fresh state per call, no hook left after a failure, nothing kept alive after it."""

from __future__ import annotations

import gc
import weakref
from dataclasses import fields

import pytest
import torch

from gradskip_lightning.core.streaming import StreamedPass
from gradskip_lightning.core.tensors import BlockTensors, Capture, Recorder, Top
from gradskip_lightning.families.timm_vit import adapter_for
from tests.conftest import make_tiny_vit
from tests.core.helpers import capture, hooks_on

MODES = ["forward", "gradients", "conservative"]


def assert_equal(a: Capture, b: Capture) -> None:
    """Every block tensor and every field of the top bit-identical."""
    assert a.num_blocks == b.num_blocks
    pairs: list[tuple[BlockTensors | Top, BlockTensors | Top]] = [*zip(a.blocks, b.blocks), (a.top, b.top)]
    for x, y in pairs:
        for f in fields(x):
            u, v = getattr(x, f.name), getattr(y, f.name)
            assert torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v, f.name


class FailingRecorder(Recorder):
    """A visitor whose first block step raises (inside the forward in modes "forward" and "conservative")."""

    def block(self, tensors: BlockTensors) -> None:
        raise RuntimeError("visitor failed")


@pytest.mark.parametrize("mode", MODES)
def test_a_failing_visitor_leaves_no_hook_and_the_next_call_starts_afresh(tiny_vit, mode):
    x = torch.randn(2, 3, 32, 32)
    adapter = adapter_for(tiny_vit)
    with pytest.raises(RuntimeError, match="visitor failed"):
        adapter.run(tiny_vit, x, None, FailingRecorder(mode))
    assert hooks_on(tiny_vit) == 0
    assert [b.attn.fused_attn for b in tiny_vit.blocks] == [True, True]
    assert all(p.grad is None for p in tiny_vit.parameters())
    recorder, reference, fresh = Recorder(mode), Recorder(mode), make_tiny_vit()
    adapter.run(tiny_vit, x, None, recorder)  # nothing of the failed call reaches this one
    adapter_for(fresh).run(fresh, x, None, reference)
    assert_equal(recorder.capture(), reference.capture())


def test_a_failure_while_installing_the_hooks_leaves_none(tiny_vit):
    del tiny_vit.blocks[1].attn.qkv  # block 1's value projection is looked up after 4 of its hooks exist
    with pytest.raises(AttributeError, match="qkv"):
        capture(tiny_vit, torch.randn(1, 3, 32, 32))
    assert hooks_on(tiny_vit) == 0


@pytest.mark.parametrize("mode", MODES)
def test_a_pass_is_freed_as_soon_as_its_call_returns(tiny_vit, mode):
    streamed = StreamedPass(adapter_for(tiny_vit), tiny_vit, Recorder(mode))
    streamed.run(torch.randn(2, 3, 32, 32), None)
    gone = weakref.ref(streamed)
    gc.disable()
    try:
        del streamed
        assert gone() is None  # no reference cycle (through the gradient hooks) keeps its tensors alive
    finally:
        gc.enable()
