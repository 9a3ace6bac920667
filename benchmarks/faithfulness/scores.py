"""The score columns of the faithfulness benchmark: a registry of per-image scores.

Every score maps one method's maps on the subset to a value per image (n,) (or to None when the
dataset cannot rate it, e.g. the Pointing Game without object masks), so the means, bootstrap
intervals and paired differences treat all scores alike. A new column is one :class:`Score` entry
in :data:`SCORES`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
from torch import Tensor, nn

from gradskip_lightning.metrics import (
    class_sensitivity,
    faithfulness_violation,
    insertion_deletion,
    parameter_randomisation,
    pointing_game,
)
from gradskip_lightning.metrics.sensitivity import runner_up_classes

from .maps import MapFn, adapter_of


@dataclass
class ScoreInputs:
    """One method on one model and subset: what any score may read.

    Attributes:
        model: eval-mode module, images -> logits.
        images: (n, C, H, W) normalised; targets: (n,) classes explained; maps: (n, H, W).
        masks: (n, H, W) bool object masks, or None when the dataset has none.
        map_fn: the method, for scores that explain again (randomisation).
        steps: insertion/deletion steps K; batch_size: perturbed images per forward.
        patch_size: pixels per perturbed patch (ph, pw), the model's (its adapter's ``patch_size``).
        randomisation_images: the first this many images are used by the randomisation score.
        seed: seed of the re-initialisation in the randomisation score.
    """

    model: nn.Module
    images: Tensor
    targets: Tensor
    maps: Tensor
    masks: Tensor | None
    map_fn: MapFn
    steps: int
    batch_size: int
    patch_size: tuple[int, int]
    randomisation_images: int
    seed: int

    def perturbed(self, metric: Callable[..., Any], **options: Any) -> Any:
        """``metric(model, images, targets, maps, patch_size=, batch_size=, **options)`` without gradients: a
        score that perturbs the images patch by patch."""
        with torch.no_grad():
            return metric(
                self.model,
                self.images,
                self.targets,
                self.maps,
                patch_size=self.patch_size,
                batch_size=self.batch_size,
                **options,
            )

    @cached_property
    def insertion_deletion(self) -> dict[str, Tensor]:
        """Per-image insertion, deletion and their difference (n,), computed once for three columns."""
        return self.perturbed(insertion_deletion, steps=self.steps)


def _violations(inputs: ScoreInputs) -> Tensor:
    return inputs.perturbed(faithfulness_violation).double()


def _pointing(inputs: ScoreInputs) -> Tensor | None:
    return None if inputs.masks is None else pointing_game(inputs.maps, inputs.masks).double()


def _randomisation(inputs: ScoreInputs) -> Tensor:
    """Spearman of each image's maps to the trained model's maps, averaged over the cascade's steps."""
    few = slice(0, inputs.randomisation_images)
    curve = parameter_randomisation(
        inputs.model,
        inputs.images[few],
        inputs.targets[few],
        lambda model, images, targets: inputs.map_fn(model, images, targets).detach(),
        seed=inputs.seed,
        cascade_for=adapter_of,
    )
    return curve.similarity.nanmean(dim=0).double()


def _class_sensitivity(inputs: ScoreInputs) -> Tensor:
    """Spearman of each image's maps for its top-1 and top-2 predicted classes (1 = class-agnostic)."""
    with torch.no_grad():
        logits = inputs.model(inputs.images)
    top1 = logits.argmax(dim=1)
    maps = [inputs.map_fn(inputs.model, inputs.images, t).detach() for t in (top1, runner_up_classes(logits, top1))]
    return class_sensitivity(*maps).double()


@dataclass(frozen=True)
class Score:
    """A score column.

    Attributes:
        name: key in the records' ``scores`` dicts.
        label: column title in the tables.
        higher_is_better: direction, for the arrows and the ahead/behind verdicts.
        per_image: inputs -> (n,) values per image (or per image of a prefix of the subset), or None.
        in_ablations: also scored in the ablation tables (False for costly scores).
    """

    name: str
    label: str
    higher_is_better: bool
    per_image: Callable[[ScoreInputs], Tensor | None]
    in_ablations: bool = True

    @property
    def title(self) -> str:
        """The label with its direction arrow, e.g. "ins ↑"."""
        return f"{self.label} {'↑' if self.higher_is_better else '↓'}"


#: Every score column, in table order.
SCORES: tuple[Score, ...] = (
    Score("insertion", "ins", True, lambda inputs: inputs.insertion_deletion["insertion"].double()),
    Score("deletion", "del", False, lambda inputs: inputs.insertion_deletion["deletion"].double()),
    Score(
        "insertion_minus_deletion",
        "ins−del",
        True,
        lambda inputs: inputs.insertion_deletion["insertion_minus_deletion"].double(),
    ),
    # the start image's probability: the same for every method; near the clean one, insertion is saturated
    Score("insertion_start", "ins start", False, lambda inputs: inputs.insertion_deletion["insertion_start"].double()),
    Score("fvt_violation", "FVT", False, _violations),
    Score("pointing_game", "PG", True, _pointing),
    Score("class_sensitivity", "class sens.", False, _class_sensitivity, in_ablations=False),
    Score("randomisation_similarity", "rand. sim.", False, _randomisation, in_ablations=False),
)


def scored(names: Iterable[str]) -> tuple[Score, ...]:
    """The :data:`SCORES` named in ``names`` (e.g. the keys of a run's values), in table order."""
    present = set(names)
    return tuple(score for score in SCORES if score.name in present)


def score_all(inputs: ScoreInputs, scores: tuple[Score, ...] = SCORES) -> dict[str, Tensor | None]:
    """Per-image values of each of ``scores``, keyed by name."""
    return {score.name: score.per_image(inputs) for score in scores}
