"""Scores of the discovery benchmark from :class:`~.trace.ClassRecord`s: suspicion formulas, AUROC,
hotspot overlap, false alarms and the first-fire point, with hierarchical bootstrap intervals over
training seeds (:func:`~benchmarks.faithfulness.bootstrap.hierarchical_bootstrap`).

Suspicion formulas (:data:`FORMULAS`): the library's (``full``: excess x the cube root of
concentration x constancy x max(0, consistency)), the same without consistency (``no_consistency``:
the square root of concentration x constancy) and the excess alone (``excess``), where excess =
max(0, flip rate - max(random-place rate, other-class rate)), each of the class's reported test. A
class is flagged when its suspicion reaches the floor and, with ``alpha``, its adjusted p-value is at
most ``alpha`` (the library's rule).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

import torch

from gradskip_lightning.shortcuts.discovery import suspicion_score
from gradskip_lightning.shortcuts.tags import SPURIOUS_THRESHOLD

from ..faithfulness.bootstrap import hierarchical_bootstrap
from ..faithfulness.records import Interval
from .trace import ClassRecord

#: The spurious score from which a shortcut counts as learned, for "flagged at every epoch after it is learned"
#: (the issue's bar for a model that relies on a shortcut).
LEARNED = 0.5

Formula = Literal["full", "no_consistency", "excess"]


def excess(record: ClassRecord) -> float:
    """max(0, flip rate - max(random-place rate, other-class rate)); NaN when a rate is."""
    rates = (record.flip_rate, record.random_flip_rate, record.other_class_flip_rate)
    if any(math.isnan(r) for r in rates):
        return math.nan
    return max(0.0, rates[0] - max(rates[1:]))


#: Formula name -> suspicion of one class record.
FORMULAS: dict[Formula, Callable[[ClassRecord], float]] = {
    "full": lambda r: suspicion_score(excess(r), r.concentration, r.constancy, r.consistency),
    "no_consistency": lambda r: suspicion_score(excess(r), r.concentration, r.constancy),
    "excess": excess,
}


class Traced(Protocol):
    """A record of one model at one trace point (:class:`ClassRecord`, :class:`~.trace.PropertyRecord`)."""

    @property
    def dataset(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def variant(self) -> str: ...
    @property
    def epoch(self) -> float: ...


T = TypeVar("T", bound=Traced)


def final(records: Sequence[T]) -> list[T]:
    """The records at each model's last trace point."""
    last: dict[tuple, float] = {}
    for r in records:
        model = (r.dataset, r.seed, r.variant)
        last[model] = max(last.get(model, -math.inf), r.epoch)
    return [r for r in records if r.epoch == last[(r.dataset, r.seed, r.variant)]]


def seed_rows(values: Sequence[tuple[int, list[float]]]) -> torch.Tensor:
    """(S, n) values per seed from (seed, values) pairs, NaN-padded to the longest seed's n (the bootstrap
    skips NaN); (0,) without values.

    >>> seed_rows([(0, [1.0]), (1, [2.0, 3.0]), (0, [4.0])]).tolist()
    [[1.0, 4.0], [2.0, 3.0]]
    """
    seeds: dict[int, list[float]] = {}
    for seed, row in values:
        seeds.setdefault(seed, []).extend(row)
    if not seeds:
        return torch.zeros(0, dtype=torch.double)
    width = max(len(v) for v in seeds.values())
    return torch.tensor([v + [math.nan] * (width - len(v)) for v in seeds.values()], dtype=torch.double)


def by_seed(records: Sequence[T], value: Callable[[T], float]) -> torch.Tensor:
    """(S, n) ``value`` of ``records`` per seed (:func:`seed_rows`)."""
    return seed_rows([(r.seed, [value(r)]) for r in records])


def bootstrap_interval(values: torch.Tensor) -> Interval:
    """The mean of ``values`` (S, n) with its hierarchical bootstrap interval; all NaN without values."""
    if values.ndim != 2 or values.isnan().all():
        return Interval(math.nan, math.nan, math.nan)
    return hierarchical_bootstrap(values)


@dataclass(frozen=True)
class MethodScore:
    """One method, hotspot share and formula on one dataset and shortcut variant: the AUROC of the shortcut's
    class of those models against every class of the same seed's clean model, the tested region's IoU with the
    stamp and the top-patch hit, the detection rate (the shortcut's class flagged) and false-alarm rate (every
    class of clean and control models) at ``threshold`` and ``alpha``, the highest clean/control suspicion and
    lowest adjusted p-value, and per seed the first epoch the class is flagged, its spurious epoch and (flagged,
    all) trace points from the first one with a spurious score of :data:`LEARNED` or more on (none: (0, 0))."""

    dataset: str
    method: str
    share: float
    formula: str
    threshold: float
    alpha: float | None
    auroc: Interval
    iou: Interval
    hit: Interval
    detection: Interval
    false_alarms: Interval
    max_clean: float
    min_clean_p: float
    first_fire: tuple[float | None, ...]
    spurious_epoch: tuple[float | None, ...]
    held: tuple[tuple[int, int], ...] = ()


def pair_wins(positive: float, negatives: Sequence[float]) -> list[float]:
    """1 per negative below ``positive``, 0.5 per tie, 0 above (NaN scores count as 0: nothing found).

    >>> pair_wins(0.3, [0.1, 0.3, 0.5])
    [1.0, 0.5, 0.0]
    """
    p = 0.0 if math.isnan(positive) else positive
    return [1.0 if p > n else 0.5 if p == n else 0.0 for n in (0.0 if math.isnan(x) else x for x in negatives)]


def _first(points: list[tuple[float, bool]]) -> float | None:
    hits = [epoch for epoch, hit in sorted(points) if hit]
    return hits[0] if hits else None


def score(
    records: Sequence[ClassRecord],
    dataset: str,
    method: str,
    share: float,
    formula: Formula,
    threshold: float,
    alpha: float | None = None,
    variant: str = "stamped",
) -> MethodScore:
    """The :class:`MethodScore` of one dataset, method, share and formula (and shortcut ``variant``) from every
    trace record; ``alpha`` None leaves the p-value out of the flag."""
    suspicion = FORMULAS[formula]
    mine = [r for r in records if r.dataset == dataset and r.method == method and r.share == share]
    last = final(mine)
    stamped = [r for r in last if r.variant == variant and r.label == r.target]
    seeds = {x.seed for x in last}
    clean = {s: [suspicion(r) for r in last if r.variant == "clean" and r.seed == s] for s in seeds}
    wins = [(r.seed, pair_wins(suspicion(r), clean.get(r.seed, []))) for r in stamped]
    negatives = [r for r in last if r.variant in ("clean", "control")]

    def flagged(r: ClassRecord) -> float:
        value = suspicion(r)
        calibrated = alpha is None or r.p_value <= alpha  # False when NaN
        return float(not math.isnan(value) and value >= threshold and calibrated)

    fire, spurious, held = [], [], []
    for seed in sorted({r.seed for r in stamped}):
        trace = sorted((r for r in mine if r.variant == variant and r.seed == seed and r.label == r.target),
                       key=lambda r: r.epoch)  # fmt: skip
        fire.append(_first([(r.epoch, bool(flagged(r))) for r in trace]))
        spurious.append(_first([(r.epoch, r.spurious_score >= SPURIOUS_THRESHOLD) for r in trace]))
        learned = next((i for i, r in enumerate(trace) if r.spurious_score >= LEARNED), len(trace))
        held.append((int(sum(flagged(r) for r in trace[learned:])), len(trace) - learned))
    scores = [suspicion(r) for r in negatives]
    return MethodScore(
        dataset=dataset,
        method=method,
        share=share,
        formula=formula,
        threshold=threshold,
        alpha=alpha,
        auroc=bootstrap_interval(seed_rows(wins)),
        iou=bootstrap_interval(by_seed(stamped, lambda r: r.iou)),
        hit=bootstrap_interval(by_seed(stamped, lambda r: r.hit)),
        detection=bootstrap_interval(by_seed(stamped, flagged)),
        false_alarms=bootstrap_interval(by_seed(negatives, flagged)),
        max_clean=max((s for s in scores if not math.isnan(s)), default=math.nan),
        min_clean_p=min((r.p_value for r in negatives if not math.isnan(r.p_value)), default=math.nan),
        first_fire=tuple(fire),
        spurious_epoch=tuple(spurious),
        held=tuple(held),
    )
