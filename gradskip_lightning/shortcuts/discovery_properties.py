"""Global property transplants: a shortcut with no place (a colour cast, a blur, noise) found by giving
other classes' probes one class's image-wide statistics.

For a class k and a property p of :mod:`.image_properties`, the recipients are the probes of the other
classes that the model does not already predict as k. Each is given, by p's transfer in pixel space
(:class:`~.image_properties.PixelSpace`), the statistics of

- a class-k probe (donors in turn over the other classes' probes, whatever the model predicts:
  :mod:`.probe_transfers`): ``flip_rate``, the share of recipients then predicted as k;
- (control) a probe of a third class, neither k nor the recipient's (in turn over those probes; with two
  classes, another probe of the recipient's own class): ``control_flip_rate``, how much changing p
  at all flips to k.

A recipient's transferred images depend on the probes alone, so a fit computes them once
(:class:`~.probe_transfers.ProbeTransfers`, kept by the stage between epoch ends); each distinct image goes
through the model once a call, and every test's early look goes in full batches before the tests.

``separability`` is how well p's statistic alone tells class k's probes from the others': the AUROC of
minus each probe's distance to the class-k probes' mean statistic (leaving the probe out of that mean
for class k's own), every statistic divided by its pooled within-class standard deviation. A flip is
a prediction of k: its arg-max (softmax) or its sigmoid above 0.5 (multi-label).

Suspicion of class k for property p, in [0, 1] (NaN where a rate is undefined)::

    suspicion = max(0, flip_rate - control_flip_rate)

The calibrated alarm, as the hotspot's (:mod:`.discovery`): ``p_value`` is the exact one-sided sign test
of the class's flips against the control's over the recipients that flip under one arm only (both
arms give each recipient a statistic: the control's draws are the null's), adjusted by Holm's step-down over
the run's (class, property) tests of finite p-value (:func:`~.multiplicity.holm`). A class is
flagged for p when its adjusted p-value is at most ``alpha`` and its suspicion at least
``alert_threshold`` (the effect-size floor). A class of fewer than
:data:`~.discovery_transplant.MIN_TESTED_PROBES` (3) probes has no p-value: scored, never flagged, as in
the hotspot test.

The signature first: with ``signature`` among the properties, every class's signature (all its statistics at
once) is tested first, and a class whose signature's suspicion stays under the floor (``alert_threshold``; a test
stopped at its first look included) is not tested for the properties the signature gives: those tests are skipped
(NaN rates, p-value 1, ``skipped``). The signature gives each of those statistics too, so a shortcut carried by one
of them flips recipients under it as well; the single tests then name the axis of a class whose signature reaches
the floor.
``hue``, ``compression``, ``tone``, ``fixed_pattern`` and ``illumination``, which the signature does not give, are
tested for every class. On a model without a global shortcut this runs six tests per class instead of one per
property.

Why (docs/discovery.md, *Global properties*: planted shapes and BloodMNIST, clean models and models with a
colour cast or a darkening on one class): the flips a class's statistics cause are the evidence, as the
hotspot's are; the control removes what any change of the property does (a default class that catches
every odd image: up to 0.40 of the recipients flip to a BloodMNIST neutrophil with a third class's
colour), and with it the highest clean suspicion fell from 0.27 to 0.16 while every learned shortcut kept
0.50 or more. The separability is logged but not in the score: real colour differences separate the
classes as well as the casts do (AUROC 0.92-1.00 of BloodMNIST classes), so it told nothing apart. Nor does it
decide which pairs are tested: a cast on half of a class's probes puts the class's mean between its two halves,
so its AUROC can fall near 0 (``tests/shortcuts/test_discovery_cost.py``) while the cast flips recipients.
Suspicions of one property are comparable across classes and models (shares of recipients); the default
``property_alert_threshold`` of the stage (0.4) lies between the highest clean suspicion and the lowest
learned shortcut's. The p-value says what the floor cannot: whether the excess stands out from the
control's flips given how few recipients there are (a handful of probes flipping by chance). On the
discovery benchmark's models it changed no flag: the floor is what kept a clean BloodMNIST model's real
monocyte stain (suspicion 0.37, adjusted p-value 6e-5) apart from learned casts (0.96-1.00).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from gradskip_lightning.core.validation import check_choice, check_class_targets, check_image_batch, check_logits
from gradskip_lightning.metrics.perturbation import ACTIVATIONS, Activation

from .discovery_transplant import FIRST_LOOK, MIN_TESTED_PROBES, check_first_look, interleaved, predicted_as, sign_test
from .distinct_forward import DistinctForward
from .image_properties import PROPERTIES, PROPERTY_NAMES, SIGNATURE_PARTS, PixelSpace, PropertyName
from .multiplicity import holm
from .probe_transfers import ProbeTransfers

__all__ = [
    "chosen_properties",
    "PropertyDiscovery",
    "PropertyTransfer",
    "TransferExamples",
    "discover_properties",
    "flip_rate_upper_bound",
    "property_suspicion",
]

#: Recipients kept per class and property as pictures (before and after the transfer).
EXAMPLES = 4
#: Recipients a test that can stop looks at before its first look: if none of them flipped, it stops there (a test
#: whose recipients flip at 0.4, the floor, stops there 0.6 ** 6 = 4.7 % of the time; at 0.5, 1.6 %). On 252 kept
#: BloodMNIST and planted-shapes model-epochs every flag was the same with 6 as with 8, the property tests forwarding
#: 15 % fewer images on the clean and control models.
EARLY_LOOK = 6
#: The confidence of the upper bound a first look puts on a test's flip rate: the test stops there when even that
#: bound, less the control's flip rate, is under the floor. The rule before, a first look's suspicion under half the
#: floor, stopped a learned column-gain pattern whose first 16 recipients flipped 4 (every recipient: 45 %, flagged).
FUTILITY_CONFIDENCE = 0.95


@dataclass(frozen=True)
class TransferExamples:
    """The first few recipients of a transfer test: their probe positions (n,), their images after the
    transfer from class-k donors (n, C, H, W) in the model's input space, and their predicted classes
    (arg-max) before and after (n,)."""

    positions: Tensor
    images: Tensor
    before: Tensor
    after: Tensor


@dataclass(frozen=True)
class PropertyTransfer:
    """The transfer test of one class's value of one property; rates are NaN without recipients.

    Attributes:
        name: the property.
        target: the class k whose statistics were given.
        recipients: probes of other classes not predicted as k before (the rates' denominator).
        flip_rate: share of recipients predicted as k with a class-k probe's statistics.
        control_flip_rate: the same with a third class's probe's statistics (NaN without such a donor, or when the
            test stopped on its flip rate alone).
        separability: AUROC of the statistic telling class k's probes from the others' (NaN with < 2 of k).
        p_value: exact one-sided sign test of the flips against the control's, over the recipients with a
            control that flip under one arm only (unadjusted; NaN without recipients or control donors, or with
            fewer than :data:`~.discovery_transplant.MIN_TESTED_PROBES` class-k donors; 1 for a test stopped or
            skipped: it claims nothing).
        examples: the first recipients before and after (not compared; None when skipped).
        stopped: none of its first :data:`EARLY_LOOK` recipients flipped, or its first look's flips could not reach
            the floor (:func:`flip_rate_upper_bound` less the control's rate under it), so it stopped there (before
            forwarding the control arm when the bound alone was under it).
        skipped: not run, because the class's signature's suspicion stayed under the floor (rates NaN).
    """

    name: PropertyName
    target: int
    recipients: int
    flip_rate: float
    control_flip_rate: float
    separability: float
    p_value: float = math.nan
    examples: TransferExamples | None = field(default=None, compare=False, repr=False)
    stopped: bool = False
    skipped: bool = False

    @property
    def suspicion(self) -> float:
        """:func:`property_suspicion` of its rates; a test stopped before its control arm was forwarded (its first
        look's flips could not reach the floor) has its flip rate, the most its excess can be."""
        if self.stopped and math.isnan(self.control_flip_rate):
            return self.flip_rate
        return property_suspicion(self.flip_rate, self.control_flip_rate)


@dataclass(frozen=True)
class PropertyDiscovery:
    """What :func:`discover_properties` found: per property its K :class:`PropertyTransfer` (class order),
    suspicion (K,) float64, p_value (K,) float64 (Holm-adjusted over every test of the run; NaN where
    undefined) and flagged (K,) bool (p_value <= ``alpha`` and suspicion >= ``alert_threshold``); and the
    pixel space the statistics and transfers were computed in (what a correction transfers in)."""

    transfers: dict[PropertyName, tuple[PropertyTransfer, ...]]
    suspicion: dict[PropertyName, Tensor]
    p_value: dict[PropertyName, Tensor]
    flagged: dict[PropertyName, Tensor]
    alert_threshold: float
    alpha: float
    space: PixelSpace

    def axis(self, label: int) -> tuple[PropertyName, float] | None:
        """What carries class ``label``'s signature (every statistic given at once): the single property, among
        those tested in the same run, whose transfer alone has the largest suspicion, and that suspicion's share of
        the signature's (its flip excess alone over the joint's; may exceed 1). None without a signature test, a
        single property tested beside it, or a positive signature suspicion."""
        joint = self.suspicion.get("signature")
        singles = {name: values[label] for name, values in self.suspicion.items() if name != "signature"}
        if joint is None or not singles or not joint[label] > 0:
            return None
        best = max(singles, key=lambda name: -math.inf if singles[name].isnan() else float(singles[name]))
        return best, float(singles[best] / joint[label])


def property_suspicion(flip_rate: float, control_flip_rate: float) -> float:
    """The suspicion of one class and property, ``max(0, flip_rate - control_flip_rate)`` (module docstring);
    NaN when a rate is.

    Example:
        >>> property_suspicion(0.9, 0.1), property_suspicion(0.2, 0.3)
        (0.8, 0.0)
    """
    if math.isnan(flip_rate) or math.isnan(control_flip_rate):
        return math.nan
    return max(0.0, flip_rate - control_flip_rate)


def _transfer_test(
    model: Callable[[Tensor], Tensor],
    probes: ProbeTransfers,
    target: int,
    name: PropertyName,
    *,
    logits: Tensor,
    batch_size: int,
    activation: Activation,
    first_look: int | None,
    floor: float,
) -> PropertyTransfer:
    """One class's transfer test of one property, the probes' side (statistics, pairings, transfers) from
    ``probes``; with ``first_look``, stopped after that many recipients when their flips cannot reach ``floor``."""
    classes = probes.classes
    apart = probes.separability(name, target)
    donors = (classes == target).nonzero()[:, 0]
    eligible = _recipients(classes, logits, target, activation)
    count = len(eligible)
    if not count:
        return PropertyTransfer(name, target, 0, math.nan, math.nan, apart)
    control = probes.pairing(target).control[eligible]
    flips: list[Tensor] = []
    controls: list[Tensor] = []
    kept: list[Tensor] = []
    step = max(1, batch_size // 2)  # the two arms of a chunk go through one forward
    look = count if first_look is None else min(first_look, count)
    first = look < count  # a look that can stop: its test arm goes first, its controls only if it can fire
    early = min(EARLY_LOOK, look) if first else look
    starts = sorted({*range(0, early, step), *range(early, look, step), *range(look, count, step)})  # no chunk crosses

    def forward(inputs: Tensor) -> Tensor:
        out = model(inputs)
        check_logits(model, out, len(inputs))
        return out

    def control_arm(start: int, end: int) -> Tensor:
        return probes.transferred(name, target, "control", eligible[start:end][control[start:end] >= 0])

    stopped = False
    with torch.no_grad():
        for start, end in zip(starts, [*starts[1:], count], strict=True):
            if start == early < look and not bool(torch.cat(flips).any()):  # none of the first recipients flipped
                stopped = True
                eligible, control = eligible[:early], control[:early]
                break
            if start == look:  # the first look is measured: stop, or measure its controls and stop, or go on
                stopped = _looks_futile(flips, [], floor)  # the flips alone: the most the excess can be
                if not stopped:
                    looked = [(a, b) for a, b in zip(starts, [*starts[1:], count]) if a < look]
                    arms = [forward(control_arm(a, b)) for a, b in looked]
                    controls = [predicted_as(out, target, activation) for out in arms]
                    stopped = _looks_futile(flips, controls, floor)
                if stopped:
                    eligible, control = eligible[:look], control[:look]
                    break
            chunk = eligible[start:end]
            given = probes.transferred(name, target, "test", chunk)
            controlled = given[:0] if first and start < look else control_arm(start, end)
            inputs = torch.cat([given, controlled])
            flipped = predicted_as(out := forward(inputs), target, activation)
            flips.append(flipped[: len(chunk)])
            controls.append(flipped[len(chunk) :])
            if start == 0:
                shown = min(EXAMPLES, len(chunk))
                kept = [chunk[:shown], inputs[:shown], out[:shown].argmax(dim=1)]
    count = len(eligible)
    test_flips, control_flips = torch.cat(flips), torch.cat(controls)
    flip_rate = float(test_flips.double().mean())
    control_rate = float(control_flips.double().mean()) if len(control_flips) else math.nan
    testable = bool((control >= 0).any()) and len(donors) >= MIN_TESTED_PROBES  # the hotspot test's class-size rule
    if stopped or not testable:
        p_value = 1.0 if testable else math.nan
    else:
        paired = test_flips[(control >= 0).to(test_flips.device)]  # the recipients with a control, in the same order
        p_value = sign_test(int((paired & ~control_flips).sum()), int((control_flips & ~paired).sum()))
    examples = TransferExamples(kept[0], kept[1], logits[kept[0]].argmax(dim=1), kept[2])
    return PropertyTransfer(name, target, count, flip_rate, control_rate, apart, p_value, examples, stopped)


def _recipients(classes: Tensor, logits: Tensor, target: int, activation: Activation) -> Tensor:
    """(n,) class ``target``'s recipients, in the order a test takes them: the other classes' probes the model does not
    already predict as ``target`` (their ``logits`` (P, K)), the classes in turn; none when ``target`` has no probe."""
    others = (classes != target).nonzero()[:, 0]
    if not bool((classes == target).any()):
        return others[:0]
    return interleaved(others[~predicted_as(logits[others], target, activation)], classes)


def _forward_early_looks(
    forward: DistinctForward,
    probes: ProbeTransfers,
    names: Sequence[PropertyName],
    num_classes: int,
    logits: Tensor,
    *,
    activation: Activation,
    batch_size: int,
    first_look: int,
) -> None:
    """Forward, through ``forward`` in full batches of ``batch_size``, the early look (the first :data:`EARLY_LOOK`
    recipients' test arm, forwarded alone) of every class's test of each property in ``names`` that has one (more
    recipients than ``first_look``): each test then finds those logits computed, and the stage pays a few full
    batches instead of a small forward per test."""
    recipients = [_recipients(probes.classes, logits, target, activation) for target in range(num_classes)]
    batch: list[Tensor] = []
    for name in names:
        for target, taken in enumerate(recipients):
            if len(taken) > first_look:
                batch.extend(probes.transferred(name, target, "test", taken[: min(EARLY_LOOK, first_look)]))
            while len(batch) >= batch_size:
                forward(torch.stack(batch[:batch_size]))
                batch = batch[batch_size:]
    if batch:
        forward(torch.stack(batch))


def _skipped(name: PropertyName, target: int, probes: ProbeTransfers) -> PropertyTransfer:
    """The test of one property of class ``target`` not run (its signature stayed under the floor): no
    recipients, NaN rates, p-value 1, its separability."""
    return PropertyTransfer(name, target, 0, math.nan, math.nan, probes.separability(name, target), 1.0, skipped=True)


def flip_rate_upper_bound(flips: int, count: int, confidence: float = FUTILITY_CONFIDENCE) -> float:
    """The one-sided Clopper-Pearson upper bound of a flip rate seen as ``flips`` of ``count`` recipients: the rate at
    which at most ``flips`` would be seen with probability ``1 - confidence`` (1 when all flipped or none was seen).

    Example:
        >>> round(flip_rate_upper_bound(0, 6), 3), round(flip_rate_upper_bound(4, 16), 3)  # the early and first looks
        (0.393, 0.484)
    """
    if flips >= count:
        return 1.0

    def at_most(rate: float) -> float:  # P(X <= flips), X ~ Binomial(count, rate): falls as the rate grows
        return sum(math.comb(count, k) * rate**k * (1 - rate) ** (count - k) for k in range(flips + 1))

    low, high = flips / count, 1.0
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if at_most(middle) > 1 - confidence else (low, middle)
    return high


def _looks_futile(flips: list[Tensor], controls: list[Tensor], floor: float) -> bool:
    """Whether the recipients measured so far (the flips (n,) and their controls' flips, chunk by chunk) cannot reach
    ``floor``: the upper bound of their flip rate (:func:`flip_rate_upper_bound`), less the controls' rate (none: the
    bound alone, the most the suspicion can be), is under it."""
    measured = torch.cat(flips)
    upper = flip_rate_upper_bound(int(measured.sum()), len(measured))
    if not controls:
        return upper < floor
    control = torch.cat(controls)
    return property_suspicion(upper, float(control.double().mean()) if len(control) else math.nan) < floor


def chosen_properties(
    properties: Sequence[str] | None, channels: int | None = None, option: str = "properties"
) -> tuple[PropertyName, ...]:
    """The names of ``properties``, each known and named once, as :data:`~.image_properties.PropertyName`; None:
    every property that applies to ``channels`` (all without).
    With ``channels``, a named property that does not apply to images of that many channels is a ValueError; messages
    name ``option``.

    Example:
        >>> chosen_properties(None, 1)  # doctest: +NORMALIZE_WHITESPACE
        ('brightness', 'sharpness', 'noise', 'compression', 'stripes', 'interlacing', 'fixed_pattern',
         'illumination')
        >>> chosen_properties(["noise"], 3)
        ('noise',)
    """
    if properties is None:
        return tuple(name for name in PROPERTY_NAMES if channels is None or PROPERTIES[name].applies(channels))
    if isinstance(properties, str) or not isinstance(properties, Sequence):
        raise TypeError(f"{option} must be None or a list of names from {PROPERTY_NAMES}; got {properties!r}")
    chosen: list[PropertyName] = []
    for given in properties:
        check_choice(given, PROPERTY_NAMES, option)
        name: PropertyName = PROPERTY_NAMES[PROPERTY_NAMES.index(given)]
        if name in chosen:
            raise ValueError(f"{option} names {name!r} twice; got {list(properties)}")
        if channels is not None and not PROPERTIES[name].applies(channels):
            raise ValueError(
                f"{option} has {name!r}, which needs {PROPERTIES[name].channels}-channel images; the images have "
                f"{channels}: leave it out (None: every property that applies)"
            )
        chosen.append(name)
    return tuple(chosen)


def discover_properties(
    model: Callable[[Tensor], Tensor],
    images: Tensor,
    classes: Tensor,
    num_classes: int,
    properties: Sequence[str] | None = None,
    *,
    space: PixelSpace,
    alert_threshold: float,
    alpha: float = 0.05,
    batch_size: int = 64,
    activation: Activation = "softmax",
    seed: int = 0,
    logits: Tensor | None = None,
    first_look: int | None = FIRST_LOOK,
    probes: ProbeTransfers | None = None,
) -> PropertyDiscovery:
    """Every class's transfer test of every property in ``properties``, its suspicion and flag.

    All images go through ``model`` in chunks of ``batch_size`` under ``torch.no_grad()``, each distinct image once
    (:class:`~.distinct_forward.DistinctForward`; every test's early look first, in full chunks): the probes
    once unchanged (unless ``logits`` gives them), then per property and class two transferred copies
    of each recipient (P + 2 x properties x sum over classes of recipients images, at most; a test whose
    ``first_look`` recipients show no excess stops there, and with ``signature`` among the properties a class
    whose signature's suspicion stays under ``alert_threshold`` is not tested for the properties the signature gives:
    on a model with no global shortcut, at most 6 x ``first_look`` images per class, the first looks of the signature,
    the hue, the compression, the tone, the fixed pattern and the illumination; :data:`EARLY_LOOK`
    each where none of those flips).
    The noise transfer's draws are each recipient's own (:class:`~.image_properties.ImageSeeds`, from ``seed``, the
    class and the arm): the transfers are the same on every process for the same probes and seed, whatever
    ``batch_size``, ``first_look`` and the model's predictions (:mod:`.probe_transfers`); given ``probes`` from an
    earlier call on the same probes, they are reused, not computed again.

    Args:
        model: images (B, C, H, W) -> logits (B, K), in eval mode (the mode is left as it is).
        images: (P, C, H, W) probe images, normalised as the model expects.
        classes: (P,) their classes in [0, num_classes).
        num_classes: K.
        properties: names from :data:`~.image_properties.PROPERTIES` that apply to the images' channels (None:
            every one that does and is tested by default, :func:`chosen_properties`).
        space: the images' :class:`~.image_properties.PixelSpace`.
        alert_threshold: suspicion at or above which a class is flagged (with its p-value), in [0, 1].
        alpha: adjusted p-value at or below which a class is flagged (with its suspicion), in (0, 1]: the
            family-wise error rate over every (class, property) test of the run.
        batch_size: images per forward call.
        activation: "softmax" (a flip: arg-max) or "sigmoid" (multi-label: its sigmoid > 0.5).
        seed: of the noise transfer's draws.
        logits: (P, K) the model's logits of the unchanged ``images``, when known.
        first_look: recipients measured first (None: every one at once, and every test runs); a test whose first
            ones cannot reach ``alert_threshold`` (:data:`FUTILITY_CONFIDENCE`) stops there, as one does whose first
            :data:`EARLY_LOOK` flip none: its rates are theirs, its p-value 1 (it cannot fire, and claims nothing in
            the Holm family); and a class whose signature's suspicion is under ``alert_threshold`` is not tested for
            the properties the signature gives (:data:`~.image_properties.SIGNATURE_PARTS`).
        probes: the :class:`~.probe_transfers.ProbeTransfers` of these ``images``, ``classes``, ``space`` and
            ``seed`` kept from an earlier call (filled by this one; a fit's later epoch ends reuse it), None: a new
            one; built for other probes, a ValueError.

    Example:
        >>> from gradskip_lightning.core.normalisation import Normalisation
        >>> pixels = Normalisation(mean=(0.0,), std=(1.0,))  # the inputs are pixels
        >>> def model(x):  # class 1 iff red exceeds blue by 0.15 on average
        ...     red = (x[:, 0] - x[:, 2]).mean(dim=(1, 2)) - 0.15
        ...     return torch.stack([-red, red], dim=1)
        >>> images = 0.2 + 0.5 * torch.rand(16, 3, 6, 6, generator=torch.Generator().manual_seed(0))
        >>> images[8:, 0] += 0.4  # class 1 is reddish
        >>> found = discover_properties(model, images, torch.tensor([0] * 8 + [1] * 8), 2, ["colour", "brightness"],
        ...                             space=PixelSpace.of(images, pixels), alert_threshold=0.5)
        >>> found.transfers["colour"][1].flip_rate, found.flagged["brightness"].tolist()
        (1.0, [False, False])
        >>> found.p_value["colour"].tolist()  # 8 of 8 flip, none under the control: Holm, 4 x 2 ** -8 for both
        [0.015625, 0.015625]
        >>> found.flagged["colour"].tolist()  # two classes: the colour rule decides both
        [True, True]
        >>> few = discover_properties(model, images[4:12], torch.tensor([0] * 4 + [1] * 4), 2, ["colour", "brightness"],
        ...                           space=PixelSpace.of(images, pixels), alert_threshold=0.5)
        >>> few.suspicion["colour"].tolist(), few.p_value["colour"].tolist()  # 4 flips can be chance: 4 x 2 ** -4
        ([1.0, 1.0], [0.25, 0.25])
    """
    check_image_batch(images)
    check_class_targets(classes, len(images), num_classes)
    check_choice(activation, ACTIVATIONS, "activation")
    chosen = chosen_properties(properties, images.shape[1])
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    check_first_look(first_look)
    if not 0 <= alert_threshold <= 1:
        raise ValueError(f"alert_threshold must be in [0, 1]; got {alert_threshold}")
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1]; got {alpha}")
    classes = classes.to(images.device)
    if probes is None:
        probes = ProbeTransfers(images, classes, space, seed)
    elif not probes.holds(images, classes, space, seed):
        raise ValueError("probes (ProbeTransfers) were built for other images, classes, pixel space or seed")
    forward = model if isinstance(model, DistinctForward) else DistinctForward(model)  # each distinct image once
    with torch.no_grad():
        if logits is None:
            logits = torch.cat(
                [forward(images[start : start + batch_size]) for start in range(0, len(images), batch_size)]
            )
        check_logits(model, logits, len(images))
    gated = "signature" in chosen and first_look is not None  # the signature's parts wait for the signature

    def test(label: int, name: PropertyName) -> PropertyTransfer:
        return _transfer_test(
            forward, probes, label, name, logits=logits, batch_size=batch_size, activation=activation,
            first_look=first_look, floor=alert_threshold,
        )  # fmt: skip

    if first_look is not None:
        with torch.no_grad():
            always = [name for name in chosen if not (gated and name in SIGNATURE_PARTS)]
            _forward_early_looks(forward, probes, always, num_classes, logits, activation=activation,
                                 batch_size=batch_size, first_look=first_look)  # fmt: skip
    # the signature first: a class whose every statistic at once stays under the floor is not tested for those
    # statistics one at a time (:func:`_skipped`)
    signature = tuple(test(label, "signature") for label in range(num_classes)) if "signature" in chosen else None

    def skipped(name: PropertyName, label: int) -> bool:  # those the signature does not give: always tested
        if signature is None or not gated or name not in SIGNATURE_PARTS:
            return False
        return not signature[label].suspicion >= alert_threshold  # NaN (no recipients) included

    transfers = {
        name: signature if name == "signature" and signature is not None else tuple(
            _skipped(name, label, probes) if skipped(name, label) else test(label, name)
            for label in range(num_classes)
        )
        for name in chosen
    }  # fmt: skip
    raw = torch.tensor([[t.p_value for t in row] for row in transfers.values()], dtype=torch.float64)
    adjusted = holm(raw.reshape(-1)).reshape(raw.shape)
    suspicion, p_value, flagged = {}, {}, {}
    for index, (name, row) in enumerate(transfers.items()):
        suspicion[name] = torch.tensor([t.suspicion for t in row], dtype=torch.float64)
        p_value[name] = adjusted[index]
        flagged[name] = (suspicion[name] >= alert_threshold) & (p_value[name] <= alpha)  # False where NaN
    return PropertyDiscovery(transfers, suspicion, p_value, flagged, alert_threshold, alpha, space)
