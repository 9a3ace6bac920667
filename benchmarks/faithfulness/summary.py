"""From per-seed, per-image scores to interval records and paired differences."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch
from torch import Tensor

from .bootstrap import BootstrapSettings, hierarchical_bootstrap, verdict
from .records import IntervalRecord, PairedDifference, Row, ScoreRecord
from .scores import Score, scored

#: The method every other method is compared with, and what its rows are called.
SUBJECT = "gradskip"
#: The random floor: every other method's insertion is compared with its (:func:`floor_comparisons`).
FLOOR = "random"
#: The scores compared with the floor's.
FLOOR_SCORES = ("insertion",)


@dataclass(frozen=True)
class SeedScores:
    """One (dataset, seed, row): its record (means) and the per-image values (n,) behind them."""

    record: ScoreRecord
    values: dict[str, Tensor | None]


def _key(row: Row) -> tuple[str, str, str]:
    return row.table, row.group, row.name


def _stack(runs: list[SeedScores], score: str) -> Tensor | None:
    """(S, n) values of one score over the seeds of ``runs`` (one row), None if any seed lacks it."""
    found = [run.values[score] for run in runs]
    present = [v for v in found if v is not None]
    return torch.stack(present) if len(present) == len(found) else None


def _by_row(runs: list[SeedScores]) -> dict[tuple[str, str, str], list[SeedScores]]:
    grouped: dict[tuple[str, str, str], list[SeedScores]] = {}
    for run in runs:
        grouped.setdefault(_key(run.record.row), []).append(run)
    return grouped


def _scores_of(runs: list[SeedScores]) -> tuple[Score, ...]:
    """The scores a row was scored with (the costly ones only in the methods table, unless asked)."""
    return scored(runs[0].values)


def interval_records(runs: list[SeedScores], settings: BootstrapSettings) -> list[IntervalRecord]:
    """One record per (dataset, row) of ``runs``, in first-seen order: means and bootstrap intervals."""
    out = []
    for row_runs in _by_row(runs).values():
        first = row_runs[0].record
        intervals = {}
        for score in _scores_of(row_runs):
            values = _stack(row_runs, score.name)
            intervals[score.name] = None if values is None else hierarchical_bootstrap(values, settings)
        out.append(
            IntervalRecord(
                dataset=first.dataset,
                row=first.row,
                seeds=tuple(run.record.seed for run in row_runs),
                images=first.images,
                ms_per_map=statistics.median(run.record.ms_per_map for run in row_runs),
                gflops_per_map=first.gflops_per_map,
                ratio_to_forward=first.ratio_to_forward,
                cheap=first.cheap,
                scores=intervals,
            )
        )
    return out


def comparisons(rows: list[Row]) -> list[tuple[Row, Row]]:
    """(subject, reference) pairs: GradSkip against every other method; each ablation setting against
    its group's default row."""
    methods = [row for row in rows if row.table == "methods"]
    pairs = [(s, r) for s in methods if s.name == SUBJECT for r in methods if r.name != SUBJECT]
    defaults = {row.group: row for row in rows if row.table == "ablations" and row.is_default}
    pairs += [(row, defaults[row.group]) for row in rows if row.table == "ablations" and not row.is_default]
    return pairs


def floor_comparisons(rows: list[Row]) -> list[tuple[Row, Row]]:
    """(method, :data:`FLOOR`) pairs for every method but GradSkip (its pair is in :func:`comparisons`)
    and the floor itself; none without a floor row."""
    methods = [row for row in rows if row.table == "methods"]
    floors = [row for row in methods if row.name == FLOOR]
    return [(row, floor) for floor in floors for row in methods if row.name not in (SUBJECT, FLOOR)]


def paired_differences(runs: list[SeedScores], settings: BootstrapSettings) -> list[PairedDifference]:
    """Subject minus reference per image, same images and seeds, for every pair of :func:`comparisons`
    on every score both have, then for every pair of :func:`floor_comparisons` on :data:`FLOOR_SCORES`;
    with bootstrap intervals and verdicts."""
    grouped = _by_row(runs)
    rows = [row_runs[0].record.row for row_runs in grouped.values()]
    pairs = [(*pair, None) for pair in comparisons(rows)] + [(*pair, FLOOR_SCORES) for pair in floor_comparisons(rows)]
    out = []
    for subject, reference, only in pairs:
        subject_runs, reference_runs = grouped[_key(subject)], grouped[_key(reference)]
        for score in _scores_of(subject_runs):
            a, b = _stack(subject_runs, score.name), _stack(reference_runs, score.name)
            if a is None or b is None or (only is not None and score.name not in only):
                continue
            difference = hierarchical_bootstrap(a - b, settings)
            first = subject_runs[0].record
            out.append(
                PairedDifference(
                    dataset=first.dataset,
                    table=subject.table,
                    score=score.name,
                    subject=subject.name,
                    reference=reference.name,
                    group=subject.group,
                    seeds=tuple(run.record.seed for run in subject_runs),
                    images=a.shape[1],
                    difference=difference,
                    verdict=verdict(difference, score.higher_is_better),
                )
            )
    return out
