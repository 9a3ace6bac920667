"""Typed records of the shortcut benchmark; the JSON of ``--json`` is ``dataclasses.asdict`` of each
:class:`DetectionRecord`. Masses are relevance mass on the tag in [0, 1]; times are in epochs of
training (1.0 = after the first epoch), at the trace points."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: A training run of one dataset and seed: with the tag as the config sets it ("spurious"), without the
#: tag ("clean": the same images, none tagged), or with the tag on every class alike ("control").
Variant = Literal["spurious", "clean", "control"]
VARIANTS: tuple[Variant, ...] = ("spurious", "clean", "control")


@dataclass(frozen=True)
class DetectionRecord:
    """One method on one dataset and seed: the tag mass (mean over probes, last epoch) of the spurious
    and the clean model, the spurious model's tag rank accuracy, the AUROC of telling them apart by one
    probe's mass, the first flagged epoch, the first spurious epoch and the final spurious score.

    For a negative control (``dataset`` ending in " control") the control model stands in for the
    spurious one: it should not be flagged.
    """

    dataset: str
    seed: int
    method: str
    tag_mass_spurious: float
    tag_mass_clean: float
    tag_rank_spurious: float
    detection_auroc: float
    first_flag_epoch: float | None
    spurious_epoch: float | None
    spurious_score: float


@dataclass(frozen=True)
class ModelRecord:
    """One trained model: its final validation accuracy (on its own, tagged as trained, validation
    split), spurious score on the transplanted test set, first spurious epoch, training seconds."""

    dataset: str
    seed: int
    variant: Variant
    epochs: int | None
    traces_per_epoch: int
    val_accuracy: float
    spurious_score: float
    spurious_epoch: float | None
    train_seconds: float
