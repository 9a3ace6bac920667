import pytest
import torch
from torch import nn

from gradskip_lightning.families.segformer import capture_segmentation

TARGETS = torch.tensor([0, 1, 2])


def test_shapes_follow_the_reduced_keys(segformer, images):
    cap = capture_segmentation(segformer, images, TARGETS)
    assert [s.grid for s in cap.stages] == [(16, 16), (8, 8), (4, 4), (2, 2)]
    assert [s.reduction for s in cap.stages] == [4, 2, 1, 1]
    assert [s.stride for s in cap.stages] == [4, 2, 2, 2]
    assert [b.layer for s in cap.stages for b in s.blocks] == [0, 1, 2, 3, 4]
    for stage in cap.stages:
        n = stage.grid[0] * stage.grid[1]
        m = n // stage.reduction**2
        heads = stage.blocks[0].attn.shape[1]
        for b in stage.blocks:
            assert b.attn.shape == b.attn_grad.shape == (3, heads, n, m)
            assert b.value_norm.shape == (3, heads, m)
            torch.testing.assert_close(b.attn.sum(dim=-1), torch.ones(3, heads, n))
            assert b.block_input.shape == b.branch.shape == b.branch_grad.shape == (3, n, stage.output.shape[-1])
        assert stage.output_grad.shape == stage.output.shape
        assert stage.output_grad.abs().sum() > 0  # every stage feeds the decoder
    assert cap.logits.shape == (3, 3, 16, 16)


def test_default_region_is_the_predicted_positions(segformer, images):
    cap = capture_segmentation(segformer, images, TARGETS)
    predicted = cap.logits.argmax(dim=1) == TARGETS[:, None, None]
    for b in range(3):
        expected = predicted[b] if predicted[b].any() else torch.ones_like(predicted[b])
        assert torch.equal(cap.region[b], expected)
        assert cap.region_found[b] == predicted[b].any()


def test_stage_gradient_is_that_of_the_region_sum(segformer, images):
    region = torch.zeros(3, 16, 16, dtype=torch.bool)
    region[:, :4, :4] = True
    cap = capture_segmentation(segformer, images, TARGETS, region)
    top = segformer.segformer.stages[-1].layer_norm
    kept = {}
    handle = top.register_forward_hook(lambda _m, _i, out: kept.__setitem__("z", out))
    try:
        logits = segformer(pixel_values=images).logits
    finally:
        handle.remove()
    y = sum(logits[b, TARGETS[b]][region[b]].sum() for b in range(3))
    (expected,) = torch.autograd.grad(y, kept["z"])
    torch.testing.assert_close(cap.stages[-1].output_grad, expected)


def test_modes_attention_and_grads_restored(segformer, images):
    segformer.train()
    before = segformer.config._attn_implementation
    with torch.inference_mode():
        cap = capture_segmentation(segformer, images, TARGETS)
    assert cap.stages[0].blocks[0].attn_grad.abs().sum() > 0
    assert all(m.training for m in segformer.modules())
    assert segformer.config._attn_implementation == before != "eager"
    assert all(p.grad is None for p in segformer.parameters())


def test_bad_input_is_refused(segformer, images):
    with pytest.raises(ValueError, match="region must be"):
        capture_segmentation(segformer, images, TARGETS, torch.ones(3, 64, 64, dtype=torch.bool))
    with pytest.raises(ValueError, match="targets must be"):
        capture_segmentation(segformer, images, TARGETS.float())
    with pytest.raises(TypeError, match="SegformerForSemanticSegmentation"):
        capture_segmentation(nn.Conv2d(3, 3, 1), images, TARGETS)
