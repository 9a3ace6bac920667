"""What one model's maps and global property transplants discover, per class, at epoch ends:
:class:`DiscoveryTrace` records every method's :func:`~gradskip_lightning.shortcuts.discover` result (and the
stage's methods' together) for each hotspot share as :class:`ClassRecord`s, and at every epoch end the discovery
stage's property transplants (:func:`~gradskip_lightning.shortcuts.discovery_properties.discover_properties` at the
stage's defaults) as :class:`PropertyRecord`s."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor, nn
from torch.utils.data import DataLoader
from typing_extensions import override

from gradskip_lightning.data.base import ImageClassificationDataModule, LabelledDataset
from gradskip_lightning.engine.discovery.stage import DISCOVERY_METHODS, DiscoveryStage
from gradskip_lightning.engine.probes import load_probes, stratified_indices
from gradskip_lightning.families.timm_vit import TimmViTExplainer, adapter_for
from gradskip_lightning.methods import PASS_METHODS
from gradskip_lightning.shortcuts import Discovery, DiscoverySettings, PixelSample, discover, summarise_classes
from gradskip_lightning.shortcuts.discovery_properties import PropertyDiscovery, discover_properties
from gradskip_lightning.shortcuts.image_properties import PixelSpace
from gradskip_lightning.shortcuts.regions import Region, patch_pixels
from gradskip_lightning.shortcuts.tags import spurious_score

from ..faithfulness.peers import PEERS, peer_method
from ..shortcuts import SHORTCUTS, shortcut_transplanted
from .variants import GLOBAL, PLACED

#: Maps of a method: (model, images (B, C, H, W), targets (B,)) -> token maps (B, h, w).
TokenMapFn = Callable[[nn.Module, Tensor, Tensor], Tensor]
#: Images per forward of the transplant test and the spurious score (the tiny ViT's fastest range on CPU).
BATCH = 64
#: The discovery stage at its defaults: its property transplants' properties, threshold, batch size and seed.
STAGE = DiscoveryStage()
#: The method name of the records of the stage's methods together (a class flagged when either's maps find it).
UNION = "+".join(DISCOVERY_METHODS)


def token_map_fn(name: str, ig_steps: int) -> TokenMapFn:
    """An engine method's token maps, or a peer's pixel maps summed over each patch (what the callback reads)."""
    if name in PASS_METHODS.names:
        return lambda model, images, targets: TimmViTExplainer(model, name).explain(images, targets).token_maps
    pixels = peer_method(name, ig_steps)

    def pooled(model: nn.Module, images: Tensor, targets: Tensor) -> Tensor:
        patch = adapter_for(model).patch_size
        return F.avg_pool2d(pixels(model, images, targets)[:, None], patch)[:, 0]

    return pooled


def method_names(methods: list[str], peers: list[str]) -> list[str]:
    """The engine methods, then the peers, in registry order (any unknown name is a ValueError)."""
    unknown = [m for m in [*methods, *peers] if m not in PASS_METHODS.names and m not in PEERS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {PASS_METHODS.names} and {tuple(PEERS)}")
    return [*methods, *peers]


@dataclass(frozen=True)
class ClassRecord:
    """One class of one model under one method and hotspot share at one trace point.

    ``target`` is the shortcut's class (-1 for clean models), ``stamp`` the stamp's pixel box (top,
    left, bottom, right; exclusive) of stamped and control models. The values are those of the class's
    reported test (:class:`~gradskip_lightning.shortcuts.discovery.ShortcutTest`: its hotspot, grown hotspot
    or a strategy's): ``box`` is its region's box in pixels; ``iou`` the region's IoU with the stamp and
    ``hit`` whether the class-mean map's top patch touches it (NaN without a stamp on this class);
    ``suspicion``, ``p_value`` (adjusted) and ``flagged`` the library's; ``tested_share`` the share of
    the class's probes in the test's group and ``grown`` whether the region is the grown hotspot.
    Rates and cues: :class:`~gradskip_lightning.metrics.HotspotTransplant` and
    :class:`~gradskip_lightning.shortcuts.discovery.MapGroup`. ``clean_accuracy`` is the model's accuracy
    on the test split without any stamp (NaN: not measured); ``corrected`` what a corrected model's
    :class:`~gradskip_lightning.ShortcutCorrection` corrected ("" for the other variants, "none" if nothing).
    """

    dataset: str
    seed: int
    variant: str
    shortcut: str
    target: int
    method: str
    share: float
    epoch: float
    label: int
    probes: int
    flip_rate: float
    random_flip_rate: float
    other_class_flip_rate: float
    constancy: float
    concentration: float
    consistency: float
    strategies: int
    box: tuple[int, int, int, int]
    stamp: tuple[int, int, int, int] | None
    iou: float
    hit: float
    spurious_score: float
    suspicion: float = math.nan
    p_value: float = math.nan
    flagged: bool = False
    tested_share: float = math.nan
    grown: bool = False
    clean_accuracy: float = math.nan
    corrected: str = ""


@dataclass(frozen=True)
class PropertyRecord:
    """One (class, property) of one model: the discovery stage's values of the class ``label`` and ``property``
    (``discovery/<prefix><property>/{suspicion,flip_rate,control_flip_rate,separability,p_value}/class_<label>``, and
    ``flagged``: counted in ``discovery/<prefix><property>/flagged``; :class:`~gradskip_lightning.shortcuts.
    discovery_properties.PropertyTransfer`), the model's shortcut (the property it changes and its class; "" and
    -1 when none, -1 when on every class), its spurious score (NaN: none), its accuracy on the probes, the
    seconds of the whole property test of the model, and the epoch end it was taken at (NaN: after training).
    """

    dataset: str
    seed: int
    variant: str
    shortcut_property: str
    target: int
    spurious_score: float
    accuracy: float
    property: str
    label: int
    recipients: int
    flip_rate: float
    control_flip_rate: float
    separability: float
    seconds: float
    epoch: float = math.nan
    suspicion: float = math.nan
    flagged: bool = False
    p_value: float = math.nan


def property_records(
    found: PropertyDiscovery,
    *,
    dataset: str,
    seed: int,
    variant: str,
    shortcut_property: str,
    target: int,
    spurious_score: float,
    accuracy: float,
    seconds: float,
    epoch: float = math.nan,
) -> list[PropertyRecord]:
    """One :class:`PropertyRecord` per property and class of ``found`` (property, then class order)."""
    return [
        PropertyRecord(
            dataset, seed, variant, shortcut_property, target, spurious_score, accuracy, name, label,
            transfer.recipients, transfer.flip_rate, transfer.control_flip_rate, transfer.separability, seconds,
            epoch, float(found.suspicion[name][label]), bool(found.flagged[name][label]),
            float(found.p_value[name][label]),
        )
        for name, transfers in found.transfers.items()
        for label, transfer in enumerate(transfers)
    ]  # fmt: skip


def discovery_probes(dataset: LabelledDataset, per_class: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Images (P, C, H, W) and classes (P,): ``per_class`` images per class, drawn as the callback draws probes."""
    probes = load_probes(dataset, stratified_indices(dataset.labels, per_class * int(dataset.labels.max() + 1), seed))
    return probes.images, probes.labels


def _overlap(hotspot: Tensor, top: Tensor, stamp: tuple[int, int, int, int] | None, patch: int) -> tuple[float, float]:
    """(IoU of the hotspot's pixels with the stamp's, 1.0 if the top patch (h, w) bool touches the stamp)."""
    if stamp is None:
        return math.nan, math.nan
    size = hotspot.shape[0] * patch
    truth = Region.of_box(*stamp).pixels(size, size)
    found = patch_pixels(hotspot, (patch, patch))
    iou = float((found & truth).sum() / (found | truth).sum())
    return iou, float((patch_pixels(top, (patch, patch)) & truth).any())


def predicted_share(model: nn.Module, dataset: LabelledDataset, target: int) -> float:
    """The spurious score of ``model`` on ``dataset`` (images of other classes carrying the shortcut)."""
    logits = [model(batch[0]) for batch in DataLoader(dataset, batch_size=4 * BATCH)]
    return spurious_score(torch.cat(logits), target)


def accuracy(model: nn.Module, dataset: LabelledDataset) -> float:
    """Share of ``dataset``'s images (multi-class) whose arg-max logit is their label."""
    hits = [(model(batch[0]).argmax(dim=1) == batch[1]).sum() for batch in DataLoader(dataset, batch_size=4 * BATCH)]
    return float(torch.stack(hits).sum()) / len(dataset)


@dataclass(frozen=True)
class Subject:
    """What a trace knows about the model it follows: its dataset, seed, variant, the shortcut's class
    (-1: none), its description, the stamp's pixel box on that class (None: no stamp there), the
    images of other classes carrying the shortcut (None: no spurious score), the test split
    without any stamp (None: no clean accuracy) and the global property the shortcut changes ("": none)."""

    dataset: str
    seed: int
    variant: str
    target: int
    shortcut: str
    stamp: tuple[int, int, int, int] | None
    transplanted: LabelledDataset | None
    clean: LabelledDataset | None = None
    shortcut_property: str = ""


class DiscoveryTrace(Callback):
    """At the end of each training epoch (``every_epoch``) or of the last one only: for every method, the
    discovery probes' token maps, their per-class summary and transplant test for each hotspot share; at the
    end of every training epoch, the discovery stage's property transplants (:data:`STAGE`) of the probes.

    Args:
        subject: the model's facts.
        images, classes: the discovery probes (P, C, H, W) and their classes (P,).
        methods: method name -> token map function.
        shares: hotspot shares to test.
        every_epoch: trace the maps every epoch (the first-fire point), else only the last.
        space: the probes' pixel space (the datamodule's mean and std), for the property transfers.
        pixels: the images a whole class's pixel test reads (the stage's ``pixel_probes_per_class``, the probes
            among them).
    """

    def __init__(
        self,
        subject: Subject,
        images: Tensor,
        classes: Tensor,
        methods: dict[str, TokenMapFn],
        shares: list[float],
        every_epoch: bool,
        space: PixelSpace,
        pixels: PixelSample,
    ) -> None:
        super().__init__()
        self.subject, self.images, self.classes, self.pixels = subject, images, classes, pixels
        self.methods, self.shares, self.every_epoch, self.space = methods, shares, every_epoch, space
        self.records: list[ClassRecord] = []
        self.property_records: list[PropertyRecord] = []

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        last = trainer.current_epoch + 1 >= (trainer.max_epochs or 0)
        epoch = float(trainer.current_epoch + 1)
        training = pl_module.training
        pl_module.eval()
        try:
            with torch.no_grad():
                score = math.nan
                if self.subject.transplanted is not None:
                    score = predicted_share(pl_module, self.subject.transplanted, self.subject.target)
            self.trace_properties(pl_module, epoch, score)
            if self.every_epoch or last:
                self.trace(pl_module, epoch, score)
        finally:
            pl_module.train(training)

    def trace_properties(self, model: nn.Module, epoch: float, score: float) -> None:
        """Record the stage's property transplants of ``model`` (in eval mode) at ``epoch``, with its spurious
        ``score``."""
        start = time.perf_counter()
        with torch.no_grad():
            logits = torch.cat([model(chunk) for chunk in self.images.split(BATCH)])
        num_classes = int(self.classes.max()) + 1
        found = discover_properties(
            model, self.images, self.classes, num_classes, STAGE.properties_for(self.images.shape[1]),
            space=self.space, alert_threshold=STAGE.property_alert_threshold, alpha=STAGE.alpha,
            batch_size=STAGE.batch_size, seed=STAGE.seed, logits=logits,
        )  # fmt: skip
        subject = self.subject
        self.property_records += property_records(
            found, dataset=subject.dataset, seed=subject.seed, variant=subject.variant,
            shortcut_property=subject.shortcut_property, target=subject.target, spurious_score=score,
            accuracy=float((logits.argmax(dim=1) == self.classes).double().mean()),
            seconds=time.perf_counter() - start, epoch=epoch,
        )  # fmt: skip

    def trace(self, model: nn.Module, epoch: float, score: float) -> None:
        """Record every method and share on ``model`` (in eval mode) at ``epoch``, with its spurious ``score``;
        and, where every method of the stage's default (:data:`STAGE`) is traced, their union as the stage tests it
        (one :func:`discover` of both summaries), under the method name :data:`UNION`."""
        with torch.no_grad():
            clean = math.nan if self.subject.clean is None else accuracy(model, self.subject.clean)
        num_classes = int(self.classes.max()) + 1
        patch = adapter_for(model).patch_size
        maps = {method: fn(model, self.images, self.classes).detach().double() for method, fn in self.methods.items()}
        union = len(DISCOVERY_METHODS) > 1 and set(DISCOVERY_METHODS) <= maps.keys()
        for share in self.shares:
            settings = DiscoverySettings(hotspot_share=share)
            summaries = {m: summarise_classes(each, self.classes, num_classes, settings) for m, each in maps.items()}
            runs = [(m, {m: summary}) for m, summary in summaries.items()]
            runs += [(UNION, {m: summaries[m] for m in DISCOVERY_METHODS})] if union else []
            for method, given in runs:
                found = discover(model, self.images, self.classes, given, patch_size=patch, batch_size=BATCH,
                                 pixel_sample=self.pixels)  # fmt: skip
                self.record(found, method, share, epoch, score, clean, patch[0])

    def record(
        self, found: Discovery, method: str, share: float, epoch: float, score: float, clean: float, patch: int
    ) -> None:
        """One :class:`ClassRecord` per class of what ``found`` reported."""
        for label, test in enumerate(found.reported):
            summary = found.summary_of(test)
            flat = summary.mean_maps[label].flatten()
            top = F.one_hot(flat.argmax(), flat.numel()).bool().reshape(summary.hotspots.shape[1:])
            transplant = test.transplant
            stamp = self.subject.stamp if label == self.subject.target else None
            iou, hit = _overlap(test.region.cpu(), top.cpu(), stamp, patch)
            box = tuple(int(v) * patch for v in test.box)
            self.records.append(
                ClassRecord(
                    dataset=self.subject.dataset,
                    seed=self.subject.seed,
                    variant=self.subject.variant,
                    shortcut=self.subject.shortcut,
                    target=self.subject.target,
                    method=method,
                    share=share,
                    epoch=epoch,
                    label=label,
                    probes=int(summary.counts[label]),
                    flip_rate=transplant.flip_rate,
                    random_flip_rate=transplant.random_flip_rate,
                    other_class_flip_rate=transplant.other_class_flip_rate,
                    constancy=transplant.constancy,
                    concentration=test.group.concentration,
                    consistency=test.group.consistency,
                    strategies=len(summary.strategies[label].sizes),
                    box=(box[0], box[1], box[2], box[3]),
                    stamp=stamp,
                    iou=iou,
                    hit=hit,
                    spurious_score=score,
                    clean_accuracy=clean,
                    suspicion=float(found.suspicion[label]),
                    p_value=float(found.p_values[label]),
                    flagged=bool(found.flagged[label]),
                    tested_share=test.group.share,
                    grown=test.grown,
                )
            )


def datamodule_subject(
    datamodule: ImageClassificationDataModule, dataset: str, seed: int, variant: str, shortcut: str, target: int
) -> Subject:
    """The :class:`Subject` of a model of ``variant`` (the stamp's transplanted test set for the stamped and
    corrected ones, the other classes' test images given the shortcut for a global variant on one class;
    the test split without any stamp, but for the global variants, whose test split carries their shortcut)."""
    datamodule.setup("test")
    if variant in GLOBAL:
        of, shortcut_of = GLOBAL[variant], SHORTCUTS[GLOBAL[variant].shortcut]
        transplanted = None if of.control else shortcut_transplanted(datamodule, target, shortcut_of.change)
        return Subject(dataset, seed, variant, -1 if of.control else target, shortcut, None, transplanted,
                       shortcut_property=shortcut_of.property)  # fmt: skip
    tag = datamodule.tag
    stamped = variant in (*PLACED, "control") and tag is not None
    return Subject(
        dataset, seed, variant, target if variant != "clean" else -1, shortcut,
        tag.box if stamped and tag is not None else None,
        datamodule.transplanted_test_dataset if variant in PLACED else None,
        datamodule.clean_test_dataset,
    )  # fmt: skip
