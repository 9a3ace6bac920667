"""Known answers of the shortcut discovery: planted stamps, one or two strategies, stamp- and bar-reading rule
models (a bar across a patch boundary, a stamp on part of a class), the calibrated test on a clean rule model."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import Tensor

from gradskip_lightning.engine.discovery.images import alert_text
from gradskip_lightning.metrics import CountingModel
from gradskip_lightning.shortcuts import ClassMapSummary, DiscoverySettings, PixelSample, discover, summarise_classes
from gradskip_lightning.shortcuts.discovery import suspicion_score
from gradskip_lightning.shortcuts.discovery_maps import consistency, grown_hotspot, hotspots, normalise_maps
from gradskip_lightning.shortcuts.discovery_strategies import find_strategies
from gradskip_lightning.shortcuts.discovery_transplant import (
    MIN_TESTED_PROBES,
    PatchAgreements,
    constancy_test,
    hotspot_transplant,
    pixel_constancy,
    sign_test,
)
from gradskip_lightning.shortcuts.multiplicity import gated_holm

from .discovery_ddp_worker import (
    NUM_CLASSES,
    SETTINGS,
    ddp_images,
    ddp_maps,
    discovery_values,
    property_values,
    stamp_model,
    summary_values,
)

ROOT = Path(__file__).resolve().parents[2]
STAMP = 0.9
PATCH = 2
SIDE = 8  # patches per side: 16 x 16 px images
SHARED_PATCH = DiscoverySettings(top_patches=3)  # the shared-patch groups on (off by default)


def stamped_maps(generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Maps (12, 6, 6), classes (12,): class 1 has its mass on patches (0, 0) and (0, 1), the others are diffuse."""
    classes = torch.tensor([0] * 4 + [1] * 4 + [2] * 4)
    maps = torch.rand(12, 6, 6, generator=generator, dtype=torch.float64)
    maps[4:8] = 0.0
    maps[4:8, 0, :2] = 3.0 + torch.rand(4, 2, generator=generator, dtype=torch.float64)
    maps[4:8] *= torch.tensor([1.0, 2.0, 5.0, 0.5], dtype=torch.float64)[:, None, None]  # scale is normalised away
    return maps, classes


def test_a_planted_stamp_is_the_hotspot_of_its_class_and_its_maps_agree():
    maps, classes = stamped_maps(torch.Generator().manual_seed(0))
    summary = summarise_classes(maps, classes, 3, DiscoverySettings(hotspot_share=0.9))  # both patches needed
    expected = torch.zeros(6, 6, dtype=torch.bool)
    expected[0, :2] = True
    assert torch.equal(summary.hotspots[1], expected)
    assert summary.boxes[1].tolist() == [0, 0, 1, 2]
    assert summary.concentration[1].item() == pytest.approx(1 - 2 / (0.9 * 36))
    assert summary.consistency[1].item() > 0.9
    assert summary.hotspots[0].sum() > 20 and summary.concentration[0] < 0.4  # diffuse: a large hotspot
    assert abs(summary.consistency[0].item()) < 0.3
    assert torch.allclose(summary.mean_maps.sum(dim=(1, 2)), torch.ones(3, dtype=torch.float64))
    assert summary.counts.tolist() == [4, 4, 4]


def test_identical_maps_are_one_strategy_with_consistency_one():
    base = torch.rand(6, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    maps = base * torch.arange(1.0, 9.0, dtype=torch.float64)[:, None, None]
    found = find_strategies(normalise_maps(maps), neighbours=3, min_distance=0.1, max_strategies=4, restarts=3, seed=0)
    assert found.sizes.tolist() == [8] and found.assignments.tolist() == [0] * 8
    assert torch.allclose(found.mean_maps[0], base / base.sum())
    assert consistency(normalise_maps(maps)).item() == pytest.approx(1.0)


def two_strategy_maps(generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Maps (10, 6, 6): 6 with their mass on the left half, 4 on the right, shuffled; and which is left."""
    left = torch.arange(10) % 5 < 3
    maps = torch.rand(10, 6, 6, generator=generator, dtype=torch.float64) * 0.05
    maps[left, :, :3] += 1.0
    maps[~left, :, 3:] += 1.0
    return maps, left


def test_two_separate_strategies_are_found_with_their_sizes_and_mean_maps():
    maps, left = two_strategy_maps(torch.Generator().manual_seed(2))
    found = find_strategies(normalise_maps(maps), neighbours=3, min_distance=0.1, max_strategies=4, restarts=5, seed=0)
    assert found.sizes.tolist() == [6, 4]
    assert torch.equal(found.assignments, (~left).long())  # the larger (left) strategy first
    assert found.mean_maps[0, :, :3].sum() > 0.9 and found.mean_maps[1, :, 3:].sum() > 0.9
    assert found.eigenvalues[:2].abs().max() < 1e-6 < found.eigenvalues[2]  # two components: eigengap after 2
    permutation = torch.randperm(10, generator=torch.Generator().manual_seed(3))
    shuffled = find_strategies(
        normalise_maps(maps[permutation]), neighbours=3, min_distance=0.1, max_strategies=4, restarts=5, seed=0
    )
    assert torch.equal(shuffled.assignments, found.assignments[permutation])
    assert torch.allclose(shuffled.mean_maps, found.mean_maps)


def test_the_class_summary_reports_strategies_per_class():
    maps, _ = two_strategy_maps(torch.Generator().manual_seed(2))
    settings = DiscoverySettings(neighbours=3)
    summary = summarise_classes(maps, torch.ones(10, dtype=torch.long), 2, settings)
    assert summary.settings is settings
    assert [s.sizes.tolist() for s in summary.strategies] == [[], [6, 4]]
    assert summarise_classes(maps, torch.ones(10, dtype=torch.long), 2, DiscoverySettings(max_strategies=1)).strategies[
        1
    ].sizes.tolist() == [10]


def test_normalisation_keeps_positive_relevance_and_makes_blank_maps_uniform():
    maps = torch.tensor([[[2.0, -1.0], [2.0, 0.0]], [[-1.0, 0.0], [0.0, 0.0]]])
    assert normalise_maps(maps).tolist() == [[[0.5, 0.0], [0.5, 0.0]], [[0.25, 0.25], [0.25, 0.25]]]
    masks, boxes = hotspots(torch.full((1, 2, 2), 0.25, dtype=torch.float64), 0.5)  # the share reached exactly
    assert masks.sum().item() == 2 and boxes.tolist() == [[0, 0, 1, 2]]


def test_empty_and_single_map_classes_are_reported_as_such():
    maps = torch.rand(3, 4, 4, generator=torch.Generator().manual_seed(4))
    summary = summarise_classes(maps, torch.tensor([0, 0, 2]), 4)
    assert summary.counts.tolist() == [2, 0, 1, 0]
    assert not summary.mean_maps.isnan().any() and summary.mean_maps[1].abs().sum() == 0
    assert not summary.hotspots[1].any() and summary.boxes[1].tolist() == [0, 0, 0, 0]
    assert summary.concentration[[1, 3]].isnan().all() and not summary.concentration[[0, 2]].isnan().any()
    assert summary.consistency[1:].isnan().all() and not summary.consistency[0].isnan()  # fewer than 2 maps
    assert [s.sizes.tolist() for s in summary.strategies] == [[2], [], [1], []]
    assert summary.strategies[1].mean_maps.shape == (0, 4, 4)


def test_the_metric_over_batches_equals_the_function():
    maps, classes = stamped_maps(torch.Generator().manual_seed(5))
    metric = ClassMapSummary(3, (6, 6))
    for start in range(0, 12, 5):
        metric.update(maps[start : start + 5], classes[start : start + 5])
    accumulated, direct = metric.compute(), summarise_classes(maps, classes, 3)
    for name in ("counts", "mean_maps", "hotspots", "boxes", "concentration", "consistency"):
        assert torch.allclose(getattr(accumulated, name).double(), getattr(direct, name).double(), equal_nan=True)
    assert [s.sizes.tolist() for s in accumulated.strategies] == [s.sizes.tolist() for s in direct.strategies]
    metric.update(maps[:1], classes[:1])  # the states keep accumulating after compute()
    assert metric.compute().counts.tolist() == [5, 4, 4]


class StampModel:
    """Class 1 iff the top-left 2 x 2 pixels are the stamp; otherwise class 0 if the image is dark, else class 2."""

    def __call__(self, images: Tensor) -> Tensor:
        stamped = (images[:, 0, :PATCH, :PATCH] == STAMP).flatten(1).all(dim=1)
        dark = images[:, 0].mean(dim=(1, 2)) < 0.5
        scores = torch.stack([~stamped & dark, stamped, ~stamped & ~dark], dim=1)
        return torch.where(scores, 10.0, -10.0).to(images.dtype)


def stamp_case(per_class: int = 12) -> tuple[Tensor, Tensor, Tensor]:
    """Images (3n, 1, 16, 16) of random texture (class 0 dark, 2 bright), the stamp on class 1; classes; maps."""
    generator = torch.Generator().manual_seed(6)
    classes = torch.arange(3).repeat_interleave(per_class)
    offsets = torch.tensor([0.0, 0.275, 0.55], dtype=torch.float64)[classes]
    side = SIDE * PATCH
    images = offsets[:, None, None, None] + 0.45 * torch.rand(len(classes), 1, side, side, generator=generator)
    images[classes == 1, :, :PATCH, :PATCH] = STAMP
    maps = torch.rand(len(classes), SIDE, SIDE, generator=generator, dtype=torch.float64)
    maps[classes == 1, 0, 0] = 100.0  # the stamp's patch
    return images, classes, maps


@pytest.mark.parametrize("activation", ["softmax", "sigmoid"])
def test_the_hotspot_transplant_flips_to_the_stamped_class_and_the_controls_do_not(activation):
    images, classes, maps = stamp_case()
    model = CountingModel(StampModel())
    summary = summarise_classes(maps, classes, 3, DiscoverySettings(consistency=True))  # the formula with consistency
    assert summary.hotspots[1].sum() == 1 and summary.hotspots[1, 0, 0]
    found = discover(model, images, classes, summary, patch_size=PATCH, batch_size=7, activation=activation)
    stamp = found.transplants[1]
    assert stamp.recipients == 24 and stamp.flip_rate == 1.0
    assert stamp.random_flip_rate <= 0.1 and stamp.other_class_flip_rate == 0.0
    assert stamp.constancy == 1.0
    assert stamp.excess >= 0.9
    assert found.reported[1].group.strategy is None and not found.reported[1].grown  # the class's own hotspot
    cues = summary.concentration[1] * stamp.constancy * summary.consistency[1].clamp(min=0)
    assert found.suspicion[1].item() == pytest.approx(stamp.excess * cues.item() ** (1 / 3))
    # 24 recipients flip under the test, at most 2 under a control: the exact sign test, then the gate (flips
    # first, Holm at alpha / 2 over every test; the pixels then, over the tests whose flips passed)
    assert stamp.flip_p_value <= sign_test(22, 0) and stamp.constancy_p_value < 1e-6
    every = [t.transplant for tests in found.tests for t in tests]
    flips, pixels = (torch.tensor(values, dtype=torch.float64) for values in zip(
        *[(t.flip_p_value, t.constancy_p_value) for t in every], strict=True))  # fmt: skip
    assert found.p_values[1].item() == gated_holm(flips, pixels, 0.05)[every.index(stamp)].item()
    assert found.p_values[1] < 1e-4 and found.flagged.tolist() == [False, True, False]  # the default alpha and floor
    for clean in (found.transplants[0], found.transplants[2]):
        assert clean.constancy < 0.1 and clean.excess < 0.1
    assert found.suspicion[[0, 2]].max() < 0.05 and (found.p_values[[0, 2]] > 0.05).all()
    # the 36 probes unchanged once for every class, then per test 3 pasted copies of its recipients, in chunks of 7
    pasted = [3 * t.transplant.recipients for tests in found.tests for t in tests]
    assert model.calls == math.ceil(36 / 7) + sum(math.ceil(n / 7) for n in pasted)
    assert model.images == 36 + sum(pasted)


def test_two_methods_flag_a_class_when_either_finds_its_stamp_and_a_shared_test_runs_once_at_the_higher_suspicion():
    images, classes, maps = stamp_case()
    elsewhere = maps.clone()
    elsewhere[classes == 1, 0, 0] = 0.0
    elsewhere[classes == 1, SIDE - 1, SIDE - 1] = 100.0  # a method whose class-1 maps miss the stamp
    settings = DiscoverySettings()
    right, wrong = (summarise_classes(m, classes, 3, settings) for m in (maps, elsewhere))
    missed = discover(StampModel(), images, classes, wrong, patch_size=PATCH)
    assert not missed.flagged.any() and missed.reported[1].method is None
    found = discover(StampModel(), images, classes, {"wrong": wrong, "right": right}, patch_size=PATCH)
    assert found.flagged.tolist() == [False, True, False]
    assert found.reported[1].method == "right" and found.summary_of(found.reported[1]) is right
    assert found.summary is wrong  # the first method's, shown
    alone = discover(StampModel(), images, classes, right, patch_size=PATCH)
    assert found.suspicion[1] == alone.suspicion[1]  # the same test; its p-value adjusted over more tests
    assert alone.p_values[1] <= found.p_values[1] <= 0.05
    # classes 0 and 2 have the same maps in both: each of their tests runs once, under the first method
    assert all(t.method == "wrong" for label in (0, 2) for t in found.tests[label])
    assert [len(found.tests[label]) for label in (0, 2)] == [len(alone.tests[label]) for label in (0, 2)]
    assert found.tests_run == missed.tests_run + len(alone.tests[1])
    twice = discover(StampModel(), images, classes, {"a": right, "b": right}, patch_size=PATCH)
    assert twice.p_values.tolist() == alone.p_values.tolist()  # nothing tested twice, nothing adjusted more
    cued = DiscoverySettings(consistency=True)  # the cue two methods' groups of one region can differ in
    alike = maps.clone()
    alike[classes == 1] = maps[classes == 1][0] + 0.01 * maps[classes == 1]  # class 1's maps agree: consistent
    alike[classes == 1, 0, 0] = 100.0
    agreeing, disagreeing = (summarise_classes(m, classes, 3, cued) for m in (alike, maps))
    assert agreeing.hotspots[1].equal(disagreeing.hotspots[1])
    assert agreeing.groups[1][0].consistency > disagreeing.groups[1][0].consistency
    both = discover(StampModel(), images, classes, {"a": disagreeing, "b": agreeing}, patch_size=PATCH)
    alone = discover(StampModel(), images, classes, agreeing, patch_size=PATCH)
    assert both.tests[1][0].method == "b"  # the shared test, run once, at the higher suspicion either gives
    assert both.suspicion[1] == alone.suspicion[1] > discover(StampModel(), images, classes, disagreeing,
                                                               patch_size=PATCH).suspicion[1]  # fmt: skip
    other = summarise_classes(maps, classes, 3, DiscoverySettings(hotspot_share=0.2))
    with pytest.raises(ValueError, match="same settings"):
        discover(StampModel(), images, classes, {"a": right, "b": other}, patch_size=PATCH)


def test_at_the_first_look_the_region_goes_first_and_its_controls_only_when_it_could_fire():
    images, classes, maps = stamp_case()  # 24 recipients a class
    summary = summarise_classes(maps, classes, 3, DiscoverySettings())
    logits = StampModel()(images)
    model = CountingModel(StampModel())
    clean = hotspot_transplant(model, images, classes, summary.hotspots[0], 0, patch_size=PATCH, logits=logits,
                               first_look=8, futile_below=0.1)  # fmt: skip
    assert clean.stopped and clean.recipients == 8 and model.images == 8  # the region alone, on 8 recipients
    assert clean.flip_rate == 0.0 and math.isnan(clean.random_flip_rate) and math.isnan(clean.other_class_flip_rate)
    assert clean.excess == 0.0 and clean.flip_p_value == 1.0  # the most the excess can be; it claims nothing
    stamp = hotspot_transplant(model, images, classes, summary.hotspots[1], 1, patch_size=PATCH, logits=logits,
                               first_look=8, futile_below=0.1)  # fmt: skip
    full = hotspot_transplant(StampModel(), images, classes, summary.hotspots[1], 1, patch_size=PATCH, logits=logits)
    assert not stamp.stopped and stamp == full and model.images == 8 + 3 * 24  # the region could fire: all of it


@pytest.mark.parametrize("per_class", [MIN_TESTED_PROBES - 1, MIN_TESTED_PROBES])
def test_a_class_of_fewer_than_the_tested_minimum_is_scored_and_never_flagged(per_class):
    """The class-size rule every discovery test shares (the global properties' too: test_discovery_properties)."""
    images, classes, maps = stamp_case(per_class)
    settings = DiscoverySettings(alert_threshold=0.0, alpha=1.0)
    found = discover(StampModel(), images, classes, summarise_classes(maps, classes, 3, settings), patch_size=PATCH)
    stamp = found.transplants[1]
    assert stamp.flip_rate == 1.0 and found.suspicion[1] > 0.5  # scored
    assert math.isnan(stamp.p_value) == (per_class < MIN_TESTED_PROBES)
    assert bool(found.flagged[1]) == (per_class >= MIN_TESTED_PROBES)


def test_known_logits_skip_the_unchanged_forward_with_the_same_result():
    images, classes, maps = stamp_case()
    summary = summarise_classes(maps, classes, 3, DiscoverySettings())
    plain, given = CountingModel(StampModel()), CountingModel(StampModel())
    logits = StampModel()(images)
    for target in range(3):
        expected = hotspot_transplant(plain, images, classes, summary.hotspots[target], target, patch_size=PATCH)
        found = hotspot_transplant(
            given, images, classes, summary.hotspots[target], target, patch_size=PATCH, logits=logits
        )
        assert found == expected
    assert plain.images - given.images == 3 * 24  # the recipients' unchanged forward, per class
    with pytest.raises(ValueError, match="num_classes"):
        hotspot_transplant(given, images, classes, summary.hotspots[1], 1, patch_size=PATCH, logits=logits[:5])


def test_constancy_is_high_for_a_stamp_and_low_for_random_texture():
    images, classes, _ = stamp_case()
    corner = torch.zeros(SIDE * PATCH, SIDE * PATCH, dtype=torch.bool)
    corner[:PATCH, :PATCH] = True
    assert pixel_constancy(images, classes, 1, corner) == 1.0
    assert pixel_constancy(images, classes, 0, corner) < 0.1
    assert pixel_constancy(images, classes, 1, ~corner) < 0.1
    wider = torch.zeros_like(corner)
    wider[: 2 * PATCH, :PATCH] = True  # the stamp is half the region
    assert pixel_constancy(images, classes, 1, wider) == pytest.approx(0.5, abs=0.05)
    assert math.isnan(pixel_constancy(images[:13], classes[:13], 1, corner))  # one image of class 1
    two = constancy_test(images[:14], classes[:14], 1, corner)
    assert two[0] == 1.0 and math.isnan(two[1])  # two images: a constancy, no p-value
    assert pixel_constancy(torch.zeros(6, 1, 4, 4), torch.tensor([0, 0, 0, 1, 1, 1]), 0, corner[:4, :4]) == 0.0


def test_constancy_counts_a_stamp_on_part_of_a_group_and_fully_over_the_stamped_members():
    images, classes, _ = stamp_case()
    members = (classes == 1).nonzero()[:, 0]
    noise = torch.rand(5, 1, PATCH, PATCH, generator=torch.Generator().manual_seed(12), dtype=torch.float64)
    images[members[7:], :, :PATCH, :PATCH] = 0.275 + 0.45 * noise  # 7 of the 12 class-1 images keep the stamp
    corner = torch.zeros(SIDE * PATCH, SIDE * PATCH, dtype=torch.bool)
    corner[:PATCH, :PATCH] = True
    agreeing_pairs = 7 * 6 / (12 * 11)  # the stamped pairs: about the share squared, less chance (0.1 of pairs)
    assert pixel_constancy(images, classes, 1, corner) == pytest.approx(agreeing_pairs, abs=0.08)
    assert pixel_constancy(images, classes, 1, corner, members[:7]) == 1.0


def test_the_constancy_p_value_is_about_uniform_on_random_texture_and_tiny_for_a_stamp():
    generator = torch.Generator().manual_seed(11)
    classes = torch.arange(3).repeat_interleave(10)
    corner = torch.zeros(16, 16, dtype=torch.bool)
    corner[:PATCH, :PATCH] = True
    p_values = []
    for _ in range(40):
        images = torch.rand(30, 1, 16, 16, generator=generator, dtype=torch.float64)
        p_values += [constancy_test(images, classes, c, corner)[1] for c in range(3)]
    p = torch.tensor(p_values)
    assert not p.isnan().any()
    for level in (0.05, 0.2, 0.5):  # at most the level, within sampling error (120 values: sd <= 0.046)
        assert (p <= level).double().mean() <= level + 0.1
    assert (p <= 0.5).double().mean() >= 0.3  # not all near 1: it has power to spare
    images[classes == 2, :, :PATCH, :PATCH] = 0.5
    assert constancy_test(images, classes, 2, corner) == (1.0, 0.0)
    assert math.isnan(constancy_test(images, classes, 2, corner, torch.tensor([20, 21]))[1])  # 2 images: no p-value


def test_the_patch_agreements_give_every_region_and_group_the_same_pixel_test_as_its_pixels():
    generator = torch.Generator().manual_seed(3)
    classes = torch.arange(3).repeat_interleave(7)
    images = torch.rand(21, 3, 16, 16, generator=generator, dtype=torch.float64)
    images[classes == 1, :, :PATCH, :PATCH] = 0.5  # a stamp on class 1, at the corner
    agreements = PatchAgreements.of(images, classes, PATCH)
    for _ in range(12):
        region = torch.rand(SIDE, SIDE, generator=generator) < 0.3
        region[0, 0] = True
        pixels = region.repeat_interleave(PATCH, 0).repeat_interleave(PATCH, 1)
        for target, members in ((0, None), (1, None), (1, torch.tensor([7, 9, 11, 12])), (2, torch.tensor([14, 15]))):
            at_pixels = constancy_test(images, classes, target, pixels, members)
            summed = constancy_test(images, classes, target, pixels, members, agreements.region(region))
            assert summed == pytest.approx(at_pixels, nan_ok=True, rel=0, abs=0)
    corner = torch.zeros(SIDE, SIDE, dtype=torch.bool)
    corner[0, 0] = True
    assert constancy_test(images, classes, 1, corner.repeat_interleave(PATCH, 0).repeat_interleave(PATCH, 1),
                          counts=agreements.region(corner)) == (1.0, 0.0)  # fmt: skip


BAR = 0.05


class BarModel:
    """Class 1 iff a dark 1 x 3 px bar at row 0, columns 1-3 (across the boundary of patches (0, 0) and (0, 1))
    is whole; otherwise class 0 if the image is dark, else class 2."""

    def __call__(self, images: Tensor) -> Tensor:
        bar = (images[:, 0, 0, 1:4] == BAR).all(dim=1)
        dark = images[:, 0].mean(dim=(1, 2)) < 0.5
        scores = torch.stack([~bar & dark, bar, ~bar & ~dark], dim=1)
        return torch.where(scores, 10.0, -10.0).to(images.dtype)


def bar_case() -> tuple[Tensor, Tensor, Tensor]:
    """The bar on every class-1 image; class 1's maps put the most on patch (0, 0), less on (0, 1)."""
    images, classes, maps = stamp_case()
    noise = torch.rand(12, 1, 16, 16, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    images[classes == 1] = 0.275 + 0.45 * noise
    images[classes == 1, :, 0, 1:4] = BAR
    maps[classes == 1, 0, 0], maps[classes == 1, 0, 1] = 100.0, 60.0
    return images, classes, maps


def test_a_bar_across_a_patch_boundary_flips_with_the_grown_hotspot_and_not_with_half_of_it():
    images, classes, maps = bar_case()
    summary = summarise_classes(maps, classes, 3)
    assert summary.hotspots[1].nonzero().tolist() == [[0, 0]]  # one half of the bar
    found = discover(BarModel(), images, classes, summary, patch_size=PATCH)
    alone, grown = found.tests[1][:2]
    assert not alone.grown and alone.transplant.flip_rate == 0.0 and alone.suspicion == 0.0
    assert grown.grown and grown.box == (0, 0, 1, 2) and grown.transplant.flip_rate == 1.0
    assert grown.transplant.constancy == pytest.approx(3 / 8, abs=0.05)  # the bar is 3 of the region's 8 px
    assert found.reported[1] is grown and found.flagged.tolist() == [False, True, False]
    assert found.suspicion[1].item() == pytest.approx(
        suspicion_score(grown.transplant.excess, summary.concentration[1].item(), grown.transplant.constancy)
    )
    assert found.suspicion[1] > 0.5 and found.p_values[1] < 1e-4
    alone_only = summarise_classes(maps, classes, 3, DiscoverySettings(neighbour_relevance=None, top_patches=None))
    missed = discover(BarModel(), images, classes, alone_only, patch_size=PATCH)
    assert len(missed.tests[1]) == 1 and missed.suspicion[1] == 0.0 and not missed.flagged.any()


def test_the_grown_hotspot_takes_neighbours_as_relevant_as_the_setting_asks():
    mean_map = torch.zeros(4, 4, dtype=torch.float64)
    mean_map[1, 1], mean_map[1, 2], mean_map[2, 2], mean_map[3, 3] = 0.4, 0.3, 0.1, 0.2
    hotspot = mean_map == 0.4
    assert grown_hotspot(hotspot, mean_map, 0.5).nonzero().tolist() == [[1, 1], [1, 2]]
    assert grown_hotspot(hotspot, mean_map, 0.2).nonzero().tolist() == [[1, 1], [1, 2], [2, 2]]  # (3, 3) not touching
    assert grown_hotspot(hotspot, mean_map, 0.0).sum() == 9  # every neighbour
    assert not grown_hotspot(torch.zeros_like(hotspot), mean_map, 0.5).any()


def partial_stamp_case() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The stamp on 7 of the 12 class-1 images (58 %), whose maps put their mass on it; the other 5 class-1
    maps on patch (5, 5) (the object); and the stamped images' positions."""
    images, classes, maps = stamp_case()
    members = (classes == 1).nonzero()[:, 0]
    noise = torch.rand(5, 1, PATCH, PATCH, generator=torch.Generator().manual_seed(12), dtype=torch.float64)
    images[members[7:], :, :PATCH, :PATCH] = 0.275 + 0.45 * noise
    maps[members[7:], 0, 0] = 0.0
    maps[members[7:], 5, 5] = 100.0
    return images, classes, maps, members[:7]


def test_a_stamp_on_part_of_a_class_is_found_in_its_strategy_with_its_share():
    images, classes, maps, stamped = partial_stamp_case()
    summary = summarise_classes(maps, classes, 3, SHARED_PATCH)
    whole, *strategies, shared = summary.groups[1]
    assert whole.whole and whole.share == 1.0 and len(strategies) == 2
    assert torch.equal(strategies[0].members, stamped) and strategies[0].share == pytest.approx(7 / 12)
    assert shared.shared_patch == (5, 5) and torch.equal(shared.members, strategies[1].members)  # the object's
    found = discover(StampModel(), images, classes, summary, patch_size=PATCH)
    by_group = {(t.group.strategy, t.grown): t for t in found.tests[1] if t.group.shared_patch is None}
    class_test, strategy_test = by_group[(None, False)], by_group[(0, False)]
    assert class_test.transplant.flip_rate == pytest.approx(7 / 12, abs=0.05)  # donors in turn: 7 of 12 stamped
    assert strategy_test.transplant.flip_rate == 1.0 and strategy_test.transplant.constancy == 1.0
    assert strategy_test.suspicion > class_test.suspicion
    assert found.reported[1] is strategy_test and found.flagged.tolist() == [False, True, False]
    assert found.suspicion[1].item() == strategy_test.suspicion  # the class's value: the max over its groups
    assert by_group[(1, False)].transplant.flip_rate == 0.0  # the object's strategy flips nothing


def flat_corner_case(seed: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """32 images a class whose top-left patch is flat at one of 4 levels (a uniform part every class has: pairs agree
    there by chance 1 in 4), the stamp on 5 of class 1's first 8 and on about 80 % of its other 24; class 1's maps
    on that patch. Images, classes, maps and the positions of the probes: the first 8 of each class."""
    generator = torch.Generator().manual_seed(seed)
    per_class = 32
    images, classes, maps = stamp_case(per_class)
    level = torch.randint(4, (len(classes),), generator=generator).double() / 4
    images[:, :, :PATCH, :PATCH] = (0.1 + 0.7 * level)[:, None, None, None]
    members = (classes == 1).nonzero()[:, 0]
    stamped = torch.cat([members[[0, 2, 3, 5, 6]], members[8:][torch.rand(24, generator=generator) < 0.8]])
    images[stamped, :, :PATCH, :PATCH] = STAMP
    probes = (torch.arange(8)[None] + per_class * torch.arange(3)[:, None]).flatten()
    return images, classes, maps, probes


def test_a_stamp_on_5_of_a_class_s_8_probes_is_flagged_when_the_pixel_test_reads_32_images_a_class():
    """The probes' pairs are too few for a stamp on 5 of 8 to stand out from the flat part's chance agreement
    (the pixels' p-value 0.09-0.38, adjusted 0.18-0.77); 32 images a class make it plain (0.0001-0.009, adjusted
    0.010-0.018), and the flips, maps and other classes are the same. The copy test is off: it finds the stamp too,
    by its copies (below)."""
    flagged_alone = flagged_with_sample = 0
    for seed in range(6):
        images, classes, maps, probes = flat_corner_case(seed)
        summary = summarise_classes(maps[probes], classes[probes], 3, DiscoverySettings(copy_permutations=None))
        alone = discover(StampModel(), images[probes], classes[probes], summary, patch_size=PATCH)
        sampled = discover(StampModel(), images[probes], classes[probes], summary, patch_size=PATCH,
                           pixel_sample=PixelSample(images, classes))  # fmt: skip
        before, after = alone.reported[1], sampled.reported[1]
        assert after.transplant.flip_rate == before.transplant.flip_rate == pytest.approx(5 / 8, abs=0.1)
        assert after.transplant.constancy > before.transplant.constancy
        assert after.transplant.constancy_p_value < before.transplant.constancy_p_value
        assert not sampled.flagged[[0, 2]].any()
        flagged_alone += bool(alone.flagged[1])
        flagged_with_sample += bool(sampled.flagged[1])
    assert (flagged_alone, flagged_with_sample) == (0, 6)


def copy_case() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """32 images a class, the stamp on 5 of class 1's 8 probes (its first 8) and 60 % of its other 24; every
    class-1 map hottest on the object (patch (4, 4)) and the stamp's patch among the least relevant: no map points at
    it. Images, classes, the probes' maps and their positions."""
    generator = torch.Generator().manual_seed(21)
    images, classes, maps = stamp_case(32)
    members = (classes == 1).nonzero()[:, 0]
    unstamped = torch.cat([members[[1, 4, 7]], members[8:][torch.rand(24, generator=generator) >= 0.6]])
    noise = torch.rand(len(unstamped), 1, PATCH, PATCH, generator=generator, dtype=torch.float64)
    images[unstamped, :, :PATCH, :PATCH] = 0.275 + 0.45 * noise
    maps[members] = 1.0 + torch.rand(32, SIDE, SIDE, generator=generator, dtype=torch.float64)
    maps[members, 4, 4] = 100.0
    maps[members, 0, 0] = 0.0
    probes = (torch.arange(8)[None] + 32 * torch.arange(3)[:, None]).flatten()
    return images, classes, maps[probes], probes


def test_a_stamp_no_map_points_at_is_flagged_by_its_copy_group():
    images, classes, maps, probes = copy_case()
    summary = summarise_classes(maps, classes[probes], 3)
    sample = PixelSample(images, classes)
    found = discover(StampModel(), images[probes], classes[probes], summary, patch_size=PATCH, pixel_sample=sample)
    assert found.flagged.tolist() == [False, True, False]
    reported = found.reported[1]
    assert reported.group.copied and reported.method is None and reported.box == (0, 0, 1, 1)
    assert reported.group.members.tolist() == [8, 10, 11, 13, 14]  # the stamped probes
    assert reported.group.describe() == "the probes whose pixels at patch (0, 0) are copies (62% of them)"
    assert reported.transplant.flip_rate == 1.0 and reported.transplant.constancy == 1.0
    assert reported.transplant.constancy_p_value == sample.copied_patch(PATCH, 999, 0).p_value == 0.001
    assert found.summary_of(reported) is summary
    assert all(t.transplant.flip_rate == 0.0 for t in found.tests[1] if not t.group.copied)  # the maps' tests
    off = summarise_classes(maps, classes[probes], 3, DiscoverySettings(copy_permutations=None))
    without = discover(StampModel(), images[probes], classes[probes], off, patch_size=PATCH, pixel_sample=sample)
    assert not without.flagged.any()
    title, text = alert_text(found, 1, ["a", "b", "c"], (PATCH, PATCH), epoch=2)
    assert "the patch whose pixels they share" in text and "maps" not in text.split("px (of")[1].split(")")[0]


def test_the_probes_as_their_own_pixel_sample_give_the_same_discovery():
    images, classes, maps, _ = partial_stamp_case()  # a class test and its strategies' tests
    summary = summarise_classes(maps, classes, 3)
    alone = discover(StampModel(), images, classes, summary, patch_size=PATCH)
    sampled = discover(StampModel(), images, classes, summary, patch_size=PATCH,
                       pixel_sample=PixelSample(images, classes))  # fmt: skip
    pairs = zip((t for ts in alone.tests for t in ts), (t for ts in sampled.tests for t in ts), strict=True)
    for before, after in pairs:
        assert after.transplant == before.transplant and after.p_value == pytest.approx(before.p_value, nan_ok=True)


def test_a_stamp_second_in_a_third_of_a_class_s_maps_is_found_by_its_shared_patch_group():
    """Every class-1 map is hottest on the object (patch (4, 4)); the 4 of 12 probes that carry the stamp have it
    second. The class mean's hotspot and every strategy's are the object, which flips nothing; the shared-patch group
    (the maps with the stamp's patch among their 3 most relevant) is exactly the stamped probes, and flagged."""
    images, classes, maps = stamp_case()
    members = (classes == 1).nonzero()[:, 0]
    noise = torch.rand(8, 1, PATCH, PATCH, generator=torch.Generator().manual_seed(13), dtype=torch.float64)
    images[members[4:], :, :PATCH, :PATCH] = 0.275 + 0.45 * noise
    maps[members] = torch.rand(12, SIDE, SIDE, generator=torch.Generator().manual_seed(14), dtype=torch.float64)
    maps[members, 4, 4] = 100.0
    maps[members[:4], 0, 0] = 30.0
    summary = summarise_classes(maps, classes, 3, SHARED_PATCH)
    assert summary.hotspots[1].nonzero().tolist() == [[4, 4]]
    shared = summary.groups[1][-1]
    assert shared.shared_patch == (0, 0) and torch.equal(shared.members, members[:4])
    assert shared.share == pytest.approx(1 / 3)
    found = discover(StampModel(), images, classes, summary, patch_size=PATCH)
    reported = found.reported[1]
    assert reported.group is shared and reported.box == (0, 0, 1, 1) and found.flagged.tolist() == [False, True, False]
    assert reported.transplant.flip_rate == 1.0 and reported.transplant.constancy == 1.0
    assert all(t.transplant.flip_rate == 0.0 for t in found.tests[1] if t.group.shared_patch is None)
    without = summarise_classes(maps, classes, 3, DiscoverySettings(top_patches=None))
    assert not discover(StampModel(), images, classes, without, patch_size=PATCH).flagged.any()


def test_the_calibrated_test_raises_no_alarm_on_a_clean_rule_model_and_its_p_values_are_valid():
    class Brightness:
        """The class whose brightness is nearest the image's: no stamp, no place matters."""

        def __call__(self, images: Tensor) -> Tensor:
            centres = torch.tensor([0.225, 0.5, 0.775], dtype=images.dtype)
            return -40 * (images[:, 0].mean(dim=(1, 2))[:, None] - centres).abs()

    p_values, suspicion, flagged = [], [], 0
    for seed in range(12):
        generator = torch.Generator().manual_seed(100 + seed)
        classes = torch.arange(3).repeat_interleave(10)
        offsets = torch.tensor([0.0, 0.275, 0.55], dtype=torch.float64)[classes]
        images = offsets[:, None, None, None] + 0.45 * torch.rand(30, 1, 16, 16, generator=generator).double()
        maps = torch.rand(30, SIDE, SIDE, generator=generator, dtype=torch.float64)
        found = discover(Brightness(), images, classes, summarise_classes(maps, classes, 3), patch_size=PATCH)
        p_values += [t.p_value for tests in found.tests for t in tests if not math.isnan(t.p_value)]
        suspicion += found.suspicion.tolist()
        flagged += int(found.flagged.sum())
    p = torch.tensor(p_values)
    assert flagged == 0 and max(suspicion) < 0.05 and len(p) >= 60
    for level in (0.05, 0.25, 0.5):  # valid: at most the level (the max of three p-values is conservative)
        assert (p <= level).double().mean() <= level


def test_the_summary_groups_members_follow_the_positions_given():
    images, classes, maps = stamp_case()
    order = torch.randperm(36, generator=torch.Generator().manual_seed(9))
    shuffled = summarise_classes(maps[order], classes[order], 3, positions=order)
    direct = summarise_classes(maps, classes, 3)
    for mine, theirs in zip(shuffled.groups, direct.groups, strict=True):
        assert [torch.equal(a.members, b.members) for a, b in zip(mine, theirs, strict=True)] == [True] * len(mine)
    found = discover(StampModel(), images, classes, shuffled, patch_size=PATCH)
    assert torch.equal(found.suspicion, discover(StampModel(), images, classes, direct, patch_size=PATCH).suspicion)
    with pytest.raises(ValueError, match="positions must be a"):
        summarise_classes(maps, classes, 3, positions=torch.arange(5))
    with pytest.raises(ValueError, match="donors must be distinct positions of class-0 probes"):
        discover(StampModel(), images, classes, summarise_classes(maps, classes, 3, positions=order), patch_size=PATCH)


def test_the_transplant_is_undefined_without_donors_or_recipients():
    images, classes, _ = stamp_case(per_class=2)
    hotspot = torch.zeros(SIDE, SIDE, dtype=torch.bool)
    hotspot[0, 0] = True
    model = StampModel()
    for result in (
        hotspot_transplant(model, images[classes != 1], classes[classes != 1], hotspot, 1, patch_size=PATCH),
        hotspot_transplant(model, images[classes == 1], classes[classes == 1], hotspot, 1, patch_size=PATCH),
        hotspot_transplant(model, images, classes, torch.zeros_like(hotspot), 1, patch_size=PATCH),
    ):
        assert result.recipients == 0 and math.isnan(result.flip_rate) and math.isnan(result.excess)


def test_suspicion_is_nan_where_a_term_is_undefined_and_bounded_by_the_excess():
    maps, classes = stamped_maps(torch.Generator().manual_seed(7))
    summary = summarise_classes(maps, classes, 4, DiscoverySettings(consistency=True))  # class 3 has no maps
    scores = [
        suspicion_score(0.6, summary.concentration[c].item(), 1.0, summary.consistency[c].item()) for c in range(4)
    ]
    assert math.isnan(scores[3]) and all(0 <= s <= 0.6 + 1e-12 for s in scores[:3])
    assert scores[1] == pytest.approx(0.6 * (summary.concentration[1] * summary.consistency[1]).item() ** (1 / 3))
    assert suspicion_score(0.6, 0.5, 0.5) == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: summarise_classes(torch.ones(2, 3, 3, dtype=torch.long), torch.tensor([0, 1]), 2), TypeError, "float"),
        (lambda: summarise_classes(torch.ones(2, 9), torch.tensor([0, 1]), 2), ValueError, "shape"),
        (lambda: summarise_classes(torch.full((2, 3, 3), math.nan), torch.tensor([0, 1]), 2), ValueError, "NaN"),
        (lambda: summarise_classes(torch.ones(2, 3, 3), torch.tensor([0.0, 1.0]), 2), TypeError, "integer"),
        (lambda: summarise_classes(torch.ones(2, 3, 3), torch.tensor([0, 2]), 2), ValueError, r"\[0, 2\)"),
        (lambda: ClassMapSummary(2, (3, 3)).update(torch.ones(2, 4, 4), torch.tensor([0, 1])), ValueError, "3, 3"),
        (lambda: ClassMapSummary(0, (3, 3)), ValueError, "num_classes"),
        (lambda: ClassMapSummary(2.0, (3, 3)), TypeError, "num_classes"),
        (lambda: DiscoverySettings(hotspot_share=0.0), ValueError, "hotspot_share"),
        (lambda: DiscoverySettings(alert_threshold=1.5), ValueError, "alert_threshold"),
        (lambda: DiscoverySettings(neighbours=0), ValueError, "neighbours"),
        (lambda: DiscoverySettings(min_strategy_distance=0), ValueError, "min_strategy_distance"),
        (lambda: DiscoverySettings(neighbours=2.0), TypeError, "neighbours must be int"),
        (lambda: DiscoverySettings(seed=True), TypeError, "seed"),
        (lambda: DiscoverySettings(hotspot_share="0.5"), TypeError, "hotspot_share must be float"),
        (lambda: DiscoverySettings(alpha=0.0), ValueError, "alpha"),
        (lambda: DiscoverySettings(neighbour_relevance=1.5), ValueError, "neighbour_relevance"),
        (lambda: DiscoverySettings(neighbour_relevance="0.5"), TypeError, "neighbour_relevance"),
        (lambda: DiscoverySettings(top_patches=0), ValueError, "top_patches must be None or >= 1"),
        (lambda: DiscoverySettings(copy_permutations=0), ValueError, "copy_permutations must be None or >= 1"),
        (lambda: DiscoverySettings(copy_permutations=9.5), TypeError, "copy_permutations must be int"),
        (lambda: DiscoverySettings(top_patches=2.0), TypeError, "top_patches must be int"),
    ],
)
def test_bad_summary_input_is_a_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_a_bad_pixel_sample_is_a_clear_error():
    images, classes, maps = stamp_case(per_class=4)
    summary = summarise_classes(maps, classes, 3)
    with pytest.raises(ValueError, match=r"\(1, 8, 8\) on cpu, the probes' \(1, 16, 16\) on cpu"):
        discover(StampModel(), images, classes, summary, patch_size=PATCH,
                 pixel_sample=PixelSample(images[:, :, :8, :8], classes))  # fmt: skip
    with pytest.raises(ValueError, match=r"targets must be in \[0, 3\)"):
        discover(
            StampModel(), images, classes, summary, patch_size=PATCH, pixel_sample=PixelSample(images, classes + 1)
        )
    with pytest.raises(ValueError, match="targets"):
        PixelSample(images, classes[:5])


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"hotspot": torch.zeros(SIDE, SIDE)}, TypeError, "bool"),
        ({"hotspot": torch.zeros(SIDE, SIDE - 1, dtype=torch.bool)}, ValueError, "covers"),
        ({"hotspot": torch.zeros(1, SIDE, SIDE, dtype=torch.bool)}, ValueError, r"\(h, w\)"),
        ({"patch_size": 2.0}, TypeError, "patch_size"),
        ({"patch_size": (0, 2)}, ValueError, "positive"),
        ({"target": 1.0}, TypeError, "target"),
        ({"target": -1}, ValueError, "target"),
        ({"activation": "relu"}, ValueError, "activation"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"images": torch.zeros(4, 16, 16)}, ValueError, "shape"),
        ({"classes": torch.zeros(3, dtype=torch.long)}, ValueError, "targets"),
        ({"donors": torch.tensor([0])}, ValueError, "donors"),
        ({"donors": torch.tensor([2, 2])}, ValueError, "distinct"),
        ({"donors": torch.tensor([2.0])}, TypeError, "donors"),
    ],
)
def test_bad_transplant_input_is_a_clear_error(change, error, match):
    images, classes, _ = stamp_case(per_class=2)
    hotspot = torch.zeros(SIDE, SIDE, dtype=torch.bool)
    hotspot[0, 0] = True
    arguments = {"images": images, "classes": classes, "hotspot": hotspot, "target": 1, "patch_size": PATCH, **change}
    with pytest.raises(error, match=match):
        hotspot_transplant(StampModel(), **arguments)


def test_a_model_without_the_class_logits_is_a_clear_error():
    images, classes, _ = stamp_case(per_class=2)
    hotspot = torch.zeros(SIDE, SIDE, dtype=torch.bool)
    hotspot[0, 0] = True
    with pytest.raises(ValueError, match="logits"):
        hotspot_transplant(lambda x: x.mean(dim=(1, 2, 3)), images, classes, hotspot, 1, patch_size=PATCH)
    with pytest.raises(ValueError, match=r"targets must be in \[0, 3\)"):  # class 5 has probes but no logit
        hotspot_transplant(StampModel(), images, torch.where(classes == 1, 5, classes), hotspot, 5, patch_size=PATCH)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_two_process_gloo_sync_equals_one_process_on_the_union(tmp_path):
    out = tmp_path / "discovery_ddp.json"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tests.shortcuts.discovery_ddp_worker", str(out), str(_free_port())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    synced = json.loads(out.read_text())
    assert synced.pop("world_size") == 2 and synced.pop("rank0_maps") == 8
    first, second = synced.pop("properties_per_rank")  # the global property transplants: the same on every rank
    assert first == second == json.loads(json.dumps(property_values()))  # and in one process
    assert first["colour"][2][0] == 1.0 and first["colour"][3][2] >= 0.5  # class 2's colour flips, and is flagged
    maps, classes = ddp_maps()
    summary = summarise_classes(maps, classes, NUM_CLASSES, SETTINGS)
    found = discover(stamp_model, ddp_images(), classes, summary, patch_size=2)
    single = {**summary_values(summary), **discovery_values(found)}
    assert single["flagged"] == [0.0, 1.0, 0.0, 0.0] and len(single["tests"]) > NUM_CLASSES  # strategies tested too
    assert synced.keys() == single.keys()
    assert synced.pop("members") == single.pop("members")  # every group's probes, in probe order
    for key, value in single.items():
        assert torch.allclose(torch.tensor(synced[key]), torch.tensor(value), atol=1e-9, equal_nan=True), key
    assert single["strategy_sizes_0"] == [4, 3]  # two strategies in class 0, found across the two ranks
    half = summary_values(summarise_classes(maps[0::2], classes[0::2], NUM_CLASSES, SETTINGS))
    assert half["counts"] != single["counts"]
