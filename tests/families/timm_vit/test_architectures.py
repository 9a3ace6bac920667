"""The method doc's properties on a tiny instance of every supported family (2 blocks, 32-64 px).

A batch of B equals B single calls, relevance is conserved at every block, the model is left as it
was (modes, fused-attention flags, no parameter .grad), and a LightningModule holding a headless
backbone and its own head gets the maps of the same weights inside a headed model.
"""

from __future__ import annotations

import warnings

import pytest
import timm
import torch
from torch import nn

from gradskip_lightning.core.streaming import value_norms
from gradskip_lightning.families.timm_common import values_from_input
from gradskip_lightning.families.timm_vit import TimmViTExplainer, adapter_for
from gradskip_lightning.methods import GradSkipOptions, propagation
from tests.core.helpers import capture, hooks_on, split_head

TINY = dict(depth=2, embed_dim=48, num_heads=3, img_size=32, patch_size=8, num_classes=4)
#: family label -> (timm name, overrides of TINY, adapter family)
FAMILIES = {
    "vit_cls": ("vit_tiny_patch16_224", {}, "vision_transformer"),
    "vit_registers_avg": ("vit_base_patch16_reg4_gap_256", {}, "vision_transformer"),
    "vit_map_siglip": ("vit_base_patch16_siglip_224", {}, "vision_transformer"),
    "vit_map_registers": ("vit_base_patch16_reg4_gap_256", dict(global_pool="map"), "vision_transformer"),
    "vit_respost": ("vit_base_patch16_rpn_224", {}, "vision_transformer"),
    "deit_distilled": ("deit_tiny_distilled_patch16_224", {}, "vision_transformer"),
    "hybrid_resnet_stem": ("vit_tiny_r_s16_p8_224", dict(patch_size=2), "vision_transformer"),
    # vitamin's convolutional stem fixes the width (384) and the stride (16 px)
    "vitamin": (
        "vitamin_small_224",
        dict(embed_dim=None, num_heads=None, patch_size=None, img_size=64),
        "vision_transformer",
    ),
    "eva02_rope_swiglu": ("eva02_tiny_patch14_224", {}, "eva"),
    "eva_map_pe_core": ("vit_pe_core_tiny_patch16_384", {}, "eva"),
    "beit_relpos_bias": ("beit_base_patch16_224", {}, "beit"),
    "relpos": ("vit_relpos_small_patch16_224", {}, "vision_transformer_relpos"),
    "relpos_respost": ("vit_relpos_base_patch16_rpn_224", {}, "vision_transformer_relpos"),
    "naflexvit": ("naflexvit_base_patch16_gap", dict(img_size=None, pos_embed_grid_size=(4, 4)), "naflexvit"),
    "naflexvit_map": ("naflexvit_base_patch16_siglip", dict(img_size=None, pos_embed_grid_size=(4, 4)), "naflexvit"),
}


def tiny(label: str, **extra) -> nn.Module:
    """A randomly initialised 2-block instance of family ``label``, in eval mode."""
    name, overrides, _ = FAMILIES[label]
    kwargs = {k: v for k, v in {**TINY, **overrides, **extra}.items() if v is not None}
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return timm.create_model(name, pretrained=False, **kwargs).eval()


def images_for(explainer: TimmViTExplainer, batch: int) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(batch, explainer.in_chans, *explainer.img_size)


@pytest.mark.parametrize("label", FAMILIES)
def test_batch_equals_singles_and_relevance_is_conserved(label):
    model = tiny(label)
    explainer = TimmViTExplainer(model)
    assert explainer.adapter.architecture == FAMILIES[label][2]
    x = images_for(explainer, 4)
    targets = torch.tensor([0, 1, 2, 3])
    batch = explainer.explain(x, targets)
    singles = torch.cat([explainer.explain(x[i : i + 1], targets[i : i + 1]).maps for i in range(4)])
    assert batch.valid.all() and batch.maps.std() > 0
    assert ((batch.maps - singles).abs().max() / batch.maps.abs().max()) < 1e-5
    cap = capture(model, x, targets)
    assert cap.readout.sum(-1).allclose(torch.ones(4))
    steps = list(propagation(cap, GradSkipOptions(gate="token")))
    assert len(steps) == 2
    for step in steps:
        torch.testing.assert_close(step.relevance_below.sum(-1), step.relevance_above.sum(-1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("label", FAMILIES)
def test_model_is_left_as_it_was(label):
    model = tiny(label)
    model.train()
    attns = [b.attn for b in adapter_for(model).blocks]
    for attn in attns:
        attn.fused_attn = True
    explainer = TimmViTExplainer(model)
    x = images_for(explainer, 2)
    with torch.no_grad():
        explainer.explain(x)
    assert all(m.training for m in model.modules())
    assert all(attn.fused_attn for attn in attns)
    assert all(p.grad is None for p in model.parameters()) and hooks_on(model) == 0


# A distilled DeiT has two heads (CLS and distillation): no single head to move outside.
@pytest.mark.parametrize("label", [label for label in FAMILIES if label != "deit_distilled"])
def test_external_head_gives_the_maps_of_the_headed_model(label):
    headed = tiny(label)
    module = split_head(headed)
    explainer = TimmViTExplainer(module, "gradskip")
    assert explainer.num_classes == 4 and explainer.adapter.backbone is module.backbone
    x = images_for(explainer, 3)
    ours, reference = explainer.explain(x), TimmViTExplainer(headed).explain(x)
    torch.testing.assert_close(ours.logits, reference.logits)
    torch.testing.assert_close(ours.maps, reference.maps, rtol=1e-5, atol=1e-7)


def test_preprocessing_in_forward_is_honoured():
    headed = tiny("vit_cls")
    module = split_head(headed, scale=0.5)
    x = images_for(TimmViTExplainer(headed), 2)
    ours = TimmViTExplainer(module).explain(x)
    torch.testing.assert_close(ours.maps, TimmViTExplainer(headed).explain(x * 0.5).maps)


def test_forward_that_does_not_return_logits_is_refused():
    class Features(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = tiny("vit_cls")

        def forward(self, images):
            return self.backbone.forward_features(images)  # (B, N, D) tokens, not logits

    expected = r"Features.forward must return logits of shape \(B=1, num_classes\).*\(1, 17, 48\)"
    with pytest.raises(ValueError, match=expected):
        TimmViTExplainer(Features()).explain(torch.randn(1, 3, 32, 32))


@pytest.mark.parametrize("label", FAMILIES)
def test_value_norms_are_those_of_the_values_the_attention_mixes(label):
    model = tiny(label)
    attn = adapter_for(model).blocks[1].attn
    seen = {}

    def keep(key: str):
        def hook(_m, args, kwargs=None) -> None:
            seen[key] = args[0] if args else kwargs["x"]

        return hook

    hooks = [
        attn.register_forward_pre_hook(keep("x"), with_kwargs=True),
        attn.proj.register_forward_pre_hook(keep("mixed")),
    ]
    x = images_for(TimmViTExplainer(model), 2)
    try:
        cap = capture(model, x)
    finally:
        for h in hooks:
            h.remove()
    v = values_from_input(attn, seen["x"])  # (B, N, A), recomputed from the weights
    b, n, _ = v.shape
    heads = v.reshape(b, n, attn.num_heads, -1).transpose(1, 2)
    mixed = (cap.attn[1] @ heads).transpose(1, 2).reshape(b, n, -1)  # sum_j A_ij v_j per head
    torch.testing.assert_close(mixed, seen["mixed"], rtol=1e-4, atol=1e-5)  # the proj input: right values
    torch.testing.assert_close(cap.value_norm[1], value_norms(v, attn.num_heads, getattr(attn, "num_kv_heads", None)))
