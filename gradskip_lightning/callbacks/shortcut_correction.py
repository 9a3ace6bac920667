"""ShortcutCorrection: unlearn a shortcut during training by putting its artifact on every class's images.

Augmentative ClArC (Anders et al., Information Fusion 2022; Reveal-to-Revise, Pahde et al. 2023): once an
artifact is known, paste it onto a share ``p`` of the training images of every class, so that it stops
predicting its class and the model has to use the rest of the image. By default it is first taken off the
class's own images (each gets another class's image's pixels at its place, or its statistic), so that every
class carries it at the same rate ``p``: pasting alone leaves it on all of the class's images, and its absence
still says "not this class", which costs the class's accuracy on images without it. Here it runs inside the fit: the
artifact is a tag the user names (corrected from the first batch), a class the discovery stage of a
:class:`~gradskip_lightning.GradSkipCallback` flagged (its hotspot, with the pixels of that class's
discovery probes there) or a (class, global property) it flagged (the property's statistics of that class's
discovery probes, given to other images), the last two corrected from the next training epoch on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor
from typing_extensions import override

from gradskip_lightning.callbacks.correction_settings import (
    ACCURACY_DROP_ACTIONS,
    AccuracyDrop,
    CorrectionSettings,
    Unlearning,
)
from gradskip_lightning.callbacks.gradskip import GradSkipCallback
from gradskip_lightning.callbacks.host import logged_step
from gradskip_lightning.callbacks.training_batches import (
    batch_images,
    batch_labels,
    batch_seed,
    class_members,
    held_out_correct,
)
from gradskip_lightning.core.explanation import UnsupportedModel
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.core.validation import required
from gradskip_lightning.engine.discovery.stage import Discovered
from gradskip_lightning.engine.keys import key
from gradskip_lightning.engine.output.monitor import monitor
from gradskip_lightning.families import explainer_for
from gradskip_lightning.shortcuts.artifacts import (
    Artifact,
    PatchPaste,
    PropertyPaste,
    erase_from_class,
    paste_share,
    restore_artifact,
)
from gradskip_lightning.shortcuts.correction_transfers import correction_property
from gradskip_lightning.shortcuts.discovery_transplant import constant_pixels
from gradskip_lightning.shortcuts.image_properties import PROPERTIES, PROPERTY_NAMES, PropertyName
from gradskip_lightning.shortcuts.input_gradient import input_gradient_penalty
from gradskip_lightning.shortcuts.regions import Region, patch_pixels
from gradskip_lightning.shortcuts.tags import SpuriousTag

__all__ = [
    "CORRECTION_VALUES",
    "Correction",
    "ShortcutCorrection",
    "artifact_for",
    "property_artifact_for",
    "proved_properties",
]

#: Logged name -> what it is (the README's key table); ``correction/<prefix><name>``, per corrected class k
#: ``correction/<prefix><name>/class_<k>``.
CORRECTION_VALUES: dict[str, str] = {
    "active": "how many shortcuts are being corrected (0: none yet, the training is untouched)",
    "pasted_share": "share of the epoch's training images (every rank's) that got an artifact pasted",
    "pasted_share/class_<k>": "share of the epoch's training images that got class k's patch (its hotspot or a tag)",
    "erased_share/class_<k>": "share of class k's training images of the epoch that had its patch taken off first "
    "(`erase`; 1 unless a batch held class k only)",
    "box/top/class_<k>": "the corrected box of class k in pixels: top row (also left, bottom, right; exclusive)",
    "<property>/pasted_share/class_<k>": f"a corrected global property of class k ({', '.join(PROPERTY_NAMES)}): "
    "share of the epoch's training images given class k's statistics of it",
    "<property>/erased_share/class_<k>": "the same for a corrected global property: share of class k's training "
    "images given another class's image's statistic first (`erase`)",
    "<property>/<statistic>/class_<k>": "the statistic that correction gives, mean over class k's donors, in pixel "
    "units (`red`, `green`, `blue`: the channels' medians; "
    + "; ".join(
        f"{name}: {', '.join(f'`{s}`' for s in correction_property(name).summary_names)}" for name in PROPERTY_NAMES
    )
    + ")",  # fmt: skip
    "accuracy": "share of the epoch's validation images (every rank's) the model gets right (multi-label: every "
    "label), from the validation step's `logits` or one more forward of each validation batch",
    "accuracy_change": "`accuracy` minus the last one measured before the first running correction began (NaN "
    "before any correction, or without a validation before it); below `-accuracy_tolerance` it warns and acts "
    "(`on_accuracy_drop`)",
    "p": "the probability in use: `p`, halved at each accuracy drop with `on_accuracy_drop='weaken'`, 0 once "
    "stopped (`'stop'`)",
    "[<property>/]spurious/class_<k>": "class k's corrected shortcut's spurious score at this epoch's discovery run: "
    "the flip rate of its reported transplant test (a property: its transfer's), on the discovery probes",
    "[<property>/]spurious_change/class_<k>": "that flip rate minus the one of the run that flagged it",
    "penalty": "with `unlearn='loss'`: the epoch's mean input-gradient penalty on the artifacts' pixels, before its "
    "weight (every rank's batches)",
}


@dataclass(frozen=True)
class Correction:
    """One shortcut being corrected: its artifact, the epoch it started at, where it came from, its spurious
    score when it was flagged (the discovery stage's flip rate; NaN for a tag), and the epoch it stopped at (None:
    running; a class's property correction stops when the class's hotspot correction starts)."""

    artifact: Artifact
    epoch: int
    origin: str
    spurious: float = math.nan
    until: int | None = None

    def runs_at(self, epoch: int) -> bool:
        """Whether it corrects training epoch ``epoch``."""
        return self.epoch <= epoch and (self.until is None or epoch < self.until)


def artifact_for(discovered: Discovered, label: int, margin: int = 0) -> Artifact:
    """The artifact of class ``label`` flagged by a discovery run, with the pixels of its reported test's discovery
    probes (the donors: the class's, or the strategy's members).

    With ``margin`` 0: the artifact's own pixels, those the donors share beyond chance
    (:func:`~gradskip_lightning.shortcuts.discovery_transplant.constant_pixels`: a stamp's) in the region the test
    pasted and proved (the class's hotspot, grown hotspot or a strategy's hotspot) and its neighbouring patches (a
    hotspot covers the patches most relevant, a stamp across a patch boundary reaches into the next ones); the
    proved region itself when no pixel is shared (an artifact that varies). With ``margin`` > 0: the proved region
    grown by ``margin`` patches. A flagged global property gets its artifact from :func:`property_artifact_for`."""
    test = discovered.found.reported[label]
    donors = discovered.probes.images[test.group.members]
    if margin:
        return PatchPaste.from_hotspot(label, test.region, discovered.patch_size, donors, margin)
    around = F.max_pool2d(test.region.cpu()[None, None].float(), 3, stride=1, padding=1)[0, 0].bool()
    probes = discovered.probes
    shared = constant_pixels(
        probes.images, probes.labels, test.group.members, patch_pixels(around, discovered.patch_size)
    )
    if not shared.any():
        return PatchPaste.from_hotspot(label, test.region, discovered.patch_size, donors)
    return PatchPaste.from_region(label, Region.of_pixels(shared), donors)


def proved_properties(flags: dict[PropertyName, bool], suspicions: dict[PropertyName, float]) -> list[PropertyName]:
    """The properties a class's correction gives, of its flags and suspicions by property name: the least that
    carries what the stage proved. With the signature flagged, the single flagged property of the highest suspicion
    when that suspicion is at least the signature's (it alone flips as many recipients: giving every statistic would
    move real content too), else the signature alone (the stage proved the statistics jointly); without it, each
    flagged property.

    Example:
        >>> proved_properties({"colour": True, "signature": True}, {"colour": 0.98, "signature": 0.9})
        ['colour']
        >>> proved_properties({"brightness": True, "colour": False, "signature": True},
        ...                   {"brightness": 0.5, "colour": 0.1, "signature": 0.7})
        ['signature']
        >>> proved_properties({"brightness": True, "colour": True, "signature": False}, {})
        ['brightness', 'colour']
    """
    flagged = [name for name, flag in flags.items() if flag]
    if "signature" not in flagged:
        return flagged
    singles = [name for name in flagged if name != "signature"]
    best = max(singles, key=lambda name: suspicions[name], default=None)
    return [best] if best is not None and suspicions[best] >= suspicions["signature"] else ["signature"]


def property_artifact_for(discovered: Discovered, name: PropertyName, label: int) -> PropertyPaste:
    """The artifact of class ``label`` flagged for property ``name`` by a discovery run: the statistics of the
    class's discovery probes (the donors of the stage's transfer test), in the stage's pixel space."""
    found = required(discovered.properties, "the discovery run's property transplants")
    donors = discovered.probes.images[discovered.probes.labels == label]
    return PropertyPaste.from_probes(label, name, donors, found.space)


def _flip_rate(discovered: Discovered, artifact: Artifact) -> float | None:
    """The flip rate a discovery run reports for ``artifact``'s class: of its reported hotspot test (a patch), or
    of its property's transfer (None: the run did not test that property, or skipped it for the class)."""
    if isinstance(artifact, PropertyPaste):
        found = discovered.properties
        if found is None or artifact.name not in found.transfers:
            return None
        transfer = found.transfers[artifact.name][artifact.target]
        return None if transfer.skipped else transfer.flip_rate
    return discovered.found.reported[artifact.target].transplant.flip_rate


class ShortcutCorrection(Callback):
    r"""Paste a known or discovered shortcut onto every class's training images so the model unlearns it.

    Off unless added to the Trainer's callbacks; while nothing is corrected it changes nothing (the training is bitwise
    the same as without it). Once a shortcut is corrected, each training batch gets, in ``on_train_batch_start`` and in
    place (the tensors Lightning then hands to ``training_step``), the artifact on each image with probability ``p``,
    whatever its class: a patch pasted at its place, or (a flagged global property) the image given one of the class's
    probes' statistics of that property (one of :data:`~gradskip_lightning.shortcuts.image_properties.PROPERTIES`, the
    signature all of its parts at once; colour and the signature by the stage's transfer or an additive one, half and
    half: :mod:`~gradskip_lightning.shortcuts.correction_transfers`). With
    ``erase`` (the default) the artifact is first taken off every image of its class in the batch: each gets, drawn from
    the batch's images of other classes (as they came, before any correction), one's pixels at the artifact's place or
    one's statistic of the property; then the artifact is as common on every class (``p``) and says nothing about the
    class. A class's property flags wait while its hotspot is flagged and not yet corrected (a placed artifact moves
    the image-wide statistics too), and its property corrections that began earlier stop when the hotspot's
    correction starts; one still flagged once the hotspot's correction runs is corrected then. Said
    once in the log when a correction starts; logged every training epoch under
    ``correction/<log_prefix>...`` (a property's under ``correction/<log_prefix><property>/...``).

    The arguments (``tag``, then keywords only) are the fields of
    :class:`~gradskip_lightning.callbacks.correction_settings.CorrectionSettings`, each described and checked there
    (kept as :attr:`settings`): a bad value is refused when the callback is built, naming the option.

    The discovery stage's choice is a callback of the Trainer found by its ``log_prefix``, not an object
    given here: that is how a LightningCLI config names it, and a checkpoint holds no reference to it. A
    checkpoint holds what is corrected, the flags of its own epoch's discovery run (read when it is saved) and
    each class's flagged runs in a row: a fit resumed from any epoch corrects as the uninterrupted one.
    Under DDP every rank runs the same discovery on the same probes, so every rank corrects the same
    artifacts, each on its own batches with its own draws.

    Example::

        Trainer(callbacks=[GradSkipCallback(discovery=DiscoveryStage()), ShortcutCorrection()])
        ShortcutCorrection(properties=())  # flagged hotspots only
        ShortcutCorrection(erase=False)  # paste only: the class's own images keep the artifact
    """

    def __init__(
        self,
        tag: SpuriousTag | None = None,
        *,
        discovery: bool | str = True,
        p: float = 0.25,
        erase: bool = True,
        classes: Sequence[int] | None = None,
        properties: Sequence[PropertyName] | None = None,
        flagged_epochs: int = 1,
        margin: int = 0,
        seed: int = 0,
        normalisation: Normalisation | None = None,
        image_key: str | None = None,
        label_key: str | None = None,
        log_prefix: str = "gradskip/",
        accuracy_tolerance: float = 0.01,
        on_accuracy_drop: AccuracyDrop = "warn",
        unlearn: Unlearning = "data",
        penalty: float = 1000.0,
    ) -> None:
        super().__init__()
        #: the options, checked when built (:class:`~.correction_settings.CorrectionSettings`)
        self.settings = CorrectionSettings(
            tag=tag, discovery=discovery, p=p, erase=erase, classes=classes, properties=properties,
            flagged_epochs=flagged_epochs, margin=margin, seed=seed, normalisation=normalisation,
            image_key=image_key, label_key=label_key, log_prefix=log_prefix, accuracy_tolerance=accuracy_tolerance,
            on_accuracy_drop=on_accuracy_drop, unlearn=unlearn, penalty=penalty,
        )  # fmt: skip
        self._batch: Any = None  # the training batch whose input gradient is penalised (unlearn="loss")
        self._penalties = [0.0, 0]  # sum of the epoch's penalties (before the weight), batches
        self._source: GradSkipCallback | None = None
        self._fit_trainer: Trainer | None = None
        self._normalisation: Normalisation | None = None  # a tag's: the given one, the followed callback's, the data's
        self._corrections: list[Correction] = []
        self._streaks: dict[int, int] = {}  # class -> flagged discovery runs in a row
        self._property_streaks: dict[tuple[str, int], int] = {}  # (property, class) -> the same
        self._last_run: int | None = None  # epoch of the last discovery run read
        self._resumed: list[Correction] = []  # restored from a checkpoint, said at the fit's start
        self._generator = torch.Generator()
        # (3, corrections), this epoch: images it was pasted on, images of its class it was taken off, of its class
        self._tallies = torch.zeros(3, 0, dtype=torch.long)
        self._counts = [0, 0]  # images with any artifact, images seen (this epoch)
        self._strength = self.settings.p  # the p in use: halved or 0 by on_accuracy_drop
        self._accuracy: dict[int, float] = {}  # epoch -> accuracy on its validation images
        self._held_out = [0, 0]  # validation images right, seen (this epoch)
        self._unmeasured_said = False  # said once that no validation accuracy is measured

    @property
    def corrections(self) -> tuple[Correction, ...]:
        """The shortcuts being corrected, in the order they started."""
        return tuple(self._corrections)

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(log_prefix=self.settings.log_prefix)

    # ----------------------------------------------------------------------------- hooks

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            return
        if self._fit_trainer is not None and self._fit_trainer is not trainer:  # a new fit: nothing corrected yet
            self._corrections, self._streaks, self._last_run, self._resumed = [], {}, None, []
            self._property_streaks, self._strength, self._accuracy = {}, self.settings.p, {}
        self._fit_trainer = trainer  # a checkpoint's state is loaded after setup
        self._source = self._followed(trainer)
        if self.settings.tag is not None:
            datamodule = getattr(trainer, "datamodule", None)
            followed = self._source.normalisation if self._source is not None else None
            normalisation = self.settings.normalisation or followed or Normalisation.of(datamodule)
            if normalisation is None:
                raise ValueError(
                    "ShortcutCorrection puts the tag's pixel values into the model's input space and needs the images' "
                    "normalisation: give normalisation=Normalisation(mean=..., std=...) (here or to the "
                    "GradSkipCallback it follows), or use a datamodule with mean/std attributes"
                )
            self._normalisation = normalisation
        self._check_model(pl_module)
        if self.settings.unlearn == "loss" and (
            trainer.world_size > 1 or str(trainer.precision) not in ("32-true", "32")
        ):
            raise ValueError(
                "ShortcutCorrection(unlearn='loss') adds its penalty's gradients after the step's backward, which runs "
                f"in one process at 32-bit precision only; this Trainer has {trainer.world_size} processes at "
                f"precision {trainer.precision!r}: use unlearn='data' there"
            )

    def _check_model(self, pl_module: LightningModule) -> None:
        """Refuse a tag or ``classes`` the trained network does not have (a class out of its range, a tag outside
        its images), before the first step. A network of no family the explainers know (the followed
        GradSkipCallback's ``backbone``, else the module itself) is not checked: a tag outside the images is then
        refused at the first batch."""
        try:
            explainer = explainer_for(pl_module, backbone=self._source.backbone if self._source is not None else None)
        except UnsupportedModel:
            return
        count, tag, classes = explainer.num_classes, self.settings.tag, self.settings.classes
        if tag is not None and not 0 <= tag.target_class < count:
            raise ValueError(
                f"ShortcutCorrection's tag goes with class {tag.target_class}, but the model has {count} classes "
                f"(0 to {count - 1}): give the tag's class, SpuriousTag(target_class=<0 to {count - 1}>)"
            )
        missing = [label for label in classes or [] if label >= count]
        if missing:
            raise ValueError(
                f"ShortcutCorrection(classes={list(classes or [])}) names classes the model does not have ({missing}; "
                f"it has {count}, 0 to {count - 1}): give classes in that range, or classes=None for any flagged class"
            )
        if tag is not None and explainer.img_size is not None:
            try:
                tag.check_fits(*explainer.img_size)
            except ValueError as err:
                raise ValueError(f"ShortcutCorrection's tag: {err}") from None
        if self._normalisation is not None:
            self._normalisation.check_channels(explainer.in_chans, "ShortcutCorrection's normalisation")

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        for correction in self._resumed:
            self._say(correction, "continuing (from the checkpoint) to correct")
        self._resumed = []
        if self.settings.tag is not None and not self._corrected(self.settings.tag.target_class, PatchPaste.kind, ""):
            artifact = PatchPaste.from_tag(self.settings.tag, required(self._normalisation, "the tag's normalisation"))
            self._start(Correction(artifact, trainer.current_epoch, "the given tag"))

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._source is not None:
            self._follow(self._source)
        self._tallies = torch.zeros(3, len(self._corrections), dtype=torch.long)
        self._counts, self._held_out, self._penalties = [0, 0], [0, 0], [0.0, 0]

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        everything = self._active(trainer.current_epoch)
        active = [(index, c) for index, c in everything if self._from_data(c.artifact)]
        self._batch = batch if len(active) < len(everything) else None  # its input gradient is penalised
        if not everything:
            return  # nothing corrected: the batch, the RNGs and the training are untouched
        images = batch_images(batch, self.settings.image_key)
        self._counts[1] += len(images)
        if not active:
            return  # unlearned by the loss only
        self._generator.manual_seed(
            batch_seed(self.settings.seed, trainer.global_rank, trainer.current_epoch, batch_idx)
        )
        pasted = torch.zeros(len(images), dtype=torch.bool)
        with torch.no_grad():
            if self.settings.erase:  # first off the class's own images, the stand-ins from the batch as it came
                originals = images.clone()
                for index, correction in active:
                    members = class_members(batch, correction.artifact.target, self.settings.label_key)
                    erased = erase_from_class(images, originals, members, correction.artifact, self._generator)
                    self._tallies[1:, index] += torch.tensor([erased, int(members.sum())])
            for index, correction in active:
                chosen = paste_share(images, correction.artifact, self._strength, self._generator)
                self._tallies[0, index] += int(chosen.sum())
                pasted |= chosen
        self._counts[0] += int(pasted.sum())

    @override
    def on_after_backward(self, trainer: Trainer, pl_module: LightningModule) -> None:
        batch, self._batch = self._batch, None
        if batch is None:
            return
        located = [c.artifact for _, c in self._active(trainer.current_epoch) if not self._from_data(c.artifact)]
        regions = [artifact.region for artifact in located if isinstance(artifact, PatchPaste)]
        images = batch_images(batch, self.settings.image_key)
        pixels = torch.stack([region.pixels(*images.shape[-2:]) for region in regions]).any(dim=0)
        penalty = input_gradient_penalty(pl_module, images, pixels)
        (self.settings.penalty * self._strength / self.settings.p * penalty).backward()
        self._penalties = [self._penalties[0] + float(penalty.detach()), self._penalties[1] + 1]

    @override
    def on_validation_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return
        labels = batch_labels(batch, self.settings.label_key)
        logits = outputs.get("logits") if isinstance(outputs, Mapping) else None
        if labels is None:
            return
        if not isinstance(logits, Tensor):
            with torch.no_grad():
                logits = pl_module(batch_images(batch, self.settings.image_key))
        counted = held_out_correct(logits.detach(), labels) if isinstance(logits, Tensor) else None
        if counted is not None:
            self._held_out = [self._held_out[0] + counted[0], self._held_out[1] + counted[1]]

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        counts = torch.tensor(
            [*self._counts, *self._held_out, *self._tallies.flatten().tolist()],
            dtype=torch.long,
            device=pl_module.device,
        )
        counts = trainer.strategy.reduce(counts, reduce_op="sum").cpu().double()  # every rank's images
        seen, (pasted, erased, members) = float(counts[1]), counts[4:].reshape(3, -1)
        share = (counts[:2] / seen).tolist() if seen else [math.nan, math.nan]
        epoch, (right, held) = trainer.current_epoch, counts[2:4].tolist()
        if held:
            self._accuracy[epoch] = right / held
        active = self._active(epoch)
        scalars = {
            key("correction", self.settings.log_prefix, "active"): float(len(active)),
            key("correction", self.settings.log_prefix, "pasted_share"): share[0] if active else 0.0,
        }
        for index, correction in active:
            label, start = correction.artifact.target, correction.artifact.key_prefix
            scalars[key("correction", self.settings.log_prefix, f"{start}pasted_share/class_{label}")] = (
                float(pasted[index]) / seen if seen else math.nan
            )
            if self.settings.erase:
                of_class = float(members[index])
                scalars[key("correction", self.settings.log_prefix, f"{start}erased_share/class_{label}")] = (
                    float(erased[index]) / of_class if of_class else math.nan
                )
            for name, number in correction.artifact.scalars().items():
                scalars[key("correction", self.settings.log_prefix, f"{start}{name}/class_{label}")] = number
        scalars.update(self._guard(epoch, active))
        if self.settings.unlearn == "loss":
            total = trainer.strategy.reduce(torch.tensor(self._penalties, dtype=torch.float64), reduce_op="sum")
            scalars[key("correction", self.settings.log_prefix, "penalty")] = (
                float(total[0] / total[1]) if total[1] else 0.0
            )
        monitor(trainer.callback_metrics, scalars)
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(scalars, step=logged_step(trainer))

    # ----------------------------------------------------------------------------- state

    @override
    def state_dict(self) -> dict[str, Any]:
        # The discovery run of the epoch being saved is read now, not at the next epoch's start: the checkpoint
        # then holds its flags (and the artifacts they start), and a fit resumed from it corrects as this one does.
        if self._source is not None:
            self._follow(self._source)
        return {
            "corrections": [
                {
                    "artifact": c.artifact.state_dict(),
                    "epoch": c.epoch,
                    "origin": c.origin,
                    "spurious": c.spurious,
                    "until": c.until,
                }
                for c in self._corrections
            ],
            "p": self._strength,
            "accuracy": [[epoch, accuracy] for epoch, accuracy in sorted(self._accuracy.items())],
            "streaks": [[label, runs] for label, runs in sorted(self._streaks.items())],
            "property_streaks": [[name, label, runs] for (name, label), runs in sorted(self._property_streaks.items())],
            "last_run": self._last_run,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._corrections = [
            Correction(
                restore_artifact(c["artifact"]),
                int(c["epoch"]),
                str(c["origin"]),
                float(c.get("spurious", math.nan)),
                None if c.get("until") is None else int(c["until"]),  # none before corrections could stop
            )
            for c in state_dict["corrections"]
        ]
        self._strength = float(
            state_dict.get("p", self.settings.p)
        )  # none in a checkpoint from before the accuracy guard
        self._accuracy = {int(epoch): float(accuracy) for epoch, accuracy in state_dict.get("accuracy", [])}
        self._resumed = [c for c in self._corrections if c.until is None]
        self._streaks = {int(label): int(runs) for label, runs in state_dict["streaks"]}
        older = state_dict.get("property_streaks", [])  # none in a checkpoint from before the property corrections
        self._property_streaks = {(str(name), int(label)): int(runs) for name, label, runs in older}
        self._last_run = state_dict["last_run"]

    # ----------------------------------------------------------------------------- helpers

    def _followed(self, trainer: Trainer) -> GradSkipCallback | None:
        """The GradSkipCallback whose discovery stage is followed (None: none)."""
        if self.settings.discovery is False:
            return None
        callbacks: list[Callback] = trainer.callbacks  # type: ignore[attr-defined]  # set by the Trainer
        gradskips = [c for c in callbacks if isinstance(c, GradSkipCallback)]
        if isinstance(self.settings.discovery, str):
            named = [c for c in gradskips if c.log_prefix == self.settings.discovery]
            if not named or named[0].discovery is None:
                raise ValueError(
                    f"ShortcutCorrection(discovery={self.settings.discovery!r}) follows the GradSkipCallback with that "
                    f"log_prefix and its discovery stage on; the Trainer's GradSkipCallbacks: "
                    f"{[(c.log_prefix, c.discovery is not None) for c in gradskips]} (log_prefix, discovery on)"
                )
            return named[0]
        discovering = [c for c in gradskips if c.discovery is not None]
        if len(discovering) > 1:
            raise ValueError(
                f"ShortcutCorrection(discovery=True) follows the one GradSkipCallback with discovery on; there are "
                f"{len(discovering)} (log_prefix {[c.log_prefix for c in discovering]}): name one, "
                "ShortcutCorrection(discovery='<log_prefix>')"
            )
        if not discovering and self.settings.tag is None:
            raise ValueError(
                "ShortcutCorrection has nothing to correct: give a tag, or add "
                "GradSkipCallback(discovery=DiscoveryStage()) to the Trainer's callbacks"
            )
        return discovering[0] if discovering else None

    def _active(self, epoch: int) -> list[tuple[int, Correction]]:
        """The corrections (with their index) that correct training epoch ``epoch``: a flag read at the end of the
        epoch it was raised at (a checkpoint saved then) corrects from the next one."""
        if not self._strength:
            return []  # stopped (on_accuracy_drop="stop")
        return [(index, c) for index, c in enumerate(self._corrections) if c.runs_at(epoch)]

    def _follow(self, source: GradSkipCallback) -> None:
        """Read the discovery stage's newest run (once) and start correcting the classes, and the classes'
        properties, flagged long enough, from the training epoch after the run's."""
        discovered = source.discovered
        if discovered is None or discovered.epoch == self._last_run:
            return
        self._last_run, epoch = discovered.epoch, discovered.epoch + 1
        flagged = discovered.found.flagged.cpu().tolist()
        for label, flag in enumerate(flagged):
            if self.settings.classes is not None and label not in self.settings.classes:
                continue
            self._streaks[label] = self._streaks.get(label, 0) + 1 if flag else 0
            if self._streaks[label] >= self.settings.flagged_epochs and not self._corrected(label, PatchPaste.kind, ""):
                suspicion = float(discovered.found.suspicion[label])
                group = discovered.found.reported[label].group
                where = "the region its transplant test proved"
                where = (
                    f"{where} grown by {self.settings.margin} patches"
                    if self.settings.margin
                    else f"its probes' shared pixels at {where}"
                )
                origin = (
                    f"flagged by the discovery stage of {source.log_prefix!r} at epoch {discovered.epoch}, suspicion "
                    f"{suspicion:.2f}; {where}, the pixels from {len(group.members)} of its discovery probes "
                    f"({group.describe()})"
                )
                artifact = artifact_for(discovered, label, self.settings.margin)
                flips = discovered.found.reported[label].transplant.flip_rate
                self._stop_properties(label, epoch)
                self._start(Correction(artifact, epoch, origin, flips))
        self._follow_properties(discovered, source.log_prefix, epoch)

    def _follow_properties(self, discovered: Discovered, followed: str, epoch: int) -> None:
        """Start correcting the (class, property) pairs of ``discovered`` flagged long enough, from ``epoch``."""
        found = discovered.properties
        if found is None:
            return
        flags = {
            name: found.flagged[name].cpu().tolist()
            for name in found.flagged
            if name in self.settings.corrected_properties
        }
        for label in range(len(next(iter(found.flagged.values()), []))):
            if self.settings.classes is not None and label not in self.settings.classes:
                continue
            ready: dict[PropertyName, bool] = {}
            for name, flagged in flags.items():
                runs = self._property_streaks.get((name, label), 0) + 1 if flagged[label] else 0
                self._property_streaks[(name, label)] = runs
                ready[name] = runs >= self.settings.flagged_epochs
            if self._located_first(discovered, label):
                continue
            suspicions = {name: float(found.suspicion[name][label]) for name in ready}
            for name in proved_properties(ready, suspicions):
                if self._corrected(label, PropertyPaste.kind, f"{name}/"):
                    continue
                transfer = found.transfers[name][label]
                donors = int((discovered.probes.labels == label).sum())
                origin = (
                    f"flagged by the discovery stage of {followed!r} at epoch {discovered.epoch}, {name} suspicion "
                    f"{float(found.suspicion[name][label]):.2f} (flip rate {transfer.flip_rate:.2f}, control "
                    f"{transfer.control_flip_rate:.2f}); the {PROPERTIES[name].what} of the class's {donors} discovery "
                    "probes"
                )
                artifact = property_artifact_for(discovered, name, label)
                self._start(Correction(artifact, epoch, origin, transfer.flip_rate))

    def _guard(self, epoch: int, active: list[tuple[int, Correction]]) -> dict[str, float]:
        """The epoch's accuracy, its change since before the correction, the p in use and each corrected shortcut's
        spurious score (logged); warn and act (``on_accuracy_drop``) when the accuracy fell beyond the tolerance."""
        accuracy = self._accuracy.get(epoch, math.nan)
        scalars = {key("correction", self.settings.log_prefix, "p"): self._strength if active else 0.0}
        if not math.isnan(accuracy):
            scalars[key("correction", self.settings.log_prefix, "accuracy")] = accuracy
        if not active:
            return scalars
        if math.isnan(accuracy) and not self._unmeasured_said:
            self._unmeasured_said = True
            rank_zero_info(
                f"ShortcutCorrection: no validation image was classified at epoch {epoch}: what the correction costs "
                "in accuracy is not measured (it needs the fit's validation loop, with labels)"
            )
        began = min(correction.epoch for _, correction in active)
        before = [measured for measured in self._accuracy if measured < began]
        baseline = self._accuracy[max(before)] if before else math.nan
        change = accuracy - baseline
        scalars[key("correction", self.settings.log_prefix, "accuracy_change")] = change
        discovered = self._source.discovered if self._source is not None else None
        if discovered is not None and discovered.epoch == epoch:
            for _, correction in active:
                spurious = _flip_rate(discovered, correction.artifact)
                if math.isnan(correction.spurious) or spurious is None:
                    continue  # a tag: the stage reports no flip rate of it
                label, start = correction.artifact.target, correction.artifact.key_prefix
                scalars[key("correction", self.settings.log_prefix, f"{start}spurious/class_{label}")] = spurious
                change_key = f"{start}spurious_change/class_{label}"
                scalars[key("correction", self.settings.log_prefix, change_key)] = spurious - correction.spurious
        if change < -self.settings.accuracy_tolerance:  # False when either is NaN
            action = ACCURACY_DROP_ACTIONS[self.settings.on_accuracy_drop]
            self._strength = action.strength(self._strength)
            rank_zero_warn(
                f"ShortcutCorrection: the accuracy on the validation images fell from {baseline:.3f} (epoch "
                f"{max(before)}, before the correction) to {accuracy:.3f} at epoch {epoch}, more than "
                f"accuracy_tolerance={self.settings.accuracy_tolerance:g}; {action.what.format(p=self._strength)}"
            )
        return scalars

    def _located_first(self, discovered: Discovered, label: int) -> bool:
        """Whether class ``label``'s property flags of ``discovered`` wait for its located shortcut: its hotspot is
        flagged in the same run and no correction of it shaped the epoch that run measured. A placed artifact also
        moves the image-wide statistics (a checkerboard raises the noise estimate, and the signature with it), so
        the property flag is often the same shortcut; giving the class's statistics to every image as well would
        move real content. A property still flagged once the hotspot's correction runs is corrected then."""
        if not bool(discovered.found.flagged[label]):
            return False
        return not any(
            c.artifact.target == label and c.artifact.kind == PatchPaste.kind and c.epoch <= discovered.epoch
            for c in self._corrections
        )

    def _from_data(self, artifact: Artifact) -> bool:
        """Whether ``artifact`` is unlearned from the training images (pasted, erased), not by the loss."""
        return self.settings.unlearn == "data" or not isinstance(artifact, PatchPaste)

    def _corrected(self, label: int, kind: str, key_prefix: str) -> bool:
        """Whether an artifact of ``kind`` and ``key_prefix`` (its property) of class ``label`` is corrected (and not
        stopped)."""
        return any(
            c.artifact.target == label and c.artifact.kind == kind and c.artifact.key_prefix == key_prefix
            and c.until is None
            for c in self._corrections
        )  # fmt: skip

    def _stop_properties(self, label: int, epoch: int) -> None:
        """Stop class ``label``'s running property corrections from ``epoch``, where its hotspot's correction
        starts: a placed artifact moves the image-wide statistics too, so a property flagged before the hotspot
        is often the same shortcut, and giving the class's statistics to every image moves real content (the
        rule of :meth:`_located_first`, for a property flagged first). One still flagged once the hotspot's
        correction runs is corrected again then."""
        for index, c in enumerate(self._corrections):
            if c.artifact.target == label and c.artifact.kind == PropertyPaste.kind and c.until is None:
                self._corrections[index] = replace(c, until=max(epoch, c.epoch))
                rank_zero_info(
                    f"ShortcutCorrection: stopping class {label}'s {c.artifact.describe()} correction from epoch "
                    f"{max(epoch, c.epoch)}: its hotspot is corrected from then (a placed artifact moves the "
                    "image-wide statistics too); corrected again if still flagged once the hotspot's correction runs"
                )

    def _start(self, correction: Correction) -> None:
        self._corrections.append(correction)
        self._tallies = torch.cat([self._tallies, torch.zeros(3, 1, dtype=torch.long)], dim=1)
        self._say(correction, "correcting")

    def _say(self, correction: Correction, verb: str) -> None:
        artifact = correction.artifact
        images = f"{self._strength * 100:g} % of every class's training images"
        first = (
            "after taking it off the class's own images (from the batch's other classes) "
            if self.settings.erase
            else ""
        )
        action = f"{artifact.action(images)} {first}"
        if not self._from_data(artifact):
            action = f"penalising the model's input gradient on its pixels (weight {self.settings.penalty:g}) "
        rank_zero_info(
            f"ShortcutCorrection: {verb} class {artifact.target}'s {artifact.describe()}: {action}"
            f"from epoch {correction.epoch} ({correction.origin})"
        )
