"""Picking the explained network of a module that holds several (a teacher and a student, an EMA
copy) with ``backbone=``, the same for every family, and the refusals that name the candidates."""

from __future__ import annotations

import pytest
import timm
import torch
from torch import Tensor, nn

from gradskip_lightning import GradSkipCallback, explainer_for
from gradskip_lightning.core.explanation import UnsupportedModel
from gradskip_lightning.families import backbones
from tests.conftest import make_tiny_vit


def _swin() -> nn.Module:
    torch.manual_seed(2)
    return timm.create_model(
        "swin_tiny_patch4_window7_224", num_classes=4, img_size=32, patch_size=4, window_size=4, embed_dim=32,
        depths=(2, 2), num_heads=(2, 4),
    ).eval()  # fmt: skip


class TeacherStudent(nn.Module):
    """Two supported networks side by side; the forward is the student's."""

    def __init__(self, teacher: nn.Module, student: nn.Module) -> None:
        super().__init__()
        self.teacher, self.student = teacher, student

    def forward(self, images: Tensor) -> Tensor:
        return self.student(images)


def _pair() -> TeacherStudent:
    return TeacherStudent(make_tiny_vit(seed=0), make_tiny_vit(seed=1))


def images() -> Tensor:
    return torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))


def test_a_module_with_two_networks_is_refused_naming_both_paths_and_classes():
    with pytest.raises(UnsupportedModel, match="holds 2 networks; those that can be explained are at") as refused:
        explainer_for(_pair())
    message = str(refused.value)
    assert "'teacher' (VisionTransformer; timm_vit)" in message and "'student' (VisionTransformer; timm_vit)" in message
    assert "Pass backbone=" in message


@pytest.mark.parametrize("method", ["gradskip", "rollout"])
def test_backbone_explains_the_chosen_network_as_if_it_were_alone(method):
    model, labels = _pair(), torch.tensor([0, 1, 2])
    chosen = explainer_for(model, method, backbone="student")
    assert chosen.model is model.student  # what the perturbation scores run too
    ours = chosen.explain(images(), labels).maps
    alone = explainer_for(make_tiny_vit(seed=1), method).explain(images(), labels).maps
    teacher = explainer_for(model, method, backbone="teacher").explain(images(), labels).maps
    torch.testing.assert_close(ours, alone, rtol=0, atol=0)
    assert (ours - teacher).abs().max() > 1e-3 * ours.abs().max()


def test_a_wrong_path_lists_where_the_networks_are():
    model = _pair()
    with pytest.raises(ValueError, match=r"backbone='studnt' is not a submodule of TeacherStudent") as wrong:
        explainer_for(model, backbone="studnt")
    assert "'teacher' (VisionTransformer; timm_vit), 'student' (VisionTransformer; timm_vit)" in str(wrong.value)
    with pytest.raises(ValueError, match=r"'student.head' is a Linear, which holds no supported network.*'teacher'"):
        explainer_for(model, backbone="student.head")
    with pytest.raises(ValueError, match="dotted module path"):
        explainer_for(model, backbone="student.")


def test_every_family_is_picked_the_same_way_at_any_depth():
    from gradskip_lightning.training.classifier import ViTClassifier

    torch.manual_seed(0)
    wrapped = ViTClassifier(num_classes=4, img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3)
    model = nn.Module()
    model.nets = nn.ModuleDict({"vit": wrapped, "swin": _swin()})
    assert [(b.path, b.network_path, b.family.name, b.refused) for b in backbones(model)] == [
        ("nets.vit", "nets.vit.model", "timm_vit", ""),
        ("nets.swin", "nets.swin", "timm_swin", ""),
    ]
    with pytest.raises(UnsupportedModel, match=r"'nets.vit' \(ViTClassifier holding a VisionTransformer at "):
        explainer_for(model)
    with pytest.raises(
        ValueError, match=r"backbone='nets' is a ModuleDict holding 2 networks: name the one to explain: 'nets.vit'"
    ):
        explainer_for(model, backbone="nets")
    swin = explainer_for(model, backbone="nets.swin")
    assert swin.family == "timm_swin" and swin.model is model.nets.swin
    vit = explainer_for(model, backbone="nets.vit")  # the head is in the wrapper: its forward returns the logits
    assert vit.family == "timm_vit" and vit.model is wrapped and vit.num_classes == 4


def test_an_hf_network_is_picked_and_read_through_its_logits():
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8,
        num_labels=4,
    )  # fmt: skip
    hf = transformers.ViTForImageClassification(config).eval()
    model = TeacherStudent(make_tiny_vit(seed=0), hf)
    assert [b.path for b in backbones(model)] == ["teacher", "student"]  # not the ViTModel inside
    explainer = explainer_for(model, backbone="student")
    assert explainer.family == "hf_vit"
    torch.testing.assert_close(explainer.model(images()), hf(pixel_values=images()).logits)


def test_the_callback_refuses_a_bad_backbone_path_at_init():
    with pytest.raises(ValueError, match="backbone must be a dotted module path"):
        GradSkipCallback(backbone="")
    with pytest.raises(TypeError, match="backbone must be a module path"):
        GradSkipCallback(backbone=["student"])  # type: ignore[arg-type]
    assert GradSkipCallback(backbone="nets.student").backbone == "nets.student"


def test_the_callback_builds_every_explainer_on_the_backbone_and_names_the_candidates():
    from gradskip_lightning.engine.setup import explainers_for

    model = _pair()
    with pytest.raises(TypeError, match=r"GradSkipCallback: Cannot explain TeacherStudent: .*'teacher'.*'student'"):
        explainers_for(model, ["gradskip"], {})
    explainers = explainers_for(model, ["gradskip", "rollout"], {"alpha": 0.5}, backbone="student")
    assert all(e.model is model.student for e in explainers.values()) and explainers["gradskip"].options.alpha == 0.5


class WithFeatures(nn.Module):
    """A classifier, and beside it a headless feature network, all in a ``ModuleDict``."""

    def __init__(self) -> None:
        super().__init__()
        self.nets = nn.ModuleDict({"student": make_tiny_vit(seed=1), "feat": make_tiny_vit(seed=2, num_classes=0)})

    def forward(self, images: Tensor) -> Tensor:
        return self.nets["student"](images)


def test_candidates_and_hints_name_only_networks_that_can_be_explained():
    model = WithFeatures()
    found = {b.path: b.refused for b in backbones(model)}
    assert found["nets.student"] == "" and "no classifier head" in found["nets.feat"]
    with pytest.raises(
        UnsupportedModel, match=r"can be explained are at: 'nets.student' \(VisionTransformer"
    ) as refused:
        explainer_for(model)
    assert "nets.feat" not in str(refused.value) and "backbone='nets.student'" in str(refused.value)
    with pytest.raises(ValueError, match=r"backbone='nets.feat' cannot be explained: .*no classifier head") as headless:
        explainer_for(model, backbone="nets.feat")
    assert "'nets.student'" in str(headless.value) and "'nets.feat' (" not in str(headless.value)


def test_a_container_is_refused_as_the_explained_module():
    model = nn.Module()
    model.nets = nn.ModuleDict({"student": make_tiny_vit(seed=1)})  # one network, but no forward of its own
    with pytest.raises(ValueError, match=r"backbone='nets' cannot be explained: .*ModuleDict: it is a container"):
        explainer_for(model, backbone="nets")
    with pytest.raises(UnsupportedModel, match="container with no forward of its own"):
        explainer_for(model.nets)
    assert explainer_for(model, backbone="nets.student").model is model.nets.student


@pytest.mark.parametrize("family", ["timm_vit", "segformer"])
def test_an_empty_batch_is_a_clear_error_in_every_family(family):
    if family == "segformer":
        from tests.families.segformer.conftest import tiny_segformer

        model, images = tiny_segformer(), torch.zeros(0, 3, 64, 64)
    else:
        model, images = make_tiny_vit(), torch.zeros(0, 3, 32, 32)
    with pytest.raises(ValueError, match=r"images is an empty batch \(0, 3, .*nothing to explain"):
        explainer_for(model).explain(images)
