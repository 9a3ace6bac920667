import pytest
import torch
from torch import nn

from gradskip_lightning.families.segformer import SEGFORMER_METHODS, SegFormerExplainer

TARGETS = torch.tensor([0, 1, 2])


@pytest.mark.parametrize("method", sorted(SEGFORMER_METHODS))
def test_maps_cover_the_pixels(segformer, images, method):
    out = SegFormerExplainer(segformer, method).explain(images, TARGETS)
    assert out.maps.shape == (3, 64, 64) and out.token_maps.shape == (3, 16, 16)
    torch.testing.assert_close(out.token_maps.sum(dim=(1, 2)), torch.ones(3))
    torch.testing.assert_close(out.maps.mean(dim=(1, 2)) * 256, torch.ones(3), rtol=0.05, atol=0)
    assert out.method == method and torch.equal(out.targets, TARGETS)


def test_region_changes_the_map(segformer, images):
    left = torch.zeros(3, 16, 16, dtype=torch.bool)
    left[:, :, :8] = True
    a = SegFormerExplainer(segformer).explain(images, TARGETS, left).token_maps
    b = SegFormerExplainer(segformer).explain(images, TARGETS, ~left).token_maps
    assert not torch.allclose(a, b)


def test_unknown_method_is_refused(segformer, images):
    with pytest.raises(ValueError, match="Unknown SegFormer method 'lrp'"):
        SegFormerExplainer(segformer, "lrp")  # a ViT-only method


def test_module_around_the_segformer_is_explained_through_its_forward(segformer, images):
    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = segformer

        def forward(self, x):
            return self.net(pixel_values=x).logits

    direct = SegFormerExplainer(segformer).explain(images, TARGETS)
    wrapped = SegFormerExplainer(Wrapped()).explain(images, TARGETS)
    torch.testing.assert_close(wrapped.token_maps, direct.token_maps)
    region = direct.region[:, None]
    region_mean = (direct.dense_logits * region).sum(dim=(2, 3)) / region.sum(dim=(2, 3))
    torch.testing.assert_close(direct.logits, region_mean)
    assert direct.valid.all() and direct.head_weights.shape == (3, 5, 4)  # 5 blocks, at most 4 heads
    assert torch.isnan(direct.head_weights[:, 0, 1:]).all() and torch.isfinite(direct.head_weights[:, 4]).all()


def test_default_target_is_the_most_predicted_class(segformer, images):
    out = SegFormerExplainer(segformer).explain(images)
    predicted = out.dense_logits.argmax(dim=1)
    counts = torch.stack([(predicted == c).flatten(1).sum(dim=1) for c in range(3)], dim=1)
    assert torch.equal(out.targets, counts.argmax(dim=1))
    assert out.region_found.all()  # the most predicted class is predicted somewhere


def test_bad_input_is_refused_with_the_fix(segformer, images):
    explainer = SegFormerExplainer(segformer)
    with pytest.raises(ValueError, match="multiples of 32"):
        explainer.explain(torch.randn(1, 3, 48, 64))
    with pytest.raises(ValueError, match=r"in \[0, 3\)"):
        explainer.explain(images, torch.tensor([0, 1, 3]))
    with pytest.raises(ValueError, match="takes no option"):
        SegFormerExplainer(segformer, "rollout", alpha=0.5)
    with pytest.raises(TypeError, match="SegformerForSemanticSegmentation"):
        SegFormerExplainer(nn.Linear(2, 2))


def test_random_floor_is_seeded(segformer, images):
    a = SegFormerExplainer(segformer, "random", seed=1).explain(images, TARGETS).token_maps
    b = SegFormerExplainer(segformer, "random", seed=1).explain(images, TARGETS).token_maps
    c = SegFormerExplainer(segformer, "random", seed=2).explain(images, TARGETS).token_maps
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_raw_attention_moves_relevance_only_in_the_top_block(segformer, images):
    from gradskip_lightning.families.segformer import capture_segmentation, raw_attention_segmentation

    result = raw_attention_segmentation(capture_segmentation(segformer, images, TARGETS))
    top, *rest = result.blocks
    assert not torch.allclose(top.below, top.above)
    for block in rest:
        assert torch.equal(block.below, block.above)


@pytest.mark.parametrize("method", ["gradskip", "chefer"])
def test_randomised_weights_decorrelate_the_maps(segformer, images, method):
    from gradskip_lightning.families.segformer import SegformerCascade
    from gradskip_lightning.metrics import parameter_randomisation

    explain = lambda model, x, t: SegFormerExplainer(model, method).explain(x, t).maps  # noqa: E731
    curve = parameter_randomisation(segformer, images, TARGETS, explain, cascade_for=SegformerCascade)
    assert curve.layers == (
        "decode_head",
        "stages.3.blocks.0",
        "stages.2.blocks.0",
        "stages.1.blocks.1",
        "stages.1.blocks.0",
        "stages.0.blocks.0",
    )
    assert curve.mean[-1] < 0.5  # measured 0.16 (gradskip) and 0.02 (chefer) with every layer re-initialised
    same = parameter_randomisation(segformer, images, TARGETS, explain, cascade_for=SegformerCascade, seed=0)
    torch.testing.assert_close(same.similarity, curve.similarity)  # seeded
