"""The adapter base: capture leaves the model as it found it, and works in every grad context and model family."""

from __future__ import annotations

import pytest
import timm
import torch

from gradskip_lightning.core.explanation import UnsupportedModel
from gradskip_lightning.families.timm_vit import adapter_for
from tests.conftest import make_tiny_vit
from tests.core.helpers import capture, hooks_on


def test_capture_shapes_and_gradient_identity(tiny_vit):
    x = torch.randn(3, 3, 32, 32)
    cap = capture(tiny_vit, x)
    n = 1 + 16
    assert cap.num_blocks == 2 and cap.grid_size == (4, 4)
    assert cap.attn[0].shape == cap.attn_grad[0].shape == (3, 3, n, n)
    assert cap.value_norm[0].shape == (3, 3, n)
    assert cap.block_input[1].shape == cap.branch[1].shape == cap.branch_grad[1].shape == (3, n, 48)
    torch.testing.assert_close(cap.attn[0].sum(-1), torch.ones(3, 3, n))
    # u^l = x^{l-1} + a^l is the next block's input after the MLP: check on the captured tensors.
    blk = tiny_vit.blocks[0]
    u = cap.block_input[0] + cap.branch[0]
    torch.testing.assert_close(u + blk.mlp(blk.norm2(u)), cap.block_input[1])
    # The logits are those of a plain forward with the model's own (fused) attention.
    torch.testing.assert_close(cap.logits, tiny_vit(x), atol=1e-5, rtol=1e-5)
    assert torch.equal(cap.targets, cap.logits.argmax(1))


def test_model_state_is_restored_and_untouched():
    model = make_tiny_vit(drop_path_rate=0.1)
    model.train()
    model.blocks[1].eval()  # a mixed-mode model stays mixed
    model.set_grad_checkpointing(True)
    fused = [b.attn.fused_attn for b in model.blocks]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    capture(model, torch.randn(2, 3, 32, 32), torch.tensor([0, 1]))
    assert model.training and not model.blocks[1].training and model.blocks[0].training
    assert model.grad_checkpointing is True
    assert [b.attn.fused_attn for b in model.blocks] == fused == [True, True]
    assert hooks_on(model) == 0
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode, torch.enable_grad])
def test_capture_works_in_every_grad_context(tiny_vit, context):
    x = torch.randn(2, 3, 32, 32)
    reference = capture(tiny_vit, x)
    with context():
        if context is torch.inference_mode:
            x = x.clone()  # an inference tensor, as in Lightning's validate()
        cap = capture(tiny_vit, x)
    torch.testing.assert_close(cap.attn_grad[0], reference.attn_grad[0])


def test_hooks_are_removed_when_the_forward_fails(tiny_vit):
    with pytest.raises(AssertionError):
        capture(tiny_vit, torch.randn(2, 3, 40, 40))  # a size the patch embedding rejects
    assert hooks_on(tiny_vit) == 0
    assert [b.attn.fused_attn for b in tiny_vit.blocks] == [True, True]


def test_model_families_prefix_tokens_and_readout():
    deit = timm.create_model(
        "deit_tiny_distilled_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2, num_classes=3
    ).eval()
    registers = timm.create_model(
        "vit_base_patch16_reg4_gap_256",
        pretrained=False,
        img_size=32,
        patch_size=8,
        depth=2,
        embed_dim=48,
        num_heads=3,
        num_classes=3,
    ).eval()
    x = torch.randn(2, 3, 32, 32)
    cap = capture(deit, x)
    assert cap.num_prefix_tokens == 2 and cap.attn[0].shape[-1] == 18
    torch.testing.assert_close(cap.readout[0, :3], torch.tensor([0.5, 0.5, 0.0]))
    cap = capture(registers, x)
    assert cap.num_prefix_tokens == 4 and registers.global_pool == "avg"  # 4 registers, no CLS
    torch.testing.assert_close(cap.readout[0], torch.cat([torch.zeros(4), torch.full((16,), 1 / 16)]))


def test_adapter_for_accepts_wrappers_and_rejects_others(tiny_vit):
    wrapper = torch.nn.Sequential(torch.nn.Identity(), tiny_vit)
    assert adapter_for(wrapper).backbone is tiny_vit
    cnn = timm.create_model("resnet18", pretrained=False, num_classes=3)
    refusal = (
        "ResNet as a timm_vit model: it holds 0 timm Vision Transformers.*beit, eva, naflexvit, vision_transformer"
    )
    with pytest.raises(UnsupportedModel, match=refusal):
        adapter_for(cnn)
    two = torch.nn.ModuleList([make_tiny_vit(), make_tiny_vit()])
    with pytest.raises(TypeError, match=r"holds 2 timm Vision Transformers .* network\(s\) at '0', '1'"):
        adapter_for(two)
    swin = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, num_classes=3)
    with pytest.raises(TypeError, match="SwinTransformer"):
        adapter_for(swin)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (dict(global_pool="max"), "different token per channel"),
        (dict(global_pool=""), "pooling is outside the backbone"),
        (dict(block_fn=timm.models.vision_transformer.ParallelScalingBlock), "ParallelScalingBlock"),
    ],
)
def test_unsupported_configurations_name_the_class_and_the_reason(overrides, reason):
    model = make_tiny_vit(**overrides)
    with pytest.raises(UnsupportedModel, match=f"VisionTransformer.*{reason}.*Supported"):
        adapter_for(model)


@pytest.mark.parametrize("include_prefix", [False, True])
def test_map_pooling_starts_from_what_the_pool_attends_to(include_prefix):
    model = make_tiny_vit(class_token=False, reg_tokens=4, global_pool="map", pool_include_prefix=include_prefix)
    pool = model.attn_pool
    with torch.no_grad():  # zero queries: the latent query attends uniformly to the tokens it is fed
        pool.latent.zero_()
        pool.q.bias.zero_()
    cap = capture(model, torch.randn(2, 3, 32, 32))
    read = 20 if include_prefix else 16
    expected = torch.cat([torch.full((4,), 1 / read if include_prefix else 0.0), torch.full((16,), 1 / read)])
    torch.testing.assert_close(cap.readout, expected.expand(2, -1))


def test_a_forward_that_runs_the_backbone_twice_is_refused(tiny_vit):
    class TwoViews(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.vit = tiny_vit

        def forward(self, images):
            return self.vit(images) + self.vit(images.flip(-1))  # test-time augmentation

    with pytest.raises(ValueError, match="must run its VisionTransformer once.*4 block attentions ran"):
        capture(TwoViews(), torch.randn(1, 3, 32, 32))
    assert hooks_on(tiny_vit) == 0
