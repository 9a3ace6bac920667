"""CorrectionSettings: the options of a :class:`~gradskip_lightning.ShortcutCorrection`, checked when built.

As the callback's settings groups (:mod:`gradskip_lightning.engine.settings`) do: a frozen dataclass whose
``__post_init__`` refuses a bad value with a message naming the option, what was received and the fix, so
that Python and LightningCLI YAML (``init_args: {p: 0.5}``) are refused alike. The callback takes the
options as flat keyword arguments and builds this group from them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.core.validation import check_choice
from gradskip_lightning.engine.settings import check_log_prefix, positive
from gradskip_lightning.shortcuts.discovery_properties import chosen_properties
from gradskip_lightning.shortcuts.image_properties import PROPERTY_NAMES, PropertyName
from gradskip_lightning.shortcuts.tags import SpuriousTag

__all__ = ["ACCURACY_DROP_ACTIONS", "UNLEARNING", "AccuracyDrop", "CorrectionSettings", "DropAction", "Unlearning"]

#: How a located shortcut is unlearned (``unlearn``): from the training images, or by a loss.
Unlearning = Literal["data", "loss"]
UNLEARNING: tuple[Unlearning, ...] = ("data", "loss")

#: The ways to act on an accuracy drop (``on_accuracy_drop``); each has its :class:`DropAction`.
AccuracyDrop = Literal["warn", "weaken", "stop"]


@dataclass(frozen=True)
class DropAction:
    """What ``on_accuracy_drop`` does: ``what`` it says (with the new ``{p}``) and the new ``p`` from the one in use."""

    what: str
    strength: Callable[[float], float]


#: ``on_accuracy_drop`` -> its action.
ACCURACY_DROP_ACTIONS: dict[AccuracyDrop, DropAction] = {
    "warn": DropAction("going on at p = {p:g} (on_accuracy_drop='warn')", lambda p: p),
    "weaken": DropAction("halving p to {p:g} from the next epoch (on_accuracy_drop='weaken')", lambda p: p / 2),
    "stop": DropAction("stopping the correction from the next epoch (on_accuracy_drop='stop')", lambda p: 0.0),
}


def _at_least_zero(name: str, value: int, what: str) -> None:
    """Refuse anything but an int >= 0 (bools too), naming the option and what it counts."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be {what} >= 0, got {value!r}")


@dataclass(frozen=True)
class CorrectionSettings:
    """What a :class:`~gradskip_lightning.ShortcutCorrection` corrects and how.

    Attributes:
        tag: a known shortcut (:class:`~gradskip_lightning.shortcuts.SpuriousTag`: its pattern at its place),
            corrected from the first training batch; its pixel values are normalised with ``normalisation``.
        discovery: follow the discovery stage of a :class:`~gradskip_lightning.GradSkipCallback` among
            the Trainer's callbacks: True, the one with a ``discovery`` stage (when there is one; required
            without a ``tag``); a string, the one with that ``log_prefix``; False: none. A flagged class
            is corrected with its hotspot, the pixels taken from the class's discovery probes; a class
            flagged for a global property (the stage's ``properties``) with that property: each image it is
            put on gets the statistic of one of the class's discovery probes, by the stage's own transfer (colour
            and the signature: or by an additive one, half and half).
        p: probability that a training image gets an artifact, in (0, 1] (each artifact draws apart); 0.25 by
            measurement: on BloodMNIST it unlearned a colour cast and kept more accuracy than 0.5
            (docs/results/correction.md).
        erase: first take the artifact off its class's own images (from the batch's other classes), so that it
            is on a share ``p`` of every class, its own included; False: paste only (augmentative ClArC), which
            leaves it on all of the class's images. Needs the batch's labels (``label_key``).
        classes: the classes the discovery may get corrected (None: any flagged class), for hotspots and
            properties alike.
        properties: the global properties the discovery may get corrected (names of
            :data:`~gradskip_lightning.shortcuts.image_properties.PROPERTIES`; None: any flagged one; ``()``:
            none, hotspots only). One correction per flagged (class, property).
        flagged_epochs: a class (or a class's property) is corrected once the discovery stage flagged it at
            this many of its runs in a row (1: at the first flag), from the next training epoch on.
        margin: patches added on every side of a discovered region before pasting (0, the default: the
            region the discovery stage's transplant test pasted and proved, and nothing around it: a grown
            region replaces real image content on every pasted image).
        seed: seed of the draws (which images, which donor). Batch ``i`` of epoch ``e`` on rank ``r`` draws
            from a generator of its own seeded by (seed, r, e, i): ranks draw apart, a resumed fit draws as
            the uninterrupted one, the global RNG is never used.
        normalisation: the images' :class:`~gradskip_lightning.Normalisation` (in YAML ``{mean: [...], std: [...]}``),
            to put a tag's pixel values into the model's input space. None: the followed GradSkipCallback's
            ``normalisation``, else the datamodule's ``mean`` and ``std`` attributes.
        image_key: the key of the images in mapping batches (None: the first of ``image``,
            ``pixel_values``, ``img``, ``images``).
        label_key: the key of the labels in mapping batches, for ``erase`` (None: the first of ``label``,
            ``labels``, ``target``, ``targets``, ``class``); a tuple batch's labels are its second element.
        log_prefix: the name in the logged keys (``correction/<log_prefix>active``).
        accuracy_tolerance: how much accuracy on the validation images (a share, in [0, 1)) the correction may
            cost: at each training epoch's end, the epoch's validation accuracy is compared with the last one
            measured before the first running correction began; a larger fall is said in one warning line and
            acted on (``on_accuracy_drop``).
        on_accuracy_drop: what a fall beyond ``accuracy_tolerance`` does (:data:`ACCURACY_DROP_ACTIONS`):
            ``"warn"`` (the warning only), ``"weaken"`` (halve ``p`` from the next epoch, at each such epoch) or
            ``"stop"`` (no artifact from the next epoch on).
        unlearn: how a located shortcut (a tag, a flagged hotspot) is unlearned (:data:`UNLEARNING`): ``"data"``
            (paste and erase) or ``"loss"`` (Right for the Right Reasons: after each training step's backward,
            ``penalty`` times the mean over the batch of the squared input gradient of the summed log-probabilities
            on the artifacts' pixels is added to the gradients; the images are left as they are; one forward and a
            double backward more per step; one process and 32-bit precision only). A global property is always
            unlearned from the data. ``"weaken"`` then halves the penalty, ``"stop"`` ends it.
        penalty: the weight of the ``"loss"`` correction's penalty, > 0.
    """

    tag: SpuriousTag | None = None
    discovery: bool | str = True
    p: float = 0.25
    erase: bool = True
    classes: Sequence[int] | None = None
    properties: Sequence[PropertyName] | None = None
    flagged_epochs: int = 1
    margin: int = 0
    seed: int = 0
    normalisation: Normalisation | None = None
    image_key: str | None = None
    label_key: str | None = None
    log_prefix: str = "gradskip/"
    accuracy_tolerance: float = 0.01
    on_accuracy_drop: AccuracyDrop = "warn"
    unlearn: Unlearning = "data"
    penalty: float = 1000.0

    def __post_init__(self) -> None:
        if self.tag is not None and not isinstance(self.tag, SpuriousTag):
            raise TypeError(f"tag must be a SpuriousTag or None, got {type(self.tag).__name__}")
        if not isinstance(self.discovery, (bool, str)) or self.discovery == "":
            raise TypeError(f"discovery must be True, False or a GradSkipCallback's log_prefix; got {self.discovery!r}")
        if self.tag is None and self.discovery is False:
            raise ValueError("ShortcutCorrection has nothing to correct: give a tag, or follow a discovery stage")
        if isinstance(self.p, bool) or not isinstance(self.p, (int, float)) or not 0 < self.p <= 1:
            raise ValueError(f"p must be a probability in (0, 1], got {self.p!r}")
        if not isinstance(self.erase, bool):
            raise TypeError(f"erase must be True or False, got {self.erase!r}")
        if self.classes is not None:
            classes = list(self.classes)
            if not classes or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in classes):
                raise ValueError(f"classes must be None or class indices >= 0, got {classes!r}")
            if len(set(classes)) != len(classes):
                raise ValueError(f"classes names a class twice: {classes}")
            object.__setattr__(self, "classes", tuple(classes))
        chosen_properties(self.properties, option="properties")  # refuses unknown or repeated names
        if self.properties is not None:
            object.__setattr__(self, "properties", tuple(self.properties))
        positive("flagged_epochs", self.flagged_epochs)
        _at_least_zero("margin", self.margin, "a number of patches")
        _at_least_zero("seed", self.seed, "an integer")
        object.__setattr__(self, "normalisation", Normalisation.given(self.normalisation))
        for name, value in (("image_key", self.image_key), ("label_key", self.label_key)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name} must be a non-empty string or None, got {value!r}")
        check_log_prefix(self.log_prefix)
        tolerance = self.accuracy_tolerance
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)):
            raise TypeError(f"accuracy_tolerance must be a share of accuracy in [0, 1), got {tolerance!r}")
        if not 0 <= tolerance < 1:
            raise ValueError(f"accuracy_tolerance must be a share of accuracy in [0, 1), got {tolerance!r}")
        check_choice(self.on_accuracy_drop, tuple(ACCURACY_DROP_ACTIONS), "on_accuracy_drop")
        check_choice(self.unlearn, UNLEARNING, "unlearn")
        if isinstance(self.penalty, bool) or not isinstance(self.penalty, (int, float)) or not self.penalty > 0:
            raise ValueError(f"penalty must be a weight > 0, got {self.penalty!r}")
        object.__setattr__(self, "p", float(self.p))
        object.__setattr__(self, "accuracy_tolerance", float(tolerance))
        object.__setattr__(self, "penalty", float(self.penalty))

    @property
    def corrected_properties(self) -> tuple[PropertyName, ...]:
        """The global properties the discovery may get corrected, by name (``properties``; None: every one)."""
        return PROPERTY_NAMES if self.properties is None else chosen_properties(self.properties, option="properties")
