"""Interval records, paired differences and their markdown, on hand-made per-image scores."""

from __future__ import annotations

import math

import torch

from benchmarks.faithfulness.bootstrap import BootstrapSettings
from benchmarks.faithfulness.records import ModelRecord, Row, ScoreRecord
from benchmarks.faithfulness.report import BEGIN, END, dataset_section, write_markdown
from benchmarks.faithfulness.scores import SCORES
from benchmarks.faithfulness.summary import (
    SeedScores,
    comparisons,
    floor_comparisons,
    interval_records,
    paired_differences,
)

SETTINGS = BootstrapSettings(resamples=200)


def _run(row: Row, seed: int, level: float) -> SeedScores:
    """Every score of ``row`` on 10 images: ``level`` plus the image index / 100, no pointing game."""
    per_image = level + torch.arange(10, dtype=torch.double) / 100
    names = [s.name for s in SCORES if row.table == "methods" or s.in_ablations]
    values = {name: None if name == "pointing_game" else per_image for name in names}
    record = ScoreRecord(
        dataset="d",
        seed=seed,
        row=row,
        images=10,
        ms_per_map=1.0 + seed,
        gflops_per_map=None,
        ratio_to_forward=None,
        cheap=None,
        scores={k: None if v is None else v.mean().item() for k, v in values.items()},
    )
    return SeedScores(record, values)


def _runs() -> list[SeedScores]:
    rows = [
        (Row("methods", "gradskip"), 0.6),
        (Row("methods", "rollout"), 0.5),
        (Row("ablations", "gate=layer", "gate", "ablation", is_default=True), 0.6),
        (Row("ablations", "gate=off", "gate", "ablation", {"gate": "off"}), 0.7),
    ]
    return [_run(row, seed, level) for seed in (0, 1) for row, level in rows]


def test_gradskip_is_compared_with_every_method_and_each_setting_with_its_default():
    rows = [run.record.row for run in _runs()[:4]]
    assert [(s.name, r.name) for s, r in comparisons(rows)] == [("gradskip", "rollout"), ("gate=off", "gate=layer")]


def test_intervals_and_paired_differences_of_known_scores():
    runs = _runs()
    intervals = {r.row.name: r for r in interval_records(runs, SETTINGS)}
    assert list(intervals) == ["gradskip", "rollout", "gate=layer", "gate=off"]
    gradskip = intervals["gradskip"]
    assert gradskip.seeds == (0, 1) and gradskip.ms_per_map == 1.5 and gradskip.scores["pointing_game"] is None
    insertion = gradskip.scores["insertion"]
    assert math.isclose(insertion.mean, 0.645) and insertion.low < 0.645 < insertion.high
    assert "randomisation_similarity" not in intervals["gate=off"].scores  # not an ablation score

    differences = {(d.subject, d.score): d for d in paired_differences(runs, SETTINGS)}
    # The same per-image offset on every image: a zero-width difference of +0.1.
    ins = differences[("gradskip", "insertion")]
    assert ins.reference == "rollout" and ins.images == 10 and ins.seeds == (0, 1)
    assert math.isclose(ins.difference.low, 0.1) and math.isclose(ins.difference.high, 0.1)
    assert ins.verdict == "ahead" and differences[("gradskip", "deletion")].verdict == "behind"
    assert ("gradskip", "pointing_game") not in differences
    assert differences[("gate=off", "insertion")].reference == "gate=layer"

    models = [ModelRecord("d", s, None, 1, 2.0, 0.9, 10) for s in (0, 1)]
    text = "\n".join(dataset_section("d", [*models, *intervals.values(), *differences.values()]))
    assert "| gradskip − rollout | +0.100 [+0.100, +0.100] ahead |" in text
    assert "| gate | gate=off − gate=layer | +0.100 [+0.100, +0.100] ahead |" in text
    assert "| **gradskip** | n/a | 0.645 [" in text and "seed 1: trained 1 epochs in 2 s, accuracy 0.900" in text


def test_every_method_is_compared_with_the_random_floor_on_insertion_and_the_table_shows_it():
    rows = [(Row("methods", "gradskip"), 0.6), (Row("methods", "rollout"), 0.5), (Row("methods", "random"), 0.3)]
    runs = [_run(row, seed, level) for seed in (0, 1) for row, level in rows]
    assert [(s.name, r.name) for s, r in floor_comparisons([row for row, _ in rows])] == [("rollout", "random")]
    assert floor_comparisons([Row("methods", "gradskip"), Row("methods", "rollout")]) == []  # no floor row

    differences = paired_differences(runs, SETTINGS)
    floor = {(d.subject, d.score): d for d in differences if d.reference == "random"}
    # GradSkip's pair has every score (its own table); every other method's has insertion only.
    assert {score for subject, score in floor if subject == "rollout"} == {"insertion"}
    assert ("gradskip", "deletion") in floor and ("random", "insertion") not in floor
    rollout = floor[("rollout", "insertion")]
    assert math.isclose(rollout.difference.low, 0.2) and math.isclose(rollout.difference.high, 0.2)
    assert rollout.verdict == "ahead"

    models = [ModelRecord("d", s, None, 1, 2.0, 0.9, 10) for s in (0, 1)]
    text = "\n".join(dataset_section("d", [*models, *interval_records(runs, SETTINGS), *differences]))
    floor_part = text[text.index("#### d: insertion above the random floor") :]
    assert "| start image (its own score: nothing inserted) | 0.345 [" in floor_part  # random's start
    assert "| random (the floor) | 0.345 [" in floor_part
    assert "| gradskip | 0.645 [" in floor_part and "| +0.300 [+0.300, +0.300] ahead |" in floor_part
    assert "| rollout | 0.545 [" in floor_part and "| +0.200 [+0.200, +0.200] ahead |" in floor_part
    assert "rollout − random" not in text  # not a row of GradSkip's table


def test_write_markdown_creates_a_file_with_markers(tmp_path):
    path = tmp_path / "new.md"
    machine = {"cpu": "x", "logical_cpus": 2, "torch": "t", "threads": 2, "python": "3", "cpu_seconds": 60.0}
    write_markdown(
        path,
        [],
        command="cmd",
        machine={**machine, "load_average": 1.0},
        wall_seconds=60.0,
        steps=16,
        bootstrap=SETTINGS,
    )
    text = path.read_text()
    assert text.startswith(BEGIN) and text.rstrip().endswith(END) and "Command: `cmd`" in text
    assert "95% interval from a hierarchical bootstrap (200 resamples" in text
