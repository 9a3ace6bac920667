"""timm Swin through its windows: the window layout undoes the shifts, each windowed step equals the
dense ViT step on the block-diagonal attention, and the method doc's properties hold."""

from __future__ import annotations

import pytest
import timm
import torch
from lightning.pytorch import LightningModule
from torch import nn

from gradskip_lightning.core.explanation import UnsupportedModel
from gradskip_lightning.core.tensors import BlockTensors
from gradskip_lightning.families import explainer_for
from gradskip_lightning.families.swin import FAMILY, SWIN_METHODS, BlockWindows, SwinAdapter, SwinExplainer
from gradskip_lightning.families.swin.propagation import SwinGradSkipVisitor
from gradskip_lightning.methods import GradSkipOptions, block_step, chefer_step, propagate_block, rollout_matrix
from gradskip_lightning.metrics import parameter_randomisation
from tests.core.helpers import hooks_on

TARGETS = torch.tensor([0, 1, 2])


def tiny(seed: int = 0, **overrides) -> nn.Module:
    """Two stages of two blocks (the second shifted), grids 16 x 16 and 8 x 8 with 4 x 4 windows, width 32."""
    torch.manual_seed(seed)
    kwargs = dict(img_size=32, patch_size=2, window_size=4, embed_dim=32, depths=(2, 2), num_heads=(2, 4))
    return timm.create_model("swin_tiny_patch4_window7_224", num_classes=3, **{**kwargs, **overrides}).eval()


def images(batch: int = 3, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(batch, 3, 32, 32, dtype=dtype)


def dense(per_window: torch.Tensor, windows: BlockWindows) -> torch.Tensor:
    """(B * nW, H, w, w) window attention -> (B, H, N, N) on the grid, zero between windows."""
    b = per_window.shape[0] // windows.windows
    slots = windows.order.reshape(windows.windows, -1)
    out = per_window.new_zeros(b, per_window.shape[1], windows.order.numel(), windows.order.numel())
    for k, tokens in enumerate(slots):
        out[:, :, tokens[:, None], tokens[None, :]] = per_window[k :: windows.windows]
    return out


def on_grid(per_window: torch.Tensor, windows: BlockWindows) -> torch.Tensor:
    """(B * nW, H, w) per window slot -> (B, H, N) per grid token."""
    b, h = per_window.shape[0] // windows.windows, per_window.shape[1]
    return per_window.reshape(b, windows.windows, h, -1).transpose(1, 2).flatten(2)[..., windows.inverse]


def test_window_attention_mapped_to_the_grid_mixes_the_values_the_block_mixes():
    model = tiny()
    adapter = SwinAdapter(model)
    block = model.layers[0].blocks[1]  # shifted
    assert block.shift_size == (2, 2)
    seen = {}
    hooks = [
        block.norm1.register_forward_hook(lambda _m, _a, out: seen.setdefault("x", out)),
        block.attn.proj.register_forward_pre_hook(lambda _m, args: seen.setdefault("mixed", args[0])),
    ]
    try:
        cap = adapter.capture(model, images(), TARGETS)
    finally:
        for hook in hooks:
            hook.remove()
    windows = adapter.layout(torch.device("cpu")).blocks[1]
    x = seen["x"].flatten(1, 2)  # (B, N, D) in grid order
    v = nn.functional.linear(x, block.attn.qkv.weight[64:], block.attn.qkv.bias[64:]).reshape(3, 256, 2, 16)
    mixed = dense(cap.attn[1], windows) @ v.transpose(1, 2)  # (B, H, N, d)
    expected = seen["mixed"].reshape(3, 256, 2, 16)[:, windows.inverse].transpose(1, 2)
    torch.testing.assert_close(mixed, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(on_grid(cap.value_norm[1], windows), v.norm(dim=-1).transpose(1, 2))


@pytest.mark.parametrize("method", SWIN_METHODS)
def test_every_method_explains_and_leaves_the_model_as_it_was(method):
    model = tiny().train()
    model.set_grad_checkpointing(True)
    fused = [block.attn.fused_attn for block in SwinAdapter(model).blocks]
    with torch.no_grad():
        reference = model.eval()(images())
    model.train()
    explainer = explainer_for(model, method)
    assert explainer.family == "timm_swin" and explainer.patch_size == (2, 2)
    explanation = explainer.explain(images(), TARGETS)
    assert explanation.valid.all() and explanation.token_maps.shape == (3, 16, 16) and explanation.maps.std() > 0
    torch.testing.assert_close(explanation.logits, reference, rtol=1e-5, atol=1e-5)
    assert all(m.training for m in model.modules()) and all(stage.grad_checkpointing for stage in model.layers)
    assert [block.attn.fused_attn for block in SwinAdapter(model).blocks] == fused
    assert hooks_on(model) == 0 and all(p.grad is None for p in model.parameters())


def test_batch_equals_singles_and_every_step_conserves_relevance():
    model = tiny().double()
    explainer = SwinExplainer(model)
    x = images(3, torch.float64)
    batch = explainer.explain(x, TARGETS)
    singles = torch.cat([explainer.explain(x[i : i + 1], TARGETS[i : i + 1]).maps for i in range(3)])
    assert (batch.maps - singles).abs().max() / batch.maps.abs().max() < 1e-10
    torch.testing.assert_close(batch.token_maps.flatten(1).sum(-1), torch.ones(3))  # maps are float32
    assert batch.head_weights.shape == (3, 4, 4) and torch.isnan(batch.head_weights[:, :2, 2:]).all()
    assert batch.gates.shape == (3, 4, 256) and torch.isnan(batch.gates[:, 2:, 64:]).all()
    adapter = explainer.adapter
    visitor = SwinGradSkipVisitor(GradSkipOptions(gate="token"), adapter.layout(x.device))
    adapter.capture(model, x, TARGETS).replay(visitor)
    for step in visitor.steps:
        torch.testing.assert_close(step.relevance_below.sum(-1), step.relevance_above.sum(-1), rtol=1e-10, atol=0)
    for method in ("rollout", "raw_attention"):
        total = SwinExplainer(model, method).explain(x, TARGETS).token_maps.flatten(1).sum(-1)
        torch.testing.assert_close(total, torch.ones(3))


def test_each_windowed_step_is_the_dense_step_on_the_block_diagonal_attention():
    model = tiny().double()
    adapter = SwinAdapter(model)
    layout = adapter.layout(torch.device("cpu"))
    cap = adapter.capture(model, images(3, torch.float64), TARGETS)
    options = GradSkipOptions(alpha=1.0)  # Gini is over window keys, not over the dense rows' structural zeros
    visitor = SwinGradSkipVisitor(options, layout)
    cap.replay(visitor)
    for step, tensors in zip(visitor.steps, reversed(cap.blocks)):
        windows = layout.blocks[tensors.layer]
        flat = lambda t: t.flatten(1, 2)  # noqa: E731 - (B, h, w, D) -> (B, N, D)
        grid = BlockTensors(
            tensors.layer,
            dense(tensors.attn, windows),
            on_grid(tensors.value_norm, windows),
            flat(tensors.block_input),
            flat(tensors.branch),
            dense(tensors.attn_grad, windows),
            flat(tensors.branch_grad),
        )
        reference = block_step(step.relevance_above, grid, options)
        torch.testing.assert_close(step.relevance_below, reference.relevance_below)
        torch.testing.assert_close(step.omega, reference.omega)
        r = step.relevance_above
        windowed = windows.merge(chefer_step(windows.split(r), tensors.attn, tensors.attn_grad))
        torch.testing.assert_close(windowed, chefer_step(r, grid.attn, grid.attn_grad))
        windowed = windows.merge(propagate_block(windows.split(r), rollout_matrix(tensors.attn)))
        torch.testing.assert_close(windowed, propagate_block(r, rollout_matrix(grid.attn)))


def test_a_block_without_attention_output_passes_relevance_through():
    model = tiny()
    with torch.no_grad():
        model.layers[1].blocks[1].attn.proj.weight.zero_()
        model.layers[1].blocks[1].attn.proj.bias.zero_()
    adapter = SwinAdapter(model)
    visitor = SwinGradSkipVisitor(GradSkipOptions(gate="token"), adapter.layout(torch.device("cpu")))
    adapter.capture(model, images(), TARGETS).replay(visitor)
    top, below = visitor.steps[:2]
    assert top.layer == 3 and (top.gates == 0).all()
    torch.testing.assert_close(top.relevance_below, top.relevance_above)
    assert not torch.allclose(below.relevance_below, below.relevance_above)


class Classifier(LightningModule):
    def __init__(self, backbone: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(images))


def test_external_head_gives_the_maps_of_the_headed_model():
    headed = tiny()
    backbone = tiny()
    backbone.reset_classifier(0)
    module = Classifier(backbone, headed.head.fc).eval()
    explainer = SwinExplainer(module)
    assert explainer.num_classes == 3
    torch.testing.assert_close(explainer.explain(images()).maps, SwinExplainer(headed).explain(images()).maps)
    with pytest.raises(TypeError, match="no classifier head"):
        SwinExplainer(backbone)


def test_randomised_weights_decorrelate_the_maps():
    explain = lambda m, x, t: SwinExplainer(m).explain(x, t).maps  # noqa: E731
    cascade = lambda m: SwinAdapter(FAMILY.find(m))  # noqa: E731
    curve = parameter_randomisation(tiny(), images(), TARGETS, explain, cascade_for=cascade)
    assert curve.layers == ("head", "layers.1.blocks.1", "layers.1.blocks.0", "layers.0.blocks.1", "layers.0.blocks.0")
    assert curve.mean[-1] < 0.5, curve.mean


def test_unsupported_configurations_are_refused_with_their_reason():
    with pytest.raises(UnsupportedModel, match="global_pool='' returns the token grid"):
        SwinAdapter(tiny(global_pool=""))
    with pytest.raises(UnsupportedModel, match=r"stage 0's grid \(12, 12\) is not a multiple of its window \(8, 8\)"):
        SwinAdapter(tiny(img_size=24, window_size=8))


def test_gradskip_options_the_windows_do_not_carry_are_refused_not_ignored():
    model = tiny()
    with pytest.raises(ValueError, match="does not implement normalisation='layer', readout='grad_x_act'"):
        SwinExplainer(model, "gradskip", normalisation="layer", readout="grad_x_act")
    with pytest.raises(ValueError, match="token_weighting='grad_x_act'"):
        SwinExplainer(model, "gradskip", token_weighting="grad_x_act")
    # the options it does carry change the maps
    base = SwinExplainer(model).explain(images(), TARGETS).maps
    weighted = SwinExplainer(model, "gradskip", attention_weighting="pos_grad").explain(images(), TARGETS).maps
    assert (weighted - base).abs().max() > 1e-4
