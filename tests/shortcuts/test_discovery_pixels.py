"""Known answers of the pixel sample's copy test: a stamp on part of a class is its copied patch with the smallest
p-value, copies that do not follow the class are not (the permutation p-value is valid), and the carriers."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from gradskip_lightning.shortcuts import PixelSample
from gradskip_lightning.shortcuts.discovery_pixels import copied_patch, copy_carriers, identical_pairs
from gradskip_lightning.shortcuts.discovery_transplant import AGREEMENT_TOLERANCE

PATCH = 2


def textures(per_class: int, seed: int, classes: int = 3) -> tuple[Tensor, Tensor]:
    """Random texture images (classes * per_class, 3, 8, 8) (no two alike by chance) and their classes."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(classes).repeat_interleave(per_class)
    return torch.rand(len(labels), 3, 8, 8, generator=generator, dtype=torch.float64), labels


def test_a_stamp_on_60_percent_of_a_class_is_its_copied_patch_at_the_smallest_p_value():
    images, classes = textures(20, seed=0)
    stamped = (classes == 1).nonzero()[:12, 0]
    images[stamped, :, 6:, :2] = 0.5  # patch (3, 0)
    found = copied_patch(images, classes, PATCH, permutations=199)
    assert (found.label, found.patch) == (1, (3, 0))
    assert found.share == pytest.approx(66 / 190)  # 12 of 20 images: C(12, 2) of C(20, 2) pairs
    assert found.p_value == pytest.approx(1 / 200)


def test_copies_that_do_not_follow_the_class_get_valid_p_values():
    """A stamp on a random 30 % of every image whatever its class, 40 draws: the p-values are about uniform."""
    p_values = []
    for seed in range(40):
        images, classes = textures(12, seed)
        generator = torch.Generator().manual_seed(1000 + seed)
        images[torch.rand(len(images), generator=generator) < 0.3, :, :2, 4:6] = 0.5
        found = copied_patch(images, classes, PATCH, permutations=99, seed=seed)
        p_values.append(1.0 if found is None else found.p_value)
    p = torch.tensor(p_values)
    assert (p <= 0.05).double().mean() <= 0.1 and (p <= 0.5).double().mean() <= 0.65
    assert (p > 0.5).any()


def test_no_copy_at_all_is_none():
    assert copied_patch(*textures(6, seed=3), PATCH) is None


def test_identical_pairs_are_those_within_the_tolerance_at_every_value_of_a_patch():
    images, _ = textures(4, seed=4)
    images[[1, 5, 9], :, 2:4, 2:4] = 0.25
    images[5, 0, 2, 2] += 0.02  # within 10 % of a value's standard deviation (about 0.3)
    images[9, 1, 3, 3] += 0.2  # not
    patches, first, second = identical_pairs(images, PATCH)
    assert (patches.tolist(), first.tolist(), second.tolist()) == ([5], [1], [5])  # patch (1, 1) of a 4 x 4 grid
    assert 0.02 < AGREEMENT_TOLERANCE * images[:, 0, 2, 2].std() < 0.2


def test_the_carriers_are_the_members_identical_to_another_partner():
    images, classes = textures(6, seed=5)
    images[[0, 2, 3, 7], :, :2, :2] = 0.5  # three of class 0, one of class 1
    corner = torch.zeros(8, 8, dtype=torch.bool)
    corner[:2, :2] = True
    members = (classes == 0).nonzero()[:, 0]
    assert copy_carriers(images, members, images, corner).tolist() == [0, 2, 3]
    assert copy_carriers(images, torch.tensor([7]), images, corner, classes == 1).tolist() == []  # no partner
    assert copy_carriers(images, torch.tensor([7]), images, corner).tolist() == [7]


def test_the_sample_computes_its_copied_patch_once():
    images, classes = textures(8, seed=6)
    images[classes == 2, :, :2, :2] = 0.5
    sample = PixelSample(images, classes)
    found = sample.copied_patch(PATCH, 99, 0)
    assert sample.copied_patch((PATCH, PATCH), 99, 0) is found and found.label == 2
