"""Known answers of the shortcut discovery: planted stamps, one or two strategies, a stamp-reading model."""

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

from gradskip_lightning.metrics import ClassMapSummary, CountingModel, DiscoverySettings, discover, summarise_classes
from gradskip_lightning.metrics.discovery import suspicion_scores
from gradskip_lightning.metrics.discovery_maps import consistency, hotspots, normalise_maps
from gradskip_lightning.metrics.discovery_strategies import find_strategies
from gradskip_lightning.metrics.discovery_transplant import HotspotTransplant, hotspot_transplant, pixel_constancy

from .discovery_ddp_worker import NUM_CLASSES, SETTINGS, ddp_maps, property_values, summary_values

ROOT = Path(__file__).resolve().parents[2]
STAMP = 0.9
PATCH = 2
SIDE = 8  # patches per side: 16 x 16 px images


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
    cues = summary.concentration[1] * stamp.constancy * summary.consistency[1].clamp(min=0)
    assert found.suspicion[1].item() == pytest.approx(stamp.excess * cues.item() ** (1 / 3))
    assert found.flagged.tolist() == [False, True, False]  # the default alert threshold
    for clean in (found.transplants[0], found.transplants[2]):
        assert clean.constancy < 0.3 and clean.excess < 0.1
    assert found.suspicion[[0, 2]].max() < 0.05
    # the 36 probes unchanged once for every class, then per class 3 pasted copies of its 24 recipients, in chunks of 7
    assert model.calls == math.ceil(36 / 7) + 3 * math.ceil(3 * 24 / 7) and model.images == 36 + 3 * (3 * 24)


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
    assert pixel_constancy(images, classes, 0, corner) < 0.3
    assert pixel_constancy(images, classes, 1, ~corner) < 0.3
    assert math.isnan(pixel_constancy(images[:13], classes[:13], 1, corner))  # one image of class 1
    assert pixel_constancy(torch.zeros(4, 1, 4, 4), torch.tensor([0, 0, 1, 1]), 0, corner[:4, :4]) == 0.0


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
    transplants = tuple(HotspotTransplant(c, 5, 0.8, 0.1, 0.2, 1.0) for c in range(4))
    scores = suspicion_scores(summary, transplants)
    assert scores[3].isnan() and (scores[:3] <= 0.6 + 1e-12).all() and (scores[:3] >= 0).all()
    assert scores[1] == pytest.approx(0.6 * (summary.concentration[1] * summary.consistency[1]).item() ** (1 / 3))
    with pytest.raises(ValueError, match="one per class"):
        suspicion_scores(summary, transplants[::-1])


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
    ],
)
def test_bad_summary_input_is_a_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call()


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
        [sys.executable, "-m", "tests.metrics.discovery_ddp_worker", str(out), str(_free_port())],
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
    single = summary_values(summarise_classes(maps, classes, NUM_CLASSES, SETTINGS))
    assert synced.keys() == single.keys()
    for key, value in single.items():
        assert torch.allclose(torch.tensor(synced[key]), torch.tensor(value), atol=1e-9, equal_nan=True), key
    assert single["strategy_sizes_0"] == [4, 3]  # two strategies in class 0, found across the two ranks
    half = summary_values(summarise_classes(maps[0::2], classes[0::2], NUM_CLASSES, SETTINGS))
    assert half["counts"] != single["counts"]
