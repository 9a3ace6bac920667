"""Typed records of the faithfulness benchmark; the JSON of ``--json`` is ``dataclasses.asdict`` of each.

Scores are keyed by :attr:`Score.name <benchmarks.faithfulness.scores.Score.name>`
(the registry in :mod:`~benchmarks.faithfulness.scores`); a score a row cannot
have (the Pointing Game without object masks) is None.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

#: "methods": every explainer method and peer on the whole subset; "ablations": GradSkip with one
#: option changed, on the first ``--ablation-size`` images.
Table = Literal["methods", "ablations"]
#: The subject of a paired difference against its reference: the interval lies on the better side
#: of 0 ("ahead"), contains 0 ("tied"), or lies on the worse side ("behind").
Verdict = Literal["ahead", "tied", "behind"]


@dataclass(frozen=True)
class Interval:
    """A mean with its 95 % bootstrap interval [low, high] (same units as the score)."""

    mean: float
    low: float
    high: float


@dataclass(frozen=True)
class Row:
    """What a table row is: a method (``group`` "") or an ablation setting of ``group``."""

    table: Table
    name: str
    group: str = ""
    kind: str = "engine"  # "engine" (this library's TimmViTExplainer), "peer" (another library) or "ablation"
    options: dict[str, Any] = field(default_factory=dict)  # GradSkip options (gradskip and ablations)
    is_default: bool = False  # the ablation row with GradSkip's default options


@dataclass(frozen=True)
class ModelRecord:
    """The model of one (dataset, seed): trained (``epochs``, ``train_seconds``) or loaded (``checkpoint``)."""

    dataset: str
    seed: int
    checkpoint: str | None
    epochs: int | None
    train_seconds: float
    accuracy: float  # on the fixed test subset
    images: int  # in the fixed test subset
    record: Literal["model"] = "model"


@dataclass(frozen=True)
class ScoreRecord:
    """One (dataset, seed, row): the means over the subset's images on the model of that seed."""

    dataset: str
    seed: int
    row: Row
    images: int
    ms_per_map: float  # CPU wall ms per map, median over batches
    gflops_per_map: float | None  # None for ablation rows (not measured)
    ratio_to_forward: float | None
    cheap: bool | None  # at most CHEAP_RATIO forwards per map
    scores: dict[str, float | None]
    record: Literal["score"] = "score"


@dataclass(frozen=True)
class IntervalRecord:
    """One (dataset, row) over all seeds: each score's mean with its hierarchical bootstrap interval."""

    dataset: str
    row: Row
    seeds: tuple[int, ...]
    images: int
    ms_per_map: float  # median over seeds
    gflops_per_map: float | None
    ratio_to_forward: float | None
    cheap: bool | None
    scores: dict[str, Interval | None]
    record: Literal["interval"] = "interval"


@dataclass(frozen=True)
class PairedDifference:
    """``subject`` minus ``reference`` on one score, per image on the same images and seeds."""

    dataset: str
    table: Table
    score: str
    subject: str
    reference: str
    group: str  # the ablation group of ``subject`` ("" for methods)
    seeds: tuple[int, ...]
    images: int
    difference: Interval
    verdict: Verdict
    record: Literal["difference"] = "difference"
