"""Typed records of the segmentation benchmark; the JSON of ``--json`` is ``dataclasses.asdict`` of each.

The paired differences are the faithfulness benchmark's
:class:`~benchmarks.faithfulness.records.PairedDifference` (table "methods").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from benchmarks.faithfulness.records import Interval

#: "engine": this library's SegFormerExplainer; "peer": another library (pytorch-grad-cam).
MethodKind = Literal["engine", "peer"]


@dataclass(frozen=True)
class SegmentationModelRecord:
    """The SegFormer of one training seed: trained (``epochs``, ``train_seconds``) or loaded
    (``checkpoint``), its mIoU and pixel accuracy on the validation and test splits, and how many
    images of the test subset had no position predicted as their square's class (``empty_regions``:
    their whole logits grid is explained and scored instead)."""

    dataset: str
    seed: int
    checkpoint: str | None
    epochs: int | None
    train_seconds: float
    val_miou: float
    val_pixel_accuracy: float
    test_miou: float
    test_pixel_accuracy: float
    images: int  # in the fixed test subset
    empty_regions: int
    record: Literal["model"] = "model"


@dataclass(frozen=True)
class SegmentationScoreRecord:
    """One (seed, method): per-image score means over the subset, and the PA and mIoU pooled over
    all the subset's pixels (``pooled``, as the paper reports them)."""

    dataset: str
    seed: int
    method: str
    kind: MethodKind
    images: int
    ms_per_map: float  # CPU wall ms per map, median over batches
    scores: dict[str, float]
    pooled: dict[str, float]
    record: Literal["score"] = "score"


@dataclass(frozen=True)
class SegmentationIntervalRecord:
    """One method over all seeds: each per-image score's mean with its hierarchical bootstrap
    interval, and the pooled scores' mean over seeds with their lowest and highest seed."""

    dataset: str
    method: str
    kind: MethodKind
    seeds: tuple[int, ...]
    images: int
    ms_per_map: float  # median over seeds
    scores: dict[str, Interval]
    pooled: dict[str, Interval]  # mean over seeds, [min, max] over seeds (not a bootstrap interval)
    record: Literal["interval"] = "interval"
