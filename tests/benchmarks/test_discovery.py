"""The discovery subcommand's scores on hand-made records (of the maps and of the global properties), its report
rebuilt from them, and its property records against the discovery stage's logged values."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from lightning.pytorch import Callback

from benchmarks.discovery.cli import EpochWeights
from benchmarks.discovery.property_report import class_epoch_table, false_alarm_table, learned_table, shortcut_table
from benchmarks.discovery.report import markdown
from benchmarks.discovery.scoring import FORMULAS, pair_wins, score, seed_rows
from benchmarks.discovery.trace import (
    UNION,
    ClassRecord,
    DiscoveryTrace,
    PropertyRecord,
    Subject,
    discovery_probes,
    property_records,
    token_map_fn,
)
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.engine.discovery.properties import property_scalars
from gradskip_lightning.engine.discovery.stage import DISCOVERY_METHODS
from gradskip_lightning.shortcuts import DiscoverySettings, PixelSample, discover, summarise_classes
from gradskip_lightning.shortcuts.discovery_properties import discover_properties
from gradskip_lightning.shortcuts.image_properties import PixelSpace
from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer

BASE = ClassRecord(
    dataset="d", seed=0, variant="clean", shortcut="none", target=-1, method="m", share=0.1, epoch=1.0, label=0,
    probes=8, flip_rate=0.1, random_flip_rate=0.1, other_class_flip_rate=0.0, constancy=0.0, concentration=0.5,
    consistency=0.2, strategies=1, box=(0, 0, 4, 4), stamp=None, iou=math.nan, hit=math.nan, spurious_score=math.nan,
)  # fmt: skip


def records() -> list[ClassRecord]:
    """Two seeds: a stamped model (class 1 found at epoch 2) and a clean model of 2 classes each."""
    found = []
    for seed in (0, 1):
        for label in (0, 1):
            found.append(replace(BASE, seed=seed, label=label))
        for epoch, flip in ((1.0, 0.1), (2.0, 0.9)):
            stamped = replace(BASE, seed=seed, variant="stamped", target=1, epoch=epoch, stamp=(0, 0, 4, 4))
            found.append(replace(stamped, label=0))
            found.append(replace(stamped, label=1, flip_rate=flip, constancy=1.0, iou=0.5, hit=1.0, spurious_score=0.9,
                                 p_value=1e-3))  # fmt: skip
    return found


def test_the_suspicion_formulas():
    stamp = replace(BASE, flip_rate=0.9, constancy=1.0)
    assert FORMULAS["excess"](stamp) == pytest.approx(0.8)
    assert FORMULAS["no_consistency"](stamp) == pytest.approx(0.8 * 0.5**0.5)
    assert FORMULAS["full"](stamp) == pytest.approx(0.8 * 0.1 ** (1 / 3))
    assert math.isnan(FORMULAS["full"](replace(stamp, flip_rate=math.nan)))


def test_pair_wins_and_seed_rows():
    assert pair_wins(math.nan, [0.0, math.nan]) == [0.5, 0.5]
    assert seed_rows([]).numel() == 0 and seed_rows([(3, [1.0, 2.0])]).shape == (1, 2)


def test_a_stamp_found_only_by_the_last_epoch_scores_as_such():
    result = score(records(), "d", "m", 0.1, "no_consistency", threshold=0.15)
    assert result.auroc.mean == 1.0 and result.detection.mean == 1.0 and result.false_alarms.mean == 0.0
    assert result.iou.mean == 0.5 and result.hit.mean == 1.0
    assert result.first_fire == (2.0, 2.0) and result.spurious_epoch == (1.0, 1.0)
    assert result.held == ((1, 2), (1, 2))  # learned (spurious 0.9) from epoch 1, flagged at epoch 2 only
    unlearned = [replace(r, spurious_score=0.2) if r.epoch == 1.0 else r for r in records()]
    assert score(unlearned, "d", "m", 0.1, "no_consistency", threshold=0.15).held == ((1, 1), (1, 1))
    text = markdown(records(), share=0.1, formula="no_consistency", threshold=0.15, alpha=0.05, command="c", facts={})
    assert "| m | 1.00 | 0.50 | 1.00 | 1.00 | 0.00 |" in text


def test_a_corrected_model_gets_its_row_and_leaves_the_discovery_scores_alone():
    corrected = [
        replace(BASE, seed=0, variant="corrected", target=1, label=1, epoch=epoch, spurious_score=score,
                clean_accuracy=0.97, corrected="class 1 at (0, 0)-(4, 4) from epoch 1", shortcut="4 px, corrected")
        for epoch, score in ((1.0, 0.9), (2.0, 0.05))
    ]  # fmt: skip
    stamped = [replace(r, clean_accuracy=0.9) for r in records()]
    before = score(stamped, "d", "m", 0.1, "no_consistency", threshold=0.15)
    assert score(stamped + corrected, "d", "m", 0.1, "no_consistency", threshold=0.15) == before
    table = dict(share=0.1, formula="no_consistency", threshold=0.15, alpha=0.05, command="c", facts={})
    text = markdown(stamped + corrected, **table)
    cells = "| 0 | 4 px, corrected | 0.90 | 0.05 | 0.90 | 0.97 | 1: 0.90, 2: 0.05 |"
    assert f"{cells} class 1 at (0, 0)-(4, 4) from epoch 1 |" in text
    assert "Unlearning the stamp" not in markdown(stamped, **table)


def test_the_calibrated_test_flags_only_with_a_p_value_at_most_alpha():
    assert score(records(), "d", "m", 0.1, "no_consistency", threshold=0.15, alpha=0.05).detection.mean == 1.0
    assert score(records(), "d", "m", 0.1, "no_consistency", threshold=0.15, alpha=1e-4).detection.mean == 0.0
    late = [replace(r, p_value=0.5) if r.epoch == 1.0 else r for r in records()]
    assert score(late, "d", "m", 0.1, "no_consistency", threshold=0.0, alpha=0.05).first_fire == (2.0, 2.0)
    clean = score(records(), "d", "m", 0.1, "no_consistency", threshold=0.0, alpha=0.05)
    assert clean.false_alarms.mean == 0.0 and math.isnan(clean.min_clean_p)  # clean classes without a p-value


def test_the_partial_and_bar_variants_get_their_own_rows():
    partial = [replace(r, variant="partial", tested_share=0.6) for r in records() if r.variant == "stamped"]
    text = markdown(records() + partial, share=0.1, formula="no_consistency", threshold=0.15, alpha=0.05,
                    command="c", facts={})  # fmt: skip
    assert "| partial | m | 1.00 | 2, 2 |" in text and "| 0.60 |" in text and "| 1/2, 1/2 |" in text


PROPERTY = PropertyRecord(
    dataset="d", seed=0, variant="clean", shortcut_property="", target=-1, spurious_score=math.nan, accuracy=1.0,
    property="colour", label=0, recipients=8, flip_rate=0.0, control_flip_rate=0.0, separability=0.5, seconds=0.1,
    epoch=1.0, suspicion=0.0,
)  # fmt: skip


def property_traces() -> list[PropertyRecord]:
    """Two epochs of colour and brightness, 2 classes: cast models (seeds 0, 1) whose class 1 is flagged for colour
    from epoch 2 and 1, one other class flagged at the end of seed 1; clean models (seeds 0, 1) with one class
    flagged for colour at epoch 1 only; a dim control (seed 0) with nothing flagged."""
    found = []
    for epoch in (1.0, 2.0):
        for seed in (0, 1):
            for label in (0, 1):
                for name in ("colour", "brightness"):
                    at = replace(PROPERTY, seed=seed, label=label, property=name, epoch=epoch)
                    first = seed == 0 and label == 0 and name == "colour" and epoch == 1.0
                    found.append(replace(at, suspicion=0.5, flagged=True) if first else at)
                    if seed == 0:  # class 1's brightness over the floor at epoch 2, its p-value too large
                        loud = (label, name, epoch) == (1, "brightness", 2.0)
                        found.append(replace(at, variant="dim_control", shortcut_property="brightness",
                                             suspicion=0.45 if loud else at.suspicion))  # fmt: skip
                    cast = replace(
                        at, variant="cast", shortcut_property="colour", target=1, spurious_score=0.5 + epoch / 4
                    )
                    if label == 1 and name == "colour":
                        value = {(0, 1.0): 0.2, (0, 2.0): 0.9, (1, 1.0): 0.8, (1, 2.0): 1.0}[(seed, epoch)]
                        cast = replace(cast, suspicion=value, flagged=value >= 0.4, spurious_score=value)
                    elif seed == 1 and epoch == 2.0 and (label, name) == (0, "brightness"):
                        cast = replace(cast, suspicion=0.45, flagged=True)
                    found.append(cast)
    return found


def test_a_global_shortcut_is_detected_per_seed_with_its_first_fire_and_other_flags():
    rows = shortcut_table(property_traces(), "d")
    row = next(r for r in rows if r.startswith("| cast |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:6] == ["cast", "colour cast (0.12, 0, -0.12)", "colour", "1.00", "2/2", "2, 1"]
    assert cells[6].startswith("0.95 [0.90, 1.00]") and cells[8] == "0.90, 1.00"
    assert cells[9] == "1/6 (s1 c0 brightness)"
    assert shortcut_table([r for r in property_traces() if r.variant != "cast"], "d") == []


def test_a_global_shortcut_is_scored_at_every_epoch_end_its_model_relies_on_it():
    row = next(r for r in learned_table(property_traces(), "d") if r.startswith("| cast |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # seed 0 learned it at epoch 2 only (0.2, then 0.9); seed 1 at both; flagged at all 3; seed 1's class 0 at epoch 2
    assert cells[2:] == ["s0: 1/2, s1: 2/2", "3/3", "1.00", "colour 3", "1/3"]
    assert learned_table([r for r in property_traces() if r.variant != "cast"], "d") == []


def test_clean_and_control_class_epochs_flagged_for_any_property_are_counted_against_the_bar():
    text = "\n".join(class_epoch_table(property_traces(), "d"))
    assert "| all | 1/12 | 0.08 [0.00, 0.27] | no |" in text  # clean seed 0's class 0 at epoch 1
    assert "| clean | 1/8 |" in text and "| dim_control | 0/4 | 0.00 | yes |" in text
    assert "cast" not in text


def test_false_alarms_count_classes_flagged_at_the_last_epoch_and_at_any_epoch_against_the_bar():
    text = "\n".join(false_alarm_table(property_traces(), "d"))
    row = "| colour | clean, dim_control | 2 x 2 | 0.00 | 0.17 (1/6) | no | 0.17 (1/6) | 0.50 (clean s0 c0, epoch 1) |"
    assert row in text
    assert "| colour | clean | 2 x 1 | 0.00 | 0.25 (1/4) | no | 0.25 (1/4) |" in text
    assert "| colour | dim_control | 1 x 1 | 0.00 | 0.00 (0/2) | yes | 0.00 (0/2) |" in text
    # the floor alone would have flagged the control's class 1 at epoch 2; its p-value did not
    assert "| brightness | clean, dim_control | 2 x 2 | 0.00 | 0.00 (0/6) | yes | 0.17 (1/6) |" in text
    assert "cast" not in text  # a model with a shortcut on one class is no negative


def test_the_report_adds_the_global_property_tables_and_a_run_of_properties_alone_has_them_only():
    table = dict(share=0.1, formula="no_consistency", threshold=0.15, alpha=0.05, command="c", facts={})
    text = markdown(records(), property_traces(), **table)
    assert "Global shortcuts on one class" in text and "| m | 1.00 | 0.50 | 1.00 | 1.00 | 0.00 |" in text
    alone = markdown([], property_traces(), **table)
    assert "### d" in alone and "Global properties: false alarms" in alone and "Per method" not in alone
    assert "Global" not in markdown(records(), **table)


def test_the_trace_records_the_values_the_discovery_stage_logs():
    def model(x):  # class 1 iff red exceeds blue by 0.15 on average
        red = (x[:, 0] - x[:, 2]).mean(dim=(1, 2)) - 0.15
        return torch.stack([-red, red], dim=1)

    images = 0.2 + 0.5 * torch.rand(16, 3, 6, 6, generator=torch.Generator().manual_seed(0))
    images[8:, 0] += 0.4
    pixels = Normalisation(mean=(0.0,), std=(1.0,))  # the images are pixels
    found = discover_properties(model, images, torch.tensor([0] * 8 + [1] * 8), 2, ["colour", "brightness"],
                                space=PixelSpace.of(images, pixels), alert_threshold=0.5)  # fmt: skip
    traced = property_records(found, dataset="d", seed=0, variant="cast", shortcut_property="colour", target=1,
                              spurious_score=1.0, accuracy=1.0, seconds=0.0, epoch=1.0)  # fmt: skip
    logged = property_scalars(found, "gradskip/")
    assert len(traced) == 4 and [r.flagged for r in traced] == [True, True, False, False]
    for r in traced:
        for value in ("suspicion", "flip_rate", "control_flip_rate", "separability", "p_value"):
            assert getattr(r, value) == logged[f"discovery/gradskip/{r.property}/{value}/class_{r.label}"]
    for name in ("colour", "brightness"):
        assert sum(r.flagged for r in traced if r.property == name) == logged[f"discovery/gradskip/{name}/flagged"]


class _Snapshots(Callback):
    """The module's weights at each training epoch's end, as EpochWeights saw them."""

    def __init__(self) -> None:
        self.weights: list[dict[str, torch.Tensor]] = []

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.weights.append({k: v.clone() for k, v in pl_module.state_dict().items()})


def test_kept_weights_are_each_epochs_and_reload_into_the_model(tmp_path):
    folder, snapshots = tmp_path / "weights" / "seed0", _Snapshots()
    module = tiny_module()
    tiny_trainer(tmp_path, callbacks=[EpochWeights(folder), snapshots], limit_train_batches=2).fit(module, tiny_data())
    assert sorted(p.name for p in folder.iterdir()) == ["epoch1.pt", "epoch2.pt"]
    for epoch, seen in enumerate(snapshots.weights, start=1):
        kept = torch.load(folder / f"epoch{epoch}.pt", weights_only=True)
        assert kept.keys() == seen.keys() and all(torch.equal(kept[k], seen[k]) for k in seen)
    assert not all(torch.equal(a, b) for a, b in zip(*(w.values() for w in snapshots.weights), strict=True))
    fresh = tiny_module(seed=1)
    fresh.load_state_dict(torch.load(folder / "epoch2.pt", weights_only=True))  # a replay loads it as it is
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), snapshots.weights[1].values()))


def test_the_trace_records_the_stage_methods_together_as_the_stage_tests_them():
    module, data = tiny_module().eval(), tiny_data()
    data.setup("fit")
    images, classes = discovery_probes(data.val_dataset, 4)
    pixels = PixelSample(*discovery_probes(data.val_dataset, 8))
    methods = {m: token_map_fn(m, 4) for m in DISCOVERY_METHODS}
    space = PixelSpace.of(images, Normalisation(mean=(0.0,), std=(1.0,)))
    trace = DiscoveryTrace(
        Subject("d", 0, "clean", -1, "none", None, None), images, classes, methods, [0.1], False, space, pixels
    )
    trace.trace(module, 1.0, math.nan)
    assert [r.method for r in trace.records] == [m for m in (*DISCOVERY_METHODS, UNION) for _ in range(4)]
    settings = DiscoverySettings(hotspot_share=0.1)
    summaries = {
        m: summarise_classes(fn(module, images, classes).double(), classes, 4, settings) for m, fn in methods.items()
    }
    both = discover(module, images, classes, summaries, patch_size=8, batch_size=64, pixel_sample=pixels)
    union = [r for r in trace.records if r.method == UNION]
    assert [r.p_value for r in union] == pytest.approx(both.p_values.tolist(), nan_ok=True)
    assert [r.box for r in union] == [tuple(8 * v for v in t.box) for t in both.reported]
