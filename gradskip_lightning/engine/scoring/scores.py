"""The table of scores: one row per score, the record fields it fills, when it applies, how it is computed.

:func:`~.compute.explain_probes` runs every row that applies to a chunk of explained probes; the
fields' :func:`~.record.value` metadata then say where each value goes (scalar, table, maps
file). Adding a logged score is a metric, a :class:`~.record.ProbeRecord` field and a row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from gradskip_lightning.core.explanation import Explanation, ModelExplainer
from gradskip_lightning.core.validation import required
from gradskip_lightning.engine.probes import ProbeSet
from gradskip_lightning.engine.settings import ScoreSettings
from gradskip_lightning.metrics import (
    class_sensitivity,
    faithfulness_violation,
    insertion_deletion,
    pointing_game,
    relevance_mass_accuracy,
    relevance_rank_accuracy,
    segmentation_scores_per_image,
)
from gradskip_lightning.metrics.insertion_deletion import Starts
from gradskip_lightning.metrics.perturbation import Activation, class_probabilities
from gradskip_lightning.metrics.sensitivity import runner_up_classes
from gradskip_lightning.shortcuts.transplant import Transplant

__all__ = ["Chunk", "Score", "SCORES", "Requirement", "REQUIREMENTS", "ExplainFailure"]


class ExplainFailure(RuntimeError):
    """Explaining the probes gave non-finite relevance or logits."""


@dataclass(frozen=True)
class Chunk:
    """One chunk of explained probes: what every score reads.

    Attributes:
        explainer: the method's explainer (its model in eval mode).
        images: (B, C, H, W) the probes' images on the model's device.
        probes: the chunk's probes (labels, regions on the CPU).
        exp: the explanation of ``images``.
        settings: how to score.
        transplant: the live transplant test, or None.
        activation: "softmax", or "sigmoid" for multi-label models.
        starts: the chunk's insertion starts and deletion ends with the model's logits, shared by
            every method (None: the perturbation rows make their own).
    """

    explainer: ModelExplainer
    images: Tensor
    probes: ProbeSet
    exp: Explanation
    settings: ScoreSettings
    transplant: Transplant | None
    activation: Activation
    starts: Starts | None = None

    @property
    def perturbation(self) -> dict[str, Any]:
        """The options every perturbation metric takes (a segmentation model's: the explained region),
        with the clean probes' scores from the explain forward (no image is forwarded twice)."""
        settings = self.settings
        options: dict[str, Any] = dict(patch_size=self.explainer.patch_size, batch_size=settings.metrics_batch_size)
        options["activation"] = self.activation
        if self.exp.region is not None:  # scored by the mean logit over the explained region
            options["regions"] = self.exp.region
        options["clean_scores"] = self.clean_scores
        return options

    @property
    def clean_scores(self) -> Tensor:
        """(B,) the explained class's score on each clean probe, from the explain forward's logits: its
        probability, or a segmentation model's mean logit over the region (its logits are those means)."""
        if self.exp.region is not None:
            return self.exp.logits.gather(1, self.exp.targets[:, None])[:, 0]
        return class_probabilities(self.exp.logits, self.exp.targets, self.activation)


Requirement = Literal["masks", "regions", "transplant", "fvt_top_k", "class_sensitivity"]

#: When a score applies: the condition on the chunk, and its words for the table of logged keys.
REQUIREMENTS: dict[Requirement, tuple[Callable[[Chunk], bool], str]] = {
    "masks": (lambda c: c.probes.masks is not None, "for probes with an `object` region"),
    "regions": (lambda c: bool(c.probes.regions), "for probes with named regions"),
    "transplant": (lambda c: c.transplant is not None, "with `transplant`"),
    "fvt_top_k": (lambda c: c.settings.fvt_top_k > 0, "with `fvt_top_k` > 0"),
    "class_sensitivity": (
        lambda c: c.settings.class_sensitivity and c.explainer.num_classes >= 2,
        "with `class_sensitivity`",
    ),
}


@dataclass(frozen=True)
class Score:
    """One row of :data:`SCORES`.

    Attributes:
        fields: the :class:`~.record.ProbeRecord` fields ``compute`` fills, each (B, ...).
        compute: the chunk -> {field: values}.
        needs: when it applies (None: always).
        perturbation: it forwards perturbed images (what the time budget thins: a method whose
            perturbation scores are not due this epoch skips it).
    """

    fields: tuple[str, ...]
    compute: Callable[[Chunk], dict[str, Tensor]]
    needs: Requirement | None = None
    perturbation: bool = False

    def applies(self, chunk: Chunk) -> bool:
        return self.needs is None or REQUIREMENTS[self.needs][0](chunk)


def _insertion_deletion(c: Chunk) -> dict[str, Tensor]:
    scores = insertion_deletion(
        c.explainer.model,
        c.images,
        c.exp.targets,
        c.exp.maps,
        steps=c.settings.insertion_steps,
        deletion_baseline=c.settings.deletion_baseline,
        insertion_start=c.settings.insertion_start,
        starts=c.starts,
        precision=c.settings.perturbation_precision,
        **c.perturbation,
    )
    return dict(
        insertion=scores["insertion"],
        deletion=scores["deletion"],
        ins_minus_del=scores["insertion_minus_deletion"],
        insertion_start=scores["insertion_start"],
    )


def _violation(c: Chunk) -> dict[str, Tensor]:
    top_k, baseline = c.settings.fvt_top_k, c.settings.deletion_baseline
    violation = faithfulness_violation(
        c.explainer.model, c.images, c.exp.targets, c.exp.maps, top_k=top_k, baseline=baseline, **c.perturbation
    )
    return dict(fvt_violation=violation.float())


def _object_masks(c: Chunk) -> Tensor:
    return required(c.probes.masks, "the probes' object masks").to(c.images.device)


def _pointing(c: Chunk) -> dict[str, Tensor]:
    hits = pointing_game(c.exp.maps, _object_masks(c), tolerance=c.settings.pointing_tolerance)
    return dict(pointing_hit=hits.float())


def _segmentation(c: Chunk) -> dict[str, Tensor]:
    scores = segmentation_scores_per_image(c.exp.maps, _object_masks(c))
    return {name: scores[name].float() for name in ("pixel_accuracy", "mean_iou", "average_precision")}


def _regions(c: Chunk) -> dict[str, Tensor]:
    regions = [masks.to(c.images.device) for masks in required(c.probes.regions, "the probes' regions").values()]
    return dict(
        region_mass=torch.stack([relevance_mass_accuracy(c.exp.maps, masks) for masks in regions], dim=1),
        region_rank=torch.stack([relevance_rank_accuracy(c.exp.maps, masks) for masks in regions], dim=1),
    )


def _transplant(c: Chunk) -> dict[str, Tensor]:
    """Per-probe (B,) flips to the tag's class and relevance mass on the tag; NaN for probes of its class."""
    images, transplant = c.images, required(c.transplant, "the transplant test")
    flips = torch.full((len(images),), float("nan"), device=images.device)
    mass = flips.clone()
    chosen = transplant.eligible(c.probes.labels, c.probes.multi_hot).to(images.device)
    if chosen.any():
        pasted = transplant.paste(images[chosen])
        targets = torch.full((len(pasted),), transplant.tag.target_class, dtype=torch.long, device=images.device)
        exp = c.explainer.explain(pasted, targets)
        if not bool(exp.valid.all()):
            raise ExplainFailure(f"{exp.method}: non-finite relevance on probes with the tag transplanted")
        flips[chosen] = transplant.flipped(exp.logits, c.activation == "sigmoid").float()
        masks = transplant.mask(*images.shape[-2:]).to(images.device).expand(len(pasted), -1, -1)
        mass[chosen] = relevance_mass_accuracy(exp.maps, masks).float()
    return dict(transplant_flip=flips, transplant_mass=mass)


def _class_sensitivity(c: Chunk) -> dict[str, Tensor]:
    """Spearman (B,) between each probe's map and the map of its runner-up class (one more explain call)."""
    runner_up = c.explainer.explain(c.images, runner_up_classes(c.exp.logits, c.exp.targets))
    if not bool(runner_up.valid.all()):
        raise ExplainFailure(f"{runner_up.method}: non-finite relevance explaining the runner-up classes")
    return dict(class_sensitivity=class_sensitivity(c.exp.maps, runner_up.maps).float())


#: Every score, in the order they run.
SCORES: tuple[Score, ...] = (
    Score(("insertion", "deletion", "ins_minus_del", "insertion_start"), _insertion_deletion, perturbation=True),
    Score(("fvt_violation",), _violation, needs="fvt_top_k", perturbation=True),
    Score(("pointing_hit",), _pointing, needs="masks"),
    Score(("pixel_accuracy", "mean_iou", "average_precision"), _segmentation, needs="masks"),
    Score(("region_mass", "region_rank"), _regions, needs="regions"),
    Score(("transplant_flip", "transplant_mass"), _transplant, needs="transplant"),
    Score(("class_sensitivity",), _class_sensitivity, needs="class_sensitivity"),
)
