"""Per-image scores of one method's maps, and from per-seed scores to intervals and paired differences
(with the faithfulness benchmark's hierarchical bootstrap and verdicts)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from benchmarks.faithfulness.bootstrap import BootstrapSettings, hierarchical_bootstrap, verdict
from benchmarks.faithfulness.records import Interval, PairedDifference
from benchmarks.faithfulness.summary import FLOOR, FLOOR_SCORES
from gradskip_lightning.metrics import insertion_deletion, segmentation_scores, segmentation_scores_per_image

from .methods import POOLED, SCORES, SUBJECT
from .records import SegmentationIntervalRecord, SegmentationScoreRecord


@dataclass(frozen=True)
class SeedScores:
    """One (seed, method): its record (means) and the per-image values (n,) behind them."""

    record: SegmentationScoreRecord
    values: dict[str, Tensor]


def per_image_scores(
    model: nn.Module,
    images: Tensor,
    targets: Tensor,
    maps: Tensor,
    masks: Tensor,
    regions: Tensor,
    *,
    steps: int,
    patch_size: int,
    batch_size: int,
) -> dict[str, Tensor]:
    """Every :data:`~.methods.SCORES` column per image (n,) float64.

    Args:
        model: eval-mode module, images -> logits (n, K, h, w).
        images: (n, C, H, W) normalised; targets: (n,) explained classes; maps: (n, H, W).
        masks: (n, H, W) bool, the target class's pixels.
        regions: (n, h, w) bool, the explained logit positions (the insertion/deletion score is the
            mean target logit over them).
        steps: insertion/deletion steps; patch_size: pixels per perturbed patch; batch_size:
            perturbed images per forward.
    """
    localisation = segmentation_scores_per_image(maps, masks)
    with torch.no_grad():
        perturbation = insertion_deletion(
            model, images, targets, maps, patch_size=patch_size, steps=steps, batch_size=batch_size, regions=regions
        )
    found = {**localisation, **perturbation}
    return {score.name: found[score.name].double() for score in SCORES}


def pooled_scores(maps: Tensor, masks: Tensor) -> dict[str, float]:
    """The :data:`~.methods.POOLED` scores over all pixels of the subset."""
    pooled = segmentation_scores(maps, masks)
    return {score.name: pooled[score.name].item() for score in POOLED}


def _by_method(runs: list[SeedScores]) -> dict[str, list[SeedScores]]:
    grouped: dict[str, list[SeedScores]] = {}
    for run in runs:
        grouped.setdefault(run.record.method, []).append(run)
    return grouped


def _stack(runs: list[SeedScores], score: str) -> Tensor:
    """(S, n) values of one score over the seeds of ``runs`` (one method)."""
    return torch.stack([run.values[score] for run in runs])


def _seed_spread(values: list[float]) -> Interval:
    return Interval(statistics.fmean(values), min(values), max(values))


def interval_records(runs: list[SeedScores], settings: BootstrapSettings) -> list[SegmentationIntervalRecord]:
    """One record per method of ``runs``, in first-seen order: means with bootstrap intervals."""
    out = []
    for method_runs in _by_method(runs).values():
        first = method_runs[0].record
        out.append(
            SegmentationIntervalRecord(
                dataset=first.dataset,
                method=first.method,
                kind=first.kind,
                seeds=tuple(run.record.seed for run in method_runs),
                images=first.images,
                ms_per_map=statistics.median(run.record.ms_per_map for run in method_runs),
                scores={s.name: hierarchical_bootstrap(_stack(method_runs, s.name), settings) for s in SCORES},
                pooled={s.name: _seed_spread([run.record.pooled[s.name] for run in method_runs]) for s in POOLED},
            )
        )
    return out


def paired_differences(runs: list[SeedScores], settings: BootstrapSettings) -> list[PairedDifference]:
    """GradSkip minus every other method per image (same images and seeds) on every score, then every
    other method minus the random floor on :data:`~benchmarks.faithfulness.summary.FLOOR_SCORES`;
    with bootstrap intervals and verdicts. Pairs whose methods were not run are left out."""
    grouped = _by_method(runs)
    pairs = [(SUBJECT, reference, SCORES) for reference in grouped if reference != SUBJECT]
    floor_scores = tuple(s for s in SCORES if s.name in FLOOR_SCORES)
    pairs += [(subject, FLOOR, floor_scores) for subject in grouped if subject not in (SUBJECT, FLOOR)]
    out = []
    for subject, reference, scores in pairs:
        if subject not in grouped or reference not in grouped:
            continue
        subject_runs = grouped[subject]
        for score in scores:
            a, b = _stack(subject_runs, score.name), _stack(grouped[reference], score.name)
            difference = hierarchical_bootstrap(a - b, settings)
            out.append(
                PairedDifference(
                    dataset=subject_runs[0].record.dataset,
                    table="methods",
                    score=score.name,
                    subject=subject,
                    reference=reference,
                    group="",
                    seeds=tuple(run.record.seed for run in subject_runs),
                    images=a.shape[1],
                    difference=difference,
                    verdict=verdict(difference, score.higher_is_better),
                )
            )
    return out
