"""The discovery stage's cost: one forward per distinct image changes nothing it finds (a real timm ViT); the hotspot
tests that cannot fire are not forwarded while no test can, and the others stop at their first look when they
cannot reach half the floor, with the same flags;
and why the separability does not decide which (class, property) pairs are tested (it misses a cast on half a
class)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import timm
import torch
from torch import Tensor

from gradskip_lightning import Normalisation
from gradskip_lightning.metrics import CountingModel
from gradskip_lightning.shortcuts import DiscoverySettings, summarise_classes
from gradskip_lightning.shortcuts.discovery import ShortcutTest, discover
from gradskip_lightning.shortcuts.discovery_properties import discover_properties
from gradskip_lightning.shortcuts.discovery_transplant import FIRST_LOOK
from gradskip_lightning.shortcuts.distinct_forward import DistinctForward
from gradskip_lightning.shortcuts.image_properties import PROPERTIES, PixelSpace
from gradskip_lightning.shortcuts.probe_transfers import separability
from tests.shortcuts.test_discovery import PATCH, SIDE, StampModel, partial_stamp_case, stamp_case
from tests.shortcuts.test_discovery_properties import MEAN, STD, cast_case


def _tiny_vit() -> torch.nn.Module:
    torch.manual_seed(0)
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2,
        num_classes=3,
    )  # fmt: skip
    return model.eval()


def _hotspot_fields(found) -> list[tuple]:
    return [
        (t.group.label, t.group.strategy, t.grown, t.region.tolist(), t.transplant, t.suspicion, t.p_value)
        for tests in found.tests
        for t in tests
    ]


def test_one_forward_per_distinct_image_finds_the_same_as_every_forward():
    """Hotspot and property tests through one DistinctForward (as the stage runs them) give the same rates,
    p-values and flags as the model itself, with fewer images forwarded (the probes once, not twice)."""
    images, classes = cast_case()
    maps = torch.rand(len(images), 4, 4, generator=torch.Generator().manual_seed(1))
    maps[classes == 2, 0, 0] += 3.0  # class 2's hotspot in a corner: its grown hotspot differs
    summary = summarise_classes(maps, classes, 3)
    model, space = _tiny_vit(), PixelSpace.of(images, Normalisation(MEAN, STD))

    def run(forward) -> tuple:
        with torch.no_grad():
            found = discover(forward, images, classes, summary, patch_size=4, batch_size=16)
            properties = discover_properties(forward, images, classes, 3, space=space, alert_threshold=0.3,
                                             batch_size=16)  # fmt: skip
        return found, properties

    counted = CountingModel(model)
    plain = run(counted)
    distinct = DistinctForward(CountingModel(model))
    reused = run(distinct)
    assert _hotspot_fields(reused[0]) == _hotspot_fields(plain[0])
    assert torch.equal(reused[0].flagged, plain[0].flagged) and torch.equal(reused[0].suspicion, plain[0].suspicion)
    assert reused[1].transfers == plain[1].transfers
    for name in plain[1].p_value:
        assert torch.equal(reused[1].p_value[name], plain[1].p_value[name]), name
    assert distinct.forwarded <= counted.images - len(images)  # at least the probes' second forward saved


def test_a_model_whose_output_is_not_logits_is_named_through_the_wrapper():
    forward = DistinctForward(lambda x: x.sum())
    with pytest.raises(ValueError, match="logits"):
        forward(torch.zeros(2, 3, 4, 4))


def _half_cast(seed: int, share: float) -> tuple[Tensor, Tensor]:
    """Pixels (24, 3, 16, 16) of 3 classes of 8 textured grey probes with a red cast on ``share`` of class 2's."""
    generator = torch.Generator().manual_seed(seed)
    classes = torch.arange(3).repeat_interleave(8)
    pixels = 0.3 + 0.3 * torch.rand(24, 3, 16, 16, generator=generator, dtype=torch.float64)
    cast = (classes == 2).nonzero()[:, 0][: round(share * 8)]
    pixels[cast, 0] += 0.12
    pixels[cast, 2] -= 0.12
    return pixels, classes


def test_the_separability_misses_a_cast_on_half_of_a_class_so_it_cannot_decide_which_pairs_are_tested():
    """A cast on every probe of a class separates it (AUROC 1); on half of them the class's mean lies between its
    two halves and the AUROC of the distance to it falls far below one half on some draws: a rule skipping the
    (class, property) pairs of low separability would skip this real cast, so the stage tests every pair."""
    whole = [separability(PROPERTIES["colour"].statistic(p), c, 2) for p, c in (_half_cast(s, 1.0) for s in range(20))]
    half = [separability(PROPERTIES["colour"].statistic(p), c, 2) for p, c in (_half_cast(s, 0.5) for s in range(20))]
    assert min(whole) == 1.0 and min(half) < 0.5, (min(whole), min(half))


def _same_transplant(a, b) -> bool:
    return all(
        x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
        for x, y in zip(dataclasses.astuple(a), dataclasses.astuple(b), strict=True)
    )


def _stopped_early(lazy: ShortcutTest, full: ShortcutTest, floor: float) -> bool:
    """Whether ``lazy`` is ``full`` stopped at the first look: its first recipients, under half the floor, where
    measuring every one stayed under the floor too."""
    first = lazy.transplant
    return (
        first.recipients == FIRST_LOOK < full.transplant.recipients
        and lazy.suspicion < floor / 2 > 0
        and (full.suspicion < floor and first.flip_p_value == 1.0)
    )


def test_with_a_test_at_the_floor_every_test_is_measured_each_in_full_or_stopped_at_its_first_look():
    images, classes, maps, _ = partial_stamp_case()
    summary = summarise_classes(maps, classes, 3)
    floor = summary.settings.alert_threshold
    full = discover(StampModel(), images, classes, summary, patch_size=PATCH)
    lazy = discover(CountingModel(StampModel()), images, classes, summary, patch_size=PATCH, measure_all=False)
    assert full.flagged.tolist() == lazy.flagged.tolist() == [False, True, False]
    assert all(t.transplant.measured for tests in lazy.tests for t in tests)
    stopped = 0
    for cheap, test in zip(_tests(lazy), _tests(full), strict=True):
        if cheap.transplant.recipients == test.transplant.recipients:
            assert _same_transplant(cheap.transplant, test.transplant) and cheap.suspicion == test.suspicion
        else:
            stopped += 1
            assert _stopped_early(cheap, test, floor)
    fired = lazy.reported[1]
    assert fired.transplant.recipients == full.reported[1].transplant.recipients > FIRST_LOOK  # measured in full
    assert stopped >= 1
    with pytest.raises(ValueError, match="first_look must be a number of recipients >= 1 or None, got 0"):
        discover(StampModel(), images, classes, summary, patch_size=PATCH, measure_all=False, first_look=0)


def _tests(found) -> list[ShortcutTest]:
    return [t for tests in found.tests for t in tests]


def _clean_case(seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """30 images of random texture whose class is their brightness (no place matters), random maps."""
    generator = torch.Generator().manual_seed(100 + seed)
    classes = torch.arange(3).repeat_interleave(10)
    offsets = torch.tensor([0.0, 0.275, 0.55], dtype=torch.float64)[classes]
    images = offsets[:, None, None, None] + 0.45 * torch.rand(30, 1, 16, 16, generator=generator).double()
    return images, classes, torch.rand(30, 8, 8, generator=generator, dtype=torch.float64)


class _Brightness:
    """The class whose brightness is nearest the image's."""

    def __call__(self, images: Tensor) -> Tensor:
        centres = torch.tensor([0.225, 0.5, 0.775], dtype=images.dtype)
        return -40 * (images[:, 0].mean(dim=(1, 2))[:, None] - centres).abs()


def test_while_no_test_reaches_the_floor_the_tests_that_cannot_fire_are_not_forwarded_and_nothing_found_changes():
    """On a clean model: the same flags as the full run; a test left unmeasured has map and pixel cues of 0
    (suspicion 0 whatever its flips), NaN rates and a flips' p-value of 1; the measured ones are the full run's
    (their adjusted p-values at least the full run's) or stopped at their first look under half the floor; fewer
    images forwarded."""
    unmeasured = stopped = 0
    for seed in range(3):
        images, classes, maps = _clean_case(seed)
        summary = summarise_classes(maps, classes, 3)
        every, counted = CountingModel(_Brightness()), CountingModel(_Brightness())
        full = discover(every, images, classes, summary, patch_size=PATCH)
        lazy = discover(counted, images, classes, summary, patch_size=PATCH, measure_all=False)
        floor = summary.settings.alert_threshold
        assert not full.flagged.any() and torch.equal(lazy.flagged, full.flagged)
        for tests, cheap in zip(full.tests, lazy.tests, strict=True):
            for test, other in zip(tests, cheap, strict=True):
                assert torch.equal(test.region, other.region)
                if _stopped_early(other, test, floor):
                    stopped += 1
                    continue
                assert test.suspicion == other.suspicion or math.isnan(test.suspicion)
                if other.transplant.measured:
                    assert _same_transplant(other.transplant, test.transplant)
                    assert other.p_value >= test.p_value or math.isnan(test.p_value)
                else:
                    unmeasured += 1
                    assert test.transplant.constancy * test.group.concentration == 0 and test.suspicion == 0.0
                    lost = other.transplant
                    assert math.isnan(lost.flip_rate) and math.isnan(lost.random_flip_rate) and lost.flip_p_value == 1
                    assert lost.recipients == test.transplant.recipients
                    assert lost.constancy_p_value == test.transplant.constancy_p_value
        assert counted.images < every.images
    assert unmeasured >= 3 and stopped >= 1


class _Corner:
    """The class whose brightness is nearest the top-left 2 x 2 pixels': pasting that corner carries the class (a
    real feature of every class, whose random-texture pixels agree only by chance)."""

    def __call__(self, images: Tensor) -> Tensor:
        centres = torch.tensor([0.225, 0.5, 0.775], dtype=images.dtype)
        return -40 * (images[:, 0, :2, :2].mean(dim=(1, 2))[:, None] - centres).abs()


def test_a_test_at_the_floor_that_cannot_pass_its_p_values_leaves_the_others_unmeasured():
    """The corner flips every recipient, so its tests' suspicion can reach the floor from the pixels' chance
    agreement, but their pixels' p-values (0.08-0.47) are over alpha / 2, which the adjustment at least doubles:
    no test can fire, the tests whose cues are 0 stay unmeasured, and the flags are the full run's."""
    reached = 0
    for seed in range(4):
        images, classes, maps = _clean_case(seed)
        maps[:, 0, 0] = 5.0  # every class's hotspot: the corner
        summary = summarise_classes(maps, classes, 3)
        full = discover(_Corner(), images, classes, summary, patch_size=PATCH)
        lazy = discover(_Corner(), images, classes, summary, patch_size=PATCH, measure_all=False)
        assert torch.equal(lazy.flagged, full.flagged) and not lazy.flagged.any()
        tests = _tests(lazy)
        at_floor = [t for t in tests if t.suspicion >= summary.settings.alert_threshold]
        assert all(t.transplant.flip_p_value < 1e-5 < 0.025 < t.transplant.constancy_p_value for t in at_floor)
        assert not all(t.transplant.measured for t in tests)
        reached += len(at_floor)
    assert reached >= 2


def test_a_shared_patch_group_whose_pixels_cannot_pass_is_not_forwarded():
    """4 of class 1's 12 maps have the corner second (after the object), but no stamp is there: the shared-patch
    group's pixels agree by chance only (p-value over alpha / 2), so without a test that could fire it is left
    unmeasured (suspicion NaN, no forward), with the full run's flags; with the stamp on those 4 it is measured."""
    images, classes, maps = stamp_case()
    members = (classes == 1).nonzero()[:, 0]
    maps[members] = torch.rand(12, SIDE, SIDE, generator=torch.Generator().manual_seed(14), dtype=torch.float64)
    maps[members, 4, 4] = 100.0
    maps[members[:4], 0, 0] = 30.0
    stamped = images.clone()
    noise = torch.rand(12, 1, PATCH, PATCH, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    images[members, :, :PATCH, :PATCH] = 0.275 + 0.45 * noise  # no stamp: the 4's corners agree by chance (0.16)
    stamped[members[4:], :, :PATCH, :PATCH] = images[members[4:], :, :PATCH, :PATCH]  # the stamp on the 4
    summary = summarise_classes(maps, classes, 3, DiscoverySettings(top_patches=3))  # the groups on
    lazy = discover(StampModel(), images, classes, summary, patch_size=PATCH, measure_all=False)
    full = discover(StampModel(), images, classes, summary, patch_size=PATCH)
    (shared,) = [t for t in lazy.tests[1] if t.group.shared_patch is not None]
    assert shared.transplant.constancy_p_value > 0.025 and shared.transplant.constancy > 0
    assert not shared.transplant.measured and math.isnan(shared.suspicion)
    assert torch.equal(lazy.flagged, full.flagged) and not lazy.flagged.any()
    found = discover(StampModel(), stamped, classes, summary, patch_size=PATCH, measure_all=False)
    (shared,) = [t for t in found.tests[1] if t.group.shared_patch is not None]
    assert shared.transplant.measured and shared.transplant.flip_rate == 1.0 and found.flagged.tolist()[1]


def test_at_a_floor_of_zero_every_test_is_measured():
    images, classes, maps = _clean_case(0)
    settings = DiscoverySettings(alert_threshold=0.0)
    summary = summarise_classes(maps, classes, 3, settings)
    lazy = discover(_Brightness(), images, classes, summary, patch_size=PATCH, measure_all=False)
    assert all(t.transplant.measured for tests in lazy.tests for t in tests)
