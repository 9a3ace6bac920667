"""Finding a shortcut nobody named: per-class summaries of token maps, hotspot transplant tests, a suspicion
score and a calibrated alarm.

Token maps (P, h, w) of probes of classes (P,) are summarised per class (:mod:`.discovery_maps`:
:func:`summarise_classes`, or :class:`ClassMapSummary` over batches and processes): the mean of the
normalised maps, its hotspot (the fewest patches holding ``hotspot_share`` of the mean's mass), the
consistency of the maps and their SpRAy strategies (:mod:`.discovery_strategies`). :func:`discover`
then tests groups of probes (:class:`~.discovery_maps.MapGroup`: each class, for a class with two
SpRAy strategies or more each strategy, its shared-patch group: a shortcut used by part of a class; and the copy group
of the pixel sample's copied patch, :mod:`.discovery_pixels`: a stamp no map points at) at one or two
regions each (the group's hotspot and, with ``neighbour_relevance``, the hotspot grown by its relevant
neighbouring patches: an artefact across a patch boundary), pasting the region onto the other
classes' probes (:mod:`.discovery_transplant`). This module gathers the public names.

Suspicion of one test, in [0, 1] (NaN where a term is undefined)::

    suspicion = excess * (concentration * constancy) ** (1 / 2)                     (the default)
    suspicion = excess * (concentration * constancy * max(0, consistency)) ** (1 / 3)  (consistency=True)
    excess = max(0, flip_rate - max(random_flip_rate, other_class_flip_rate))
    concentration = clamp(1 - hotspot_patches / (hotspot_share * h * w), 0, 1)       (the group's hotspot)
    constancy = clamp((a - a_o) / (1 - a_o), 0, 1)                                  (the region's pixels)

with ``a`` the share of the group's image pairs whose region pixels agree and ``a_o`` that share
within the other classes (chance): s^2 for a stamp on a share s of the group
(:func:`~.discovery_transplant.constancy_test`), so a stamp on 60 % of a class still counts (0.36;
the suspicion's square root makes it 0.6), and its strategy, when SpRAy separates it, counts fully.

The calibrated alarm. Each test has two p-values (a shortcut needs both): the flips' exact sign test
against each control, whose pasted copies are the null's draws (a region of the same shape at a random
place, the same place from another class; no forward beyond the controls'), and the constancy's
one-sided jackknife z-test of ``a - a_o > 0`` (pixels only). Over the N tests of the run with both
(classes x groups x regions), :func:`~.multiplicity.gated_holm` adjusts them: the flips first, Holm at
``alpha / 2`` over every test, then the pixels, Holm at ``alpha / 2`` over the tests whose flips passed
(family-wise error rate ``alpha``; it replaced the larger of the two p-values times N, which let the
pixels' test of a class's few probes veto overwhelming flips). A test fires when its adjusted p-value
is at most ``alpha`` and its suspicion at least ``alert_threshold`` (the effect-size floor). A class is
flagged when one of its tests fires; the class's reported test is the most suspicious test that fires,
else its most suspicious test: its suspicion and adjusted p-value are the class's (so a class's
suspicion is the max over the class and its strategies unless a less suspicious test alone fires).

Why: maps alone cannot tell a shortcut from an object part the model rightly relies on (both can
be focused and alike across images), so the causal evidence, the flips the region's own pixels
cause beyond both controls, scales the score and bounds it. The three map cues say how much the
hotspot looks like an artefact; their geometric mean stays in [0, 1], weighs them alike (nothing to
tune) and is 0 if any is: a region that differs from image to image (constancy 0, an object), a
hotspot as large as a uniform map's (concentration 0) or maps that disagree (consistency <= 0).
The p-value says whether the flips and the agreement stand out from what the controls and the other
classes give on this model, data and method, given how many probes there are; the floor says what a
p-value cannot, how large the effect is (with many recipients a tiny excess is significant).

Measured: docs/discovery.md (planted shapes and BloodMNIST, 9 methods; the defaults come from there).

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

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from gradskip_lightning.core.validation import check_class_targets
from gradskip_lightning.metrics.perturbation import Activation

from .discovery_maps import (
    ClassMaps,
    ClassMapSummary,
    DiscoverySettings,
    MapGroup,
    concentration,
    grown_hotspot,
    summarise_classes,
)
from .discovery_pixels import CopiedPatch, PixelSample, copy_carriers
from .discovery_strategies import Strategies
from .discovery_transplant import (
    FIRST_LOOK,
    MIN_TESTED_PROBES,
    HotspotTransplant,
    PatchAgreements,
    constancy_test,
    hotspot_transplant,
    patch_shape,
)
from .multiplicity import gated_holm
from .regions import patch_pixels

__all__ = [
    "ClassMapSummary",
    "ClassMaps",
    "Discovery",
    "DiscoverySettings",
    "HotspotTransplant",
    "MapGroup",
    "PixelSample",
    "ShortcutTest",
    "Strategies",
    "discover",
    "hotspot_transplant",
    "summarise_classes",
    "suspicion_score",
]


@dataclass(frozen=True, eq=False)
class ShortcutTest:
    """One test: a group's region pasted onto the other classes' probes.

    Attributes:
        group: the :class:`MapGroup` (a class, one of its strategies, or its shared-patch group) whose probes gave
            the region.
        region: (h, w) bool the patches pasted: the group's hotspot, or that hotspot grown.
        grown: whether ``region`` is the grown hotspot.
        transplant: the :class:`HotspotTransplant` of the region.
        suspicion: in [0, 1] (module docstring); NaN where a term is undefined.
        p_value: adjusted over the run's tests (:func:`~.multiplicity.gated_holm` of the transplant's flips' and
            pixels' p-values); NaN where either is undefined.
        method: the method whose maps gave ``group`` (a name of the summaries :func:`discover` was given by name;
            None for a lone summary and a copy group: its pixels gave it).
    """

    group: MapGroup
    region: Tensor
    grown: bool
    transplant: HotspotTransplant
    suspicion: float
    p_value: float
    method: str | None = None

    @property
    def box(self) -> tuple[int, int, int, int]:
        """The region's bounding box in patches: top, left, bottom, right (exclusive); zeros when empty."""
        if not self.region.any():
            return (0, 0, 0, 0)
        rows, cols = self.region.any(dim=1).nonzero()[:, 0], self.region.any(dim=0).nonzero()[:, 0]
        return (int(rows[0]), int(cols[0]), int(rows[-1]) + 1, int(cols[-1]) + 1)


@dataclass(frozen=True)
class Discovery:
    """What :func:`discover` found, per class (K classes).

    Attributes:
        summaries: the :class:`ClassMaps` the groups and hotspots came from, by method (the key None for a lone
            summary).
        tests: per class its :class:`ShortcutTest` s (per summary, the class's hotspot first, then grown, then each
            strategy's, then the shared-patch group's).
        reported: K tests, one per class: the most suspicious test that fires, else the most suspicious one
            (the class's hotspot test when none is defined).
        suspicion: (K,) float64 the reported tests' suspicion; NaN where undefined.
        p_values: (K,) float64 the reported tests' adjusted p-values (:func:`~.multiplicity.gated_holm`).
        flagged: (K,) bool a test of the class fires: adjusted p-value <= ``alpha`` and suspicion >=
            ``alert_threshold``.
    """

    summaries: dict[str | None, ClassMaps]
    tests: tuple[tuple[ShortcutTest, ...], ...]
    reported: tuple[ShortcutTest, ...]
    suspicion: Tensor
    p_values: Tensor
    flagged: Tensor

    @property
    def summary(self) -> ClassMaps:
        """The first summary (the one of the first method given)."""
        return next(iter(self.summaries.values()))

    def summary_of(self, test: ShortcutTest) -> ClassMaps:
        """The summary whose group ``test`` tested (a copy group's: the first)."""
        return self.summaries.get(test.method, self.summary)

    @property
    def transplants(self) -> tuple[HotspotTransplant, ...]:
        """The reported tests' transplants, one per class."""
        return tuple(test.transplant for test in self.reported)

    @property
    def tests_run(self) -> int:
        """N: the tests with a finite p-value (the family adjusted over)."""
        return sum(not math.isnan(t.p_value) for tests in self.tests for t in tests)


def suspicion_score(excess: float, concentration: float, constancy: float, consistency: float | None = None) -> float:
    """Suspicion in [0, 1] of one test (module docstring): ``excess`` times the geometric mean of concentration,
    constancy and, when given, ``max(0, consistency)``; NaN when a term is.

    Example:
        >>> round(suspicion_score(0.5, 1 - 1 / 4.5, 1.0), 4), suspicion_score(0.5, 0.8, 0.0)
        (0.441, 0.0)
        >>> round(suspicion_score(0.6, 0.8, 1.0, consistency=-0.2), 4), math.isnan(suspicion_score(math.nan, 1.0, 1.0))
        (0.0, True)
    """
    cues = [concentration, constancy] + ([] if consistency is None else [consistency])
    if math.isnan(excess) or any(math.isnan(c) for c in cues):
        return math.nan
    if consistency is not None:
        cues[-1] = max(0.0, consistency)
    return excess * math.prod(cues) ** (1 / len(cues))


def _regions(group: MapGroup, settings: DiscoverySettings) -> list[tuple[Tensor, bool]]:
    """The regions a group is tested at: its hotspot, and grown when that adds a patch (not a shared-patch group's: on
    the stamps it found, its grown region scored under its patch, and costs a test)."""
    regions = [(group.hotspot, False)]
    if settings.neighbour_relevance is not None and group.shared_patch is None:
        grown = grown_hotspot(group.hotspot, group.mean_map, settings.neighbour_relevance)
        if not torch.equal(grown, group.hotspot):
            regions.append((grown, True))
    return regions


def _distinct_tests(
    summaries: Mapping[str | None, ClassMaps], label: int, settings: DiscoverySettings, copies: MapGroup | None = None
) -> list[tuple[MapGroup, Tensor, bool, str | None]]:
    """Class ``label``'s tests, (group, region, grown, method), in the order of the summaries and their groups: one per
    distinct (members, region), of the method whose group's cues (concentration, consistency) are the highest, so a
    test two methods' maps share is run once at the higher suspicion either gives it (the region's constancy is the
    same for both); a strategy of fewer than :data:`~.discovery_transplant.MIN_TESTED_PROBES` probes is not tested.
    Last the copy group ``copies`` when it is the class's, unless a group of the maps gave the same test."""

    def cues(group: MapGroup) -> float:
        consistency = group.consistency if settings.consistency else None
        score = suspicion_score(1.0, group.concentration, 1.0, consistency)
        return -math.inf if math.isnan(score) else score

    tests: dict[tuple[bytes, bytes], tuple[MapGroup, Tensor, bool, str | None]] = {}
    for method, each in summaries.items():
        for group in each.groups[label]:
            if not group.whole and len(group.members) < MIN_TESTED_PROBES:
                continue
            for region, grown in _regions(group, settings):
                key = (group.members.cpu().numpy().tobytes(), region.cpu().numpy().tobytes())
                if key not in tests or cues(group) > cues(tests[key][0]):
                    tests[key] = (group, region, grown, method)
    if copies is not None and copies.label == label:
        key = (copies.members.numpy().tobytes(), copies.hotspot.cpu().numpy().tobytes())
        tests.setdefault(key, (copies, copies.hotspot, False, None))
    return list(tests.values())


def _copy_group(
    copied: CopiedPatch,
    images: Tensor,
    classes: Tensor,
    sample: PixelSample,
    summary: ClassMaps,
    patch: tuple[int, int],
) -> MapGroup | None:
    """The copy group of ``copied``'s class: its probes (P, C, H, W) of ``classes`` (P,) whose pixels at the patch
    are identical to another image of the class in ``sample``; None with fewer than
    :data:`~.discovery_transplant.MIN_TESTED_PROBES` such probes (it could not fire)."""
    region = torch.zeros(summary.mean_maps.shape[1:], dtype=torch.bool)
    region[copied.patch] = True
    own = (classes == copied.label).nonzero()[:, 0]
    partners = sample.classes.to(sample.images.device) == copied.label
    carriers = copy_carriers(images, own, sample.images, patch_pixels(region, patch), partners)
    if len(carriers) < MIN_TESTED_PROBES:
        return None
    return MapGroup(
        label=copied.label,
        strategy=None,
        members=carriers.cpu(),
        share=len(carriers) / len(own),
        mean_map=region.double(),
        hotspot=region,
        concentration=float(concentration(region[None], summary.settings.hotspot_share)[0]),
        consistency=math.nan,
        shared_patch=copied.patch,
        copied=True,
    )


def _check_pixel_sample(sample: PixelSample, images: Tensor, num_classes: int) -> None:
    """Refuse a pixel sample whose images are not of the probes' (P, C, H, W) kind and device, or whose classes are
    not of the summaries' ``num_classes``."""
    check_class_targets(sample.classes, len(sample.images), num_classes)
    if sample.images.shape[1:] != images.shape[1:] or sample.images.device != images.device:
        raise ValueError(
            f"discover: the pixel sample's images are {tuple(sample.images.shape[1:])} on {sample.images.device}, the "
            f"probes' {tuple(images.shape[1:])} on {images.device}: they must be images of the same kind and device"
        )


def _could_fire(transplant: HotspotTransplant, suspicion: float, settings: DiscoverySettings) -> bool:
    """Whether a measured test can fire once every test is measured: its suspicion at the floor and each of its p-values
    at most ``alpha / 2`` (each stage of :func:`~.multiplicity.gated_holm` at least doubles it); False when NaN."""
    half = settings.alpha / 2
    p_values = (transplant.flip_p_value, transplant.constancy_p_value)
    return suspicion >= settings.alert_threshold and all(p <= half for p in p_values)


def _fires(test: ShortcutTest, settings: DiscoverySettings) -> bool:
    return test.p_value <= settings.alpha and test.suspicion >= settings.alert_threshold  # False when NaN


def _reported(tests: tuple[ShortcutTest, ...], settings: DiscoverySettings) -> ShortcutTest:
    """The most suspicious test that fires, else the most suspicious (ties: the first), else the first."""
    firing = [t for t in tests if _fires(t, settings)]
    defined = [t for t in firing or tests if not math.isnan(t.suspicion)]
    return max(defined, key=lambda t: t.suspicion) if defined else tests[0]


_Run = tuple[MapGroup, Tensor, bool, HotspotTransplant, float, str | None]


def discover(
    model: Callable[[Tensor], Tensor],
    images: Tensor,
    classes: Tensor,
    summary: ClassMaps | Mapping[str, ClassMaps],
    *,
    patch_size: int | tuple[int, int],
    batch_size: int = 256,
    activation: Activation = "softmax",
    measure_all: bool = True,
    first_look: int | None = FIRST_LOOK,
    pixel_sample: PixelSample | None = None,
) -> Discovery:
    """Test every group of ``summary`` at its regions on the probes (P, C, H, W) of classes (P,), score and flag.

    ``summary`` is :func:`summarise_classes` of these probes' token maps (or a :class:`ClassMapSummary`) with
    the probes' positions (its groups' members are positions among ``images``); its settings give the seed,
    ``alpha``, the floor and the growth. Several summaries by method name (the maps of several methods of the same
    probes, with the same settings): every summary's groups are tested, a region two of them give with the same
    donors once (under the method whose group's cues give it the higher suspicion), and one Holm adjusts every
    test, so a class is flagged when a test of any method's maps fires. A class without probes or without a
    hotspot gets NaN rates and NaN suspicion; a group of fewer than :data:`~.discovery_transplant.MIN_TESTED_PROBES`
    (3) probes has no p-value (it never fires), so a strategy that small is not tested. See
    :func:`hotspot_transplant` for ``model``, ``batch_size`` and ``activation``; the unchanged probes go
    through ``model`` once, then each test pastes 3 copies of each recipient.

    ``measure_all=False`` (the callback's stage) skips the forwards of the tests that cannot fire while no test
    can: a test whose map and pixel cues are 0 (concentration or constancy; consistency with
    ``settings.consistency``) has suspicion 0 whatever its flips, below a positive ``alert_threshold``; a
    shared-patch group whose pixels' p-value is over ``alpha / 2`` cannot pass (its suspicion is then NaN: a few
    probes' pixels agree by chance often enough to reach the floor on a cell feature, and such tests were most of
    the groups' forwards on clean models). Those tests are measured last, and only when a measured test could fire
    (its suspicion reaches ``alert_threshold`` and its flips' and pixels' p-values are each at most ``alpha / 2``,
    which the adjustment at least doubles): then every one of them is measured. The unmeasured tests keep their
    pixels' figures, NaN rates (``transplant.measured`` False) and a flips' p-value of 1, so the measured tests'
    adjusted p-values are at least those of a full run. The others first measure
    ``first_look`` recipients (:data:`~.discovery_transplant.FIRST_LOOK`; the other classes in turn) and stop there
    when those give less than half of ``alert_threshold`` (their rates, suspicion and p-value are then the first
    recipients'): a test that could fire goes on to every recipient, and on a model without a shortcut most stop.
    ``first_look`` None: every measured test takes every recipient.

    ``pixel_sample``: more images of the classes (:class:`~.discovery_transplant.PixelSample`; the callback's stage:
    32 a class, the probes among them, on the probes' device): a whole class's pixel test reads every one of its
    images there, a strategy's its members among the probes. The pixels need no forward, and a stamp on part of a
    class is shared by few of its 8 probes (5 in a case the probes alone missed), too few pairs for its agreement
    to stand out; None: the probes. With ``settings.copy_permutations``, the sample's copied patch
    (:meth:`~.discovery_pixels.PixelSample.copied_patch`) gives its class a copy group: the class's probes whose
    pixels there are identical to another image of the class, tested at that patch, its pixels' p-value the
    permutation test's (``measure_all=False`` treats it as a shared-patch group).
    """
    named = {None: summary} if isinstance(summary, ClassMaps) else summary
    summaries: dict[str | None, ClassMaps] = dict(named.items())
    if not summaries:
        raise ValueError("discover needs a summary")
    first = next(iter(summaries.values()))
    for each in summaries.values():
        check_class_targets(classes, len(images), len(each.counts))
        if each.settings != first.settings or each.counts.tolist() != first.counts.tolist():
            raise ValueError("the summaries of discover must be of the same probes with the same settings")
    settings = first.settings
    with torch.no_grad():
        logits = torch.cat([model(images[start : start + batch_size]) for start in range(0, len(images), batch_size)])
    if pixel_sample is not None:
        _check_pixel_sample(pixel_sample, images, len(first.counts))
    probe_agreements = PatchAgreements.of(images, classes, patch_size)  # every test's pixel agreement, from one pass
    patch = patch_shape(patch_size)

    copied, copies = None, None
    if pixel_sample is not None and settings.copy_permutations is not None:
        copied = pixel_sample.copied_patch(patch_size, settings.copy_permutations, settings.seed)
        copies = None if copied is None else _copy_group(copied, images, classes, pixel_sample, first, patch)

    def pixel_test(group: MapGroup, region: Tensor) -> tuple[float, float]:
        """(constancy, p-value): a whole class on the pixel sample (when given), another group (a strategy, a
        shared-patch group) on its members: the class's pixels would dilute a stamp on part of it by the share
        squared. A copy group's members are chosen by their pixels: its p-value is the copied patch's."""
        pixels = patch_pixels(region, patch)
        if group.whole and pixel_sample is not None:
            counts = pixel_sample.agreements(patch_size).region(region)
            return constancy_test(pixel_sample.images, pixel_sample.classes, group.label, pixels, None, counts)
        tested = constancy_test(images, classes, group.label, pixels, group.members, probe_agreements.region(region))
        return (tested[0], copied.p_value) if group.copied and copied is not None else tested

    def transplant(
        group: MapGroup, region: Tensor, tested: tuple[float, float], measure: bool, futile_below: float = 0.0
    ) -> HotspotTransplant:
        """The region's transplant, its pixels already ``tested`` (constancy, p-value): once per test."""
        return hotspot_transplant(
            model,
            images,
            classes,
            region,
            group.label,
            patch_size=patch_size,
            donors=group.members,
            seed=settings.seed,
            batch_size=batch_size,
            activation=activation,
            logits=logits,
            measure=measure,
            first_look=None if measure_all else first_look,
            futile_below=futile_below,
            pixel_test=tested,
        )

    def scored(group: MapGroup, region: Tensor, grown: bool, result: HotspotTransplant, method: str | None) -> _Run:
        consistency = group.consistency if settings.consistency else None
        if result.measured:
            score = suspicion_score(result.excess, group.concentration, result.constancy, consistency)
        else:  # cues of 0: 0 whatever the flips; NaN without recipients, or left with cues (pixels that cannot pass)
            cues = suspicion_score(1.0, group.concentration, result.constancy, consistency)
            score = 0.0 if result.recipients and cues == 0 else math.nan
        return (group, region, grown, result, score, method)

    def remeasured(run: _Run) -> HotspotTransplant:
        """An unmeasured test's transplant, measured, with the pixel test it already has."""
        tested = (run[3].constancy, run[3].constancy_p_value)
        return transplant(run[0], run[1], tested, True)

    runs: list[list[_Run]] = []
    for label in range(len(first.counts)):
        found = []
        for group, region, grown, method in _distinct_tests(summaries, label, settings, copies):
            tested = pixel_test(group, region)
            lazy = not measure_all and settings.alert_threshold > 0
            result = transplant(group, region, tested, False) if lazy else None
            if result is not None:
                consistency = group.consistency if settings.consistency else None
                cues = suspicion_score(1.0, group.concentration, result.constancy, consistency)
                hopeless = group.shared_patch is not None and not result.constancy_p_value <= settings.alpha / 2
                if cues > 0 and not hopeless:  # measured now (stopped at its first look below half the floor)
                    result = transplant(group, region, tested, True, settings.alert_threshold / 2 / cues)
                elif math.isnan(cues):
                    result = transplant(group, region, tested, True)
            found.append(scored(group, region, grown, result or transplant(group, region, tested, True), method))
        runs.append(found)
    if any(_could_fire(run[3], run[4], settings) for found in runs for run in found):
        runs = [
            [run if run[3].measured else scored(*run[:3], remeasured(run), run[5]) for run in found] for found in runs
        ]
    flat = [run[3] for found in runs for run in found]
    adjusted = iter(
        gated_holm(
            torch.tensor([t.flip_p_value for t in flat], dtype=torch.float64),
            torch.tensor([t.constancy_p_value for t in flat], dtype=torch.float64),
            settings.alpha,
        ).tolist()
    )
    tests = [tuple(ShortcutTest(*run[:5], p_value=next(adjusted), method=run[5]) for run in found) for found in runs]
    reported = tuple(_reported(found, settings) for found in tests)
    device = first.consistency.device
    suspicion = torch.tensor([t.suspicion for t in reported], dtype=torch.float64, device=device)
    p_values = torch.tensor([t.p_value for t in reported], dtype=torch.float64, device=device)
    flagged = torch.tensor([any(_fires(t, settings) for t in found) for found in tests], device=device)
    return Discovery(summaries, tuple(tests), reported, suspicion, p_values, flagged)
