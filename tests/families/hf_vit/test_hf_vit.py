"""HF transformers ViTs (ViT, DeiT, DINOv2 with and without registers, BEiT): eager attention for the
call only, the timm family's maps for the same weights, the method doc's properties."""

from __future__ import annotations

import warnings

import pytest
import timm
import torch
from lightning.pytorch import LightningModule
from torch import nn

from gradskip_lightning.core.explanation import UnsupportedModel
from gradskip_lightning.families import explainer_for
from gradskip_lightning.families.hf_vit import FAMILY, HFViTAdapter, HFViTExplainer, LogitsOf
from gradskip_lightning.families.timm_vit import TimmViTExplainer
from gradskip_lightning.methods import PASS_METHODS, GradSkipOptions, propagation
from gradskip_lightning.metrics import parameter_randomisation
from tests.core.helpers import hooks_on
from tests.transplant import timm_to_hf

transformers = pytest.importorskip("transformers")

SMALL = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8
)
#: label -> (config class, model class, config overrides, prefix tokens, what the head reads at CLS)
MODELS = {
    "vit": ("ViTConfig", "ViTForImageClassification", {}, 1),
    "deit": ("DeiTConfig", "DeiTForImageClassification", {}, 2),
    "deit_teacher": ("DeiTConfig", "DeiTForImageClassificationWithTeacher", {}, 2),
    "dinov2": ("Dinov2Config", "Dinov2ForImageClassification", {}, 1),
    "dinov2_registers": (
        "Dinov2WithRegistersConfig",
        "Dinov2WithRegistersForImageClassification",
        dict(num_register_tokens=2),
        3,
    ),
    "beit_relpos_mean": ("BeitConfig", "BeitForImageClassification", dict(use_relative_position_bias=True), 1),
    "beit_shared_cls": (
        "BeitConfig",
        "BeitForImageClassification",
        dict(use_shared_relative_position_bias=True, use_mean_pooling=False),
        1,
    ),
}
TARGETS = torch.tensor([0, 1, 2])


def tiny(label: str, seed: int = 0, **overrides) -> nn.Module:
    """A random-initialised 2-layer instance of ``label``, 3 classes, in eval mode."""
    config_class, model_class, extra, _ = MODELS[label]
    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(**SMALL, **extra, **overrides, num_labels=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(transformers, model_class)(config).eval()


def images(batch: int = 3, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(batch, 3, 32, 32, dtype=dtype)


@pytest.mark.parametrize("label", MODELS)
def test_logits_are_the_models_and_the_model_is_left_as_it_was(label):
    model = tiny(label).train()
    implementation = model.config._attn_implementation
    with torch.no_grad():
        reference = model.eval()(pixel_values=images()).logits
    model.train()
    explainer = explainer_for(model, "gradskip")
    assert explainer.family == "hf_vit" and explainer.num_prefix_tokens == MODELS[label][3]
    explanation = explainer.explain(images(), TARGETS)
    torch.testing.assert_close(explanation.logits, reference, rtol=1e-5, atol=1e-5)
    assert explanation.valid.all() and explanation.token_maps.shape == (3, 4, 4)
    assert model.config._attn_implementation == implementation and all(m.training for m in model.modules())
    assert hooks_on(model) == 0 and all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("label", MODELS)
def test_batch_equals_singles_and_relevance_is_conserved(label):
    model = tiny(label).double()
    explainer = HFViTExplainer(model)
    x = images(3, torch.float64)
    batch = explainer.explain(x, TARGETS).maps
    singles = torch.cat([explainer.explain(x[i : i + 1], TARGETS[i : i + 1]).maps for i in range(3)])
    assert (batch - singles).abs().max() / batch.abs().max() < 1e-10
    cap = explainer.adapter.capture(explainer.model, x, TARGETS)
    assert cap.readout.sum(-1).allclose(torch.ones(3, dtype=torch.float64))
    for step in propagation(cap, GradSkipOptions(gate="token")):
        torch.testing.assert_close(step.relevance_below.sum(-1), step.relevance_above.sum(-1), rtol=1e-10, atol=0)


@pytest.mark.parametrize("label", ["dinov2_registers", "beit_relpos_mean"])
@pytest.mark.parametrize("method", PASS_METHODS.names)
def test_every_method_explains(label, method):
    explanation = HFViTExplainer(tiny(label), method).explain(images(), TARGETS)
    assert explanation.valid.all() and explanation.maps.std() > 0


@pytest.mark.parametrize("distilled", [False, True])
@pytest.mark.parametrize("method", PASS_METHODS.names)
def test_maps_are_the_timm_family_maps_of_the_same_weights(distilled, method):
    name = "deit_tiny_distilled_patch16_224" if distilled else "vit_tiny_patch16_224"
    torch.manual_seed(0)
    timm_vit = timm.create_model(name, img_size=32, patch_size=8, depth=2, embed_dim=32, num_heads=2, num_classes=3)
    timm_vit.eval()
    x = images()
    ours = HFViTExplainer(timm_to_hf(timm_vit), method).explain(x, TARGETS)
    reference = TimmViTExplainer(timm_vit, method).explain(x, TARGETS)
    torch.testing.assert_close(ours.logits, reference.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.token_maps, reference.token_maps, rtol=1e-4, atol=1e-6)


def test_read_out_is_what_each_head_reads():
    def readout(label: str, **overrides) -> list[float]:
        adapter = HFViTAdapter(tiny(label, **overrides))
        return adapter.readout(1, None, torch.device("cpu"))[0].tolist()

    assert readout("vit") == [1.0] + [0.0] * 16
    assert readout("deit") == [1.0, 0.0] + [0.0] * 16
    assert readout("deit_teacher") == [0.5, 0.5] + [0.0] * 16
    assert readout("dinov2_registers") == [0.5, 0.0, 0.0] + [0.5 / 16] * 16
    assert readout("beit_relpos_mean") == [0.0] + [1 / 16] * 16
    assert readout("beit_shared_cls") == [1.0] + [0.0] * 16


def test_a_layer_without_attention_output_passes_relevance_through():
    model = tiny("dinov2")
    with torch.no_grad():
        model.dinov2.encoder.layer[1].attention.o_proj.weight.zero_()
        model.dinov2.encoder.layer[1].attention.o_proj.bias.zero_()
    explainer = HFViTExplainer(model)
    top, bottom = propagation(explainer.adapter.capture(explainer.model, images(), TARGETS), GradSkipOptions())
    assert top.layer == 1 and (top.gates == 0).all()
    torch.testing.assert_close(top.relevance_below, top.relevance_above)
    assert not torch.allclose(bottom.relevance_below, bottom.relevance_above)


def test_value_norms_are_those_of_v_proj():
    model = tiny("beit_relpos_mean")
    explainer = HFViTExplainer(model)
    attention = model.beit.layers[1].attention
    seen = {}
    hook = attention.v_proj.register_forward_hook(lambda _m, _a, out: seen.setdefault("v", out))
    try:
        cap = explainer.adapter.capture(explainer.model, images(), TARGETS)
    finally:
        hook.remove()
    v = seen["v"].reshape(3, 17, 2, 16)  # (B, N, H, head width)
    torch.testing.assert_close(cap.value_norm[1], v.norm(dim=-1).transpose(1, 2))


class Classifier(LightningModule):
    """A base model and an external head on its CLS token."""

    def __init__(self, body: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.body, self.head = body, head

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(pixel_values=images).last_hidden_state[:, 0])


def test_external_head_on_a_base_model_gives_the_maps_of_the_headed_model():
    headed = tiny("vit")
    module = Classifier(headed.vit, headed.classifier).eval()
    explainer = explainer_for(module)
    assert explainer.model is module and explainer.adapter.num_classes == 0 and explainer.num_classes == 3
    torch.testing.assert_close(explainer.explain(images()).maps, HFViTExplainer(headed).explain(images()).maps)
    with pytest.raises(UnsupportedModel, match="ViTModel has no classifier head"):
        HFViTExplainer(headed.vit)


def test_the_classifier_alone_is_run_through_its_logits():
    model = tiny("vit")
    explainer = HFViTExplainer(model)
    assert isinstance(explainer.model, LogitsOf) and explainer.model.model is model
    torch.testing.assert_close(explainer.model(images()), model(pixel_values=images()).logits)


def test_randomised_weights_decorrelate_the_maps():
    explain = lambda m, x, t: HFViTExplainer(m).explain(x, t).maps  # noqa: E731
    cascade = lambda m: HFViTAdapter(FAMILY.find(m))  # noqa: E731
    curve = parameter_randomisation(tiny("deit"), images(), TARGETS, explain, cascade_for=cascade)
    assert curve.layers == ("head", "blocks.1", "blocks.0")
    assert curve.mean[-1] < 0.5, curve.mean
