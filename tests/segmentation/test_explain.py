import pytest
import torch

from gradskip_lightning.segmentation import explain_segmentation

TARGETS = torch.tensor([0, 1, 2])


@pytest.mark.parametrize("method", ["gradskip", "rollout", "chefer"])
def test_maps_cover_the_pixels(segformer, images, method):
    out = explain_segmentation(segformer, images, TARGETS, method=method)
    assert out.maps.shape == (3, 64, 64) and out.token_maps.shape == (3, 16, 16)
    torch.testing.assert_close(out.token_maps.sum(dim=(1, 2)), torch.ones(3))
    torch.testing.assert_close(out.maps.mean(dim=(1, 2)) * 256, torch.ones(3), rtol=0.05, atol=0)
    assert out.method == method and torch.equal(out.targets, TARGETS)


def test_region_changes_the_map(segformer, images):
    left = torch.zeros(3, 16, 16, dtype=torch.bool)
    left[:, :, :8] = True
    a = explain_segmentation(segformer, images, TARGETS, left).token_maps
    b = explain_segmentation(segformer, images, TARGETS, ~left).token_maps
    assert not torch.allclose(a, b)


def test_unknown_method_is_refused(segformer, images):
    with pytest.raises(ValueError, match="method must be one of"):
        explain_segmentation(segformer, images, TARGETS, method="lrp")
