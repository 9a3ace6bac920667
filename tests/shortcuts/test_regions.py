"""The one region type and its paste: a tag's box, a hotspot's patches in pixels, a paste that changes exactly the
region's pixels (at its place or moved per image), and the callers that paste through it."""

from __future__ import annotations

import pytest
import torch

from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.shortcuts.artifacts import PatchPaste
from gradskip_lightning.shortcuts.discovery_transplant import constant_pixels
from gradskip_lightning.shortcuts.regions import Region, paste, patch_pixels
from gradskip_lightning.shortcuts.tags import SpuriousTag
from gradskip_lightning.shortcuts.transplant import Transplant


def _l_shaped() -> Region:
    """Patches (0, 1), (1, 1) and (1, 2) of a 4 x 4 grid of 2 px patches: an L in a 4 x 4 px box at (0, 2)."""
    patches = torch.zeros(4, 4, dtype=torch.bool)
    patches[0, 1] = patches[1, 1] = patches[1, 2] = True
    return Region.of_patches(patches, (2, 2))


def test_a_hotspots_region_is_its_patches_in_pixels_in_their_bounding_box():
    region = _l_shaped()
    assert region.bounds == (0, 2, 4, 6) and int(region.mask.sum()) == 12
    patches = torch.tensor([[0, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(region.pixels(8, 8), patch_pixels(patches, (2, 2)))


def test_a_paste_changes_exactly_the_regions_pixels_from_region_sized_or_whole_pixels():
    region, images = _l_shaped(), torch.zeros(3, 2, 8, 8)
    whole = torch.arange(3 * 2 * 64, dtype=torch.float32).reshape(3, 2, 8, 8)
    inside = region.pixels(8, 8)
    for pixels in (whole, region.cut(whole)):
        out = paste(images, pixels, region)
        assert torch.equal(out[:, :, inside], whole[:, :, inside]) and not out[:, :, ~inside].any()
    assert not images.any()  # a copy


def test_a_paste_moved_per_image_puts_the_mask_at_each_images_corner():
    region, images, donors = _l_shaped(), torch.zeros(2, 1, 8, 8), torch.ones(2, 1, 8, 8)
    out = paste(images, donors, region, (torch.tensor([0, 4]), torch.tensor([2, 0])))
    assert torch.equal(out[0, 0].bool(), region.pixels(8, 8))
    assert torch.equal(out[1, 0].bool(), region.at(4, 0).pixels(8, 8))


def test_a_region_that_does_not_fit_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"the region \(0, 2, 4, 6\) does not fit 4 x 4 px images"):
        paste(torch.zeros(1, 1, 4, 4), torch.ones(1, 1, 4, 4), _l_shaped())
    with pytest.raises(ValueError, match="the patches select none"):
        Region.of_patches(torch.zeros(2, 2, dtype=torch.bool), (2, 2))


def test_a_tag_its_transplant_and_its_artifact_share_one_region():
    tag = SpuriousTag(target_class=1, pattern=((1.0, 0.0), (0.0, 1.0)), position=(3, 5))
    half = Normalisation(mean=(0.5,), std=(0.5,))
    assert tag.region.bounds == (3, 5, 5, 7) == PatchPaste.from_tag(tag, half).box
    images = torch.zeros(2, 1, 8, 8)
    pasted = Transplant(tag, half).paste(images)
    assert torch.equal(pasted != 0, (tag.mask(8, 8) & (pasted[0, 0] != 0))[None, None].expand(2, 1, 8, 8))
    assert torch.equal(tag.region.cut(pasted[0, 0]), torch.tensor([[1.0, -1.0], [-1.0, 1.0]]))


def test_a_stamps_own_pixels_are_found_across_a_patch_boundary_and_nothing_else():
    """A 4 x 4 stamp at (6, 6) on class 1's images of 16 px (4 px patches): it spans 4 patches; looking in all of
    them, the shared pixels are the stamp's 16, not the 64 of the patches."""
    images = torch.rand(12, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    classes = torch.arange(12) % 3
    images[classes == 1, :, 6:10, 6:10] = torch.tensor([1.0, 0.0]).repeat(8)[:16].reshape(4, 4)
    patches = torch.zeros(4, 4, dtype=torch.bool)
    patches[1:3, 1:3] = True
    shared = constant_pixels(images, classes, (classes == 1).nonzero()[:, 0], patch_pixels(patches, (4, 4)))
    assert Region.of_pixels(shared).bounds == (6, 6, 10, 10) and int(shared.sum()) == 16
