"""Finding a shortcut nobody named: per-class summaries of token maps, a hotspot transplant test, a suspicion score.

Token maps (P, h, w) of probes of classes (P,) are summarised per class (:mod:`.discovery_maps`:
:func:`summarise_classes`, or :class:`ClassMapSummary` over batches and processes): the mean of the
normalised maps, its hotspot (the fewest patches holding ``hotspot_share`` of the mean's mass), the
consistency of the maps and their SpRAy strategies (:mod:`.discovery_strategies`). :func:`discover`
then pastes each class's hotspot onto the other classes' probes (:mod:`.discovery_transplant`) and
scores how suspicious each class is. This module gathers the public names.

Suspicion of class c, in [0, 1] (NaN where a term is undefined)::

    suspicion = excess * (concentration * constancy) ** (1 / 2)                     (the default)
    suspicion = excess * (concentration * constancy * max(0, consistency)) ** (1 / 3)  (consistency=True)
    excess = max(0, flip_rate - max(random_flip_rate, other_class_flip_rate))
    concentration = clamp(1 - hotspot_patches / (hotspot_share * h * w), 0, 1)

Why: maps alone cannot tell a shortcut from an object part the model rightly relies on (both can
be focused and alike across images), so the causal evidence, the flips the hotspot's own pixels
cause beyond both controls, scales the score and bounds it. The three map cues say how much the
hotspot looks like an artefact; their geometric mean stays in [0, 1], weighs them alike (nothing to
tune) and is 0 if any is: a region that differs from image to image (constancy 0, an object), a
hotspot as large as a uniform map's (concentration 0) or maps that disagree (consistency <= 0).

Measured (docs/discovery.md, planted shapes, 3 seeds, 9 methods): a hotspot share of 0.1, the
formula without consistency and an alert threshold of 0.15 detect every stamp with GradSkip, rollout
and LRP with no false alarm on clean and control models (the highest of theirs: 0.03); with
consistency, or at share 0.25, fewer stamps reach the threshold. Hence the defaults.

Design note: which controls should separate a stamped class from a clean one.

- The excess over control (b), the hotspot taken from other classes' probes, is the main separator.
  On a clean model with centred objects the hotspot is "where objects are"; pasting any probe's
  centre there destroys the recipient's object and may already produce c (a default class), which
  (b) measures. A stamp exists only on class c, so (b) stays near 0 while the test flips.
- Control (a), a random place of class-c probes, removes class-wide cues (colour, stain, blur) that
  any region of a class-c image carries; a local stamp flips it only when the place hits the stamp.
- Constancy tells a stamp (the same pixels in every image) from a discriminative object part that
  transplants too (a basophil's granules): expected to be the strongest cue after the excess for a
  burnt-in stamp, weak for artefacts that vary (a ruler at different places).
- Concentration and consistency separate little where objects are centred (a clean model's maps
  are focused and alike too), hence they only modulate the score. Consistency ranks every patch, so
  the part of the maps off the stamp (the object, wherever it is) dominates it: a stamped class whose
  objects move scores low there (0.07 in the known-answer test: a factor 0.4 on the suspicion).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from gradskip_lightning.core.validation import check_class_targets

from .discovery_maps import ClassMaps, ClassMapSummary, DiscoverySettings, summarise_classes
from .discovery_strategies import Strategies
from .discovery_transplant import HotspotTransplant, hotspot_transplant
from .perturbation import Activation

__all__ = [
    "ClassMapSummary",
    "ClassMaps",
    "Discovery",
    "DiscoverySettings",
    "HotspotTransplant",
    "Strategies",
    "discover",
    "hotspot_transplant",
    "summarise_classes",
    "suspicion_scores",
]


@dataclass(frozen=True)
class Discovery:
    """What :func:`discover` found, per class (K classes).

    Attributes:
        summary: the :class:`ClassMaps` the hotspots came from.
        transplants: K :class:`HotspotTransplant`, one per class in class order.
        suspicion: (K,) float64 in [0, 1] (module docstring); NaN where a term is undefined.
        flagged: (K,) bool suspicion >= ``summary.settings.alert_threshold``.
    """

    summary: ClassMaps
    transplants: tuple[HotspotTransplant, ...]
    suspicion: Tensor
    flagged: Tensor


def suspicion_scores(summary: ClassMaps, transplants: tuple[HotspotTransplant, ...]) -> Tensor:
    """Suspicion (K,) float64 of each class from its summary and transplant test (formula: module docstring;
    without ``summary.settings.consistency`` the square root of concentration x constancy replaces the cube root).

    Example:
        >>> maps = torch.full((4, 3, 3), 0.1)
        >>> maps[:, 0, 0] = torch.tensor([5.0, 5.0, 4.0, 4.0])
        >>> summary = summarise_classes(maps, torch.tensor([0, 0, 1, 1]), 2, DiscoverySettings(hotspot_share=0.5))
        >>> clean = HotspotTransplant(0, recipients=10, flip_rate=0.1, random_flip_rate=0.1, other_class_flip_rate=0.0,
        ...                           constancy=0.0)
        >>> stamp = HotspotTransplant(1, recipients=10, flip_rate=0.6, random_flip_rate=0.1, other_class_flip_rate=0.0,
        ...                           constancy=1.0)
        >>> [round(s, 4) for s in suspicion_scores(summary, (clean, stamp)).tolist()]  # 0.5 * (1 - 1 / 4.5) ** (1 / 2)
        [0.0, 0.441]
    """
    if [t.target for t in transplants] != list(range(len(summary.counts))):
        raise ValueError(f"transplants must be one per class in class order 0..{len(summary.counts) - 1}")
    device = summary.consistency.device
    excess = torch.tensor([t.excess for t in transplants], dtype=torch.float64, device=device)
    constancy = torch.tensor([t.constancy for t in transplants], dtype=torch.float64, device=device)
    if not summary.settings.consistency:
        return excess * (summary.concentration * constancy).sqrt()
    evidence = summary.concentration * constancy * summary.consistency.clamp(min=0)
    return excess * evidence.pow(1 / 3)


def discover(
    model: Callable[[Tensor], Tensor],
    images: Tensor,
    classes: Tensor,
    summary: ClassMaps,
    *,
    patch_size: int | tuple[int, int],
    batch_size: int = 256,
    activation: Activation = "softmax",
) -> Discovery:
    """Transplant every class's hotspot from ``summary`` onto the probes (P, C, H, W) of classes (P,) and score it.

    ``summary`` is :func:`summarise_classes` of these probes' token maps (or a :class:`ClassMapSummary`);
    its settings give the seed and the alert threshold. A class without probes or without a hotspot
    gets NaN rates and NaN suspicion. See :func:`hotspot_transplant` for ``model``, ``batch_size``
    and ``activation``; the unchanged probes go through ``model`` once for every class.
    """
    check_class_targets(classes, len(images), len(summary.counts))
    with torch.no_grad():
        logits = torch.cat([model(images[start : start + batch_size]) for start in range(0, len(images), batch_size)])
    transplants = tuple(
        hotspot_transplant(
            model,
            images,
            classes,
            summary.hotspots[label],
            label,
            patch_size=patch_size,
            seed=summary.settings.seed,
            batch_size=batch_size,
            activation=activation,
            logits=logits,
        )
        for label in range(len(summary.counts))
    )
    suspicion = suspicion_scores(summary, transplants)
    return Discovery(summary, transplants, suspicion, suspicion >= summary.settings.alert_threshold)
