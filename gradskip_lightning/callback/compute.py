"""Explain a probe set and score the maps, in chunks of a fixed batch size.

Every value is per probe, in probe order, on the CPU (a :class:`~.record.ProbeRecord`), so shards
from several processes can be concatenated and compared with a single-process run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from gradskip_lightning.explanation import ModelExplainer
from gradskip_lightning.metrics import (
    faithfulness_violation,
    insertion_deletion,
    pointing_game,
    relevance_mass_accuracy,
    relevance_rank_accuracy,
    segmentation_scores_per_image,
)
from gradskip_lightning.metrics.perturbation import Activation, class_probabilities

from .probes import ProbeSet
from .record import ProbeRecord
from .transplant import Transplant

__all__ = ["ScoreSettings", "explain_probes", "ExplainFailure", "Target", "DeletionBaseline"]

Target = Literal["label", "prediction"]
DeletionBaseline = Literal["zeros", "blur"]


class ExplainFailure(RuntimeError):
    """Explaining the probes gave non-finite relevance or logits."""


@dataclass(frozen=True)
class ScoreSettings:
    """How maps are scored; see :mod:`gradskip_lightning.metrics` for each metric.

    Attributes:
        target: "label" explains the probe's label, "prediction" the predicted (most probable) class.
        batch_size: probes per explain call (bounds memory).
        insertion_steps: K, the perturbation steps of insertion/deletion.
        deletion_baseline: "zeros" or "blur".
        fvt_top_k: patches removed together by the faithfulness violation test; 0 skips it.
        metrics_batch_size: perturbed images per forward call.
        pointing_tolerance: pixels; None = 15 px at 224 px, scaled.
        transplant: the live transplant test (see :mod:`.transplant`), or None to skip it.
    """

    target: Target = "label"
    batch_size: int = 32
    insertion_steps: int = 16
    deletion_baseline: DeletionBaseline = "zeros"
    fvt_top_k: int = 1
    metrics_batch_size: int = 256
    pointing_tolerance: float | None = None
    transplant: Transplant | None = None


def _cpu(value: Tensor) -> Tensor:
    return value.detach().float().cpu() if value.is_floating_point() else value.detach().cpu()


def _explain_chunk(
    explainer: ModelExplainer,
    probes: ProbeSet,
    settings: ScoreSettings,
    heads: bool,
    activation: Activation,
) -> ProbeRecord:
    device = next(explainer.model.parameters()).device
    images = probes.images.to(device)
    targets = probes.labels.to(device) if settings.target == "label" else None
    exp = explainer.explain(images, targets)
    if not bool(exp.valid.all()) or not bool(torch.isfinite(exp.logits).all()):
        bad = (~exp.valid).nonzero()[:, 0].tolist()
        raise ExplainFailure(f"{exp.method}: non-finite relevance or logits for probes at positions {bad}")
    options = dict(patch_size=explainer.patch_size, batch_size=settings.metrics_batch_size, activation=activation)
    if exp.region is not None:  # scored by the mean logit over the explained region
        options["regions"] = exp.region
    scores = insertion_deletion(
        explainer.model,
        images,
        exp.targets,
        exp.maps,
        steps=settings.insertion_steps,
        deletion_baseline=settings.deletion_baseline,
        **options,
    )
    record = ProbeRecord(
        maps=exp.maps,
        token_maps=exp.token_maps,
        targets=exp.targets,
        predictions=exp.predictions,
        probabilities=class_probabilities(exp.logits, exp.predictions, activation),
        insertion=scores["insertion"],
        deletion=scores["deletion"],
        ins_minus_del=scores["insertion_minus_deletion"],
    )
    if settings.fvt_top_k > 0:
        record.fvt_violation = faithfulness_violation(
            explainer.model,
            images,
            exp.targets,
            exp.maps,
            top_k=settings.fvt_top_k,
            baseline=settings.deletion_baseline,
            **options,
        ).float()
    if probes.masks is not None:
        masks = probes.masks.to(device)
        record.pointing_hit = pointing_game(exp.maps, masks, tolerance=settings.pointing_tolerance).float()
        scores = segmentation_scores_per_image(exp.maps, masks)
        record.pixel_accuracy, record.mean_iou = scores["pixel_accuracy"].float(), scores["mean_iou"].float()
        record.average_precision = scores["average_precision"].float()
    if probes.regions:
        regions = [masks.to(device) for masks in probes.regions.values()]
        record.region_mass = torch.stack([relevance_mass_accuracy(exp.maps, masks) for masks in regions], dim=1)
        record.region_rank = torch.stack([relevance_rank_accuracy(exp.maps, masks) for masks in regions], dim=1)
    if settings.transplant is not None:
        record.transplant_flip, record.transplant_mass = _transplant(
            explainer, images, probes, settings.transplant, activation == "sigmoid"
        )
    if heads:
        record.head_weights, record.grad_flow, record.sparsity = exp.head_weights, exp.grad_flow, exp.sparsity
        if exp.gates is not None:
            record.gates = exp.gates.nanmean(dim=2)  # (B, L): mean beta_main over tokens (NaN: SegFormer padding)
    return ProbeRecord(**{name: _cpu(tensor) for name, tensor in record.values().items()})


def _transplant(
    explainer: ModelExplainer, images: Tensor, probes: ProbeSet, transplant: Transplant, multilabel: bool
) -> tuple[Tensor, Tensor]:
    """Per-probe (B,) flips to the tag's class and relevance mass on the tag; NaN for probes of its class."""
    flips = torch.full((len(images),), float("nan"), device=images.device)
    mass = flips.clone()
    chosen = transplant.eligible(probes.labels, probes.multi_hot).to(images.device)
    if chosen.any():
        pasted = transplant.paste(images[chosen])
        targets = torch.full((len(pasted),), transplant.tag.target_class, dtype=torch.long, device=images.device)
        exp = explainer.explain(pasted, targets)
        if not bool(exp.valid.all()):
            raise ExplainFailure(f"{exp.method}: non-finite relevance on probes with the tag transplanted")
        flips[chosen] = transplant.flipped(exp.logits, multilabel).float()
        masks = transplant.mask(*images.shape[-2:]).to(images.device).expand(len(pasted), -1, -1)
        mass[chosen] = relevance_mass_accuracy(exp.maps, masks).float()
    return flips, mass


def explain_probes(
    explainer: ModelExplainer,
    probes: ProbeSet,
    settings: ScoreSettings,
    *,
    heads: bool = True,
    activation: Activation = "softmax",
    progress: bool = False,
) -> ProbeRecord:
    """Explain and score every probe, ``settings.batch_size`` probes at a time.

    Runs the explainer's model in eval mode (the caller restores the mode). Probabilities and
    perturbation scores use ``activation`` ("sigmoid" for multi-label models); a segmentation
    model's are scored by the mean logit of the class over the explained region. Head statistics
    and gates are filled only with ``heads`` and for methods that have them.

    Raises:
        ExplainFailure: a map or logit was not finite.
    """
    explainer.model.eval()
    starts = range(0, len(probes), settings.batch_size)
    if progress and len(starts) > 1:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc=f"explaining ({explainer.method})", leave=False, unit="chunk")
    return ProbeRecord.concat(
        [
            _explain_chunk(
                explainer, probes.subset(slice(start, start + settings.batch_size)), settings, heads, activation
            )
            for start in starts
        ]
    )
