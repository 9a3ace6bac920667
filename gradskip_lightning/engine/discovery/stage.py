"""The callback's discovery stage: find a shortcut nobody named (:mod:`gradskip_lightning.shortcuts.discovery`).

Every ``every_n_epochs``-th explained epoch, the discovery probes (``probes_per_class`` per class,
drawn like the probes and kept in checkpoints) are explained for their own class with the stage's
methods (Chefer's and GradSkip by default); each method's maps are summarised per class
(:class:`~gradskip_lightning.metrics.ClassMapSummary`), each class's hotspot (and grown hotspot, and each SpRAy
strategy's) of either is transplanted onto the other classes' probes and every class gets a suspicion score and
a p-value (one Holm over every test). The scalars go in the
``discovery`` section (:func:`discovery_scalars`, monitorable like the others; in fit also each
class's peak suspicion so far, kept in checkpoints), the class-mean map grid and a flagged class's
strategies are images (:mod:`.images`), and a newly flagged class raises an alert. The global property
transplants (``properties``: :mod:`.properties`) give the other classes' probes each class's colour,
brightness, sharpness, noise, channel registration, stripes, interlacing and colour filter mosaic statistics all at
once (its signature) and, where that shows an effect, one at a time, and its hue (the most chromatic pixels'),
compression (JPEG blockiness), tone (the background's density), fixed pattern (each row's and column's own
brightness) and illumination (the light's slope across the field), with their own suspicion, keys, pictures and
alerts.

DDP: each rank explains its shard (:func:`~.distributed.shard_positions`, padded so every rank runs
as many forwards), the summary syncs in ``compute()`` (sums and every map, so strategies see the
union), and every rank runs the same transplant on the same probes: the figures equal one process's
on every rank, and no rank enters a collective alone (errors are gathered first).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist
from lightning.pytorch.utilities.seed import isolate_rng
from torch import Tensor, nn
from torch.utils.data import Dataset

from gradskip_lightning.core.adapter import eval_mode
from gradskip_lightning.core.explanation import ModelExplainer
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.core.pass_explainer import explain_each
from gradskip_lightning.engine.keys import key
from gradskip_lightning.engine.probes import ItemKeys, ProbeSet, ProbeSource, check_probes
from gradskip_lightning.engine.scoring.distributed import shard_positions
from gradskip_lightning.engine.settings import positive
from gradskip_lightning.families import all_methods
from gradskip_lightning.metrics.perturbation import Activation
from gradskip_lightning.shortcuts import ClassMapSummary, Discovery, DiscoverySettings, PixelSample, discover
from gradskip_lightning.shortcuts.discovery_properties import PropertyDiscovery, chosen_properties, discover_properties
from gradskip_lightning.shortcuts.distinct_forward import DistinctForward
from gradskip_lightning.shortcuts.image_properties import PixelSpace, PropertyName
from gradskip_lightning.shortcuts.probe_transfers import ProbeTransfers

__all__ = ["DiscoveryStage", "Discoverer", "Discovered", "StageRun", "discovery_scalars", "usable_maps", "CLASS_VALUES"]


#: Default ``property_alert_threshold``, chosen in docs/discovery.md (*Global properties*).
PROPERTY_ALERT_THRESHOLD = 0.4
#: Default ``method``: the maps of both, each class tested at either's hotspots (docs/discovery.md, *Which
#: method*): each alone missed stamps the other found (Chefer a placed stamp at 2 of 12 epoch ends, GradSkip a
#: stamp on part of a class at 4 of 8), and both run on every family.
DISCOVERY_METHODS = ("chefer", "gradskip")


@dataclass(frozen=True)
class DiscoveryStage(DiscoverySettings):
    """The callback's ``discovery`` group: the analysis knobs (:class:`DiscoverySettings`) and when and on what it runs.

    Given, the stage runs (``GradSkipCallback(discovery=DiscoveryStage())``); None turns it off.

    Attributes:
        probes_per_class: discovery probes drawn per class (stratified, ``probe_seed``), explained for their class;
            at least :data:`~gradskip_lightning.shortcuts.discovery_transplant.MIN_TESTED_PROBES` (3) for a
            class's p-value in the hotspot and the property tests alike (with fewer a class is scored but never
            flagged).
        pixel_probes_per_class: images per class the pixel test of a whole class reads (drawn as the discovery probes,
            which are among them; never forwarded nor explained): at least ``probes_per_class`` (equal: the probes
            alone). A stamp on part of a class is on few of its 8 probes, too few pairs for their agreement to stand
            out from the other classes' (a stamp on 5 of 8 was missed at every epoch, and found with 32; kept on the
            stage's device, ``pixel_probes_per_class`` x classes images, each C x H x W floats).
        every_n_epochs: run at every n-th explained epoch (epochs n-1, 2n-1, ...; always under ``validate()``).
        batch_size: images per forward of the transplant test.
        method: the method, or methods, whose maps the stage summarises: with several, each class is tested at every
            method's hotspots (one Holm over all), so it is flagged when either's fires (default
            :data:`DISCOVERY_METHODS`, by measurement: docs/discovery.md; None: the callback's ``method``); one other
            than the callback's is explained for the discovery probes only (with its default options).
        properties: the image-wide properties whose transfer each class is tested with (names of
            :data:`~gradskip_lightning.shortcuts.image_properties.PROPERTIES`); None: all that apply to the
            model's channels (colour, hue, tone, registration and signature need 3); ``()``: none. Where the
            classes' objects differ by their colour, name them without ``hue``: a class's hue is then the class.
        property_alert_threshold: property suspicion at or above which a (class, property) is flagged (with its
            p-value at most ``alpha``: the sign test of the flips, Holm over the epoch's (class, property) tests),
            in [0, 1]: the effect-size floor, set by the properties benchmark.
    """

    probes_per_class: int = 8
    pixel_probes_per_class: int = 32
    every_n_epochs: int = 1
    batch_size: int = 64
    method: str | tuple[str, ...] | None = DISCOVERY_METHODS
    properties: tuple[PropertyName, ...] | None = None
    property_alert_threshold: float = PROPERTY_ALERT_THRESHOLD

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.properties is not None:  # a YAML list becomes a tuple
            object.__setattr__(self, "properties", chosen_properties(self.properties, option="discovery.properties"))
        threshold = self.property_alert_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
            raise ValueError(f"property_alert_threshold must be a number in [0, 1]; got {threshold!r}")
        positive("probes_per_class", self.probes_per_class)
        positive("pixel_probes_per_class", self.pixel_probes_per_class)
        if self.pixel_probes_per_class < self.probes_per_class:
            raise ValueError(
                f"pixel_probes_per_class ({self.pixel_probes_per_class}) must be at least probes_per_class "
                f"({self.probes_per_class}): the probes are among the images the pixel test reads"
            )
        positive("every_n_epochs", self.every_n_epochs)
        positive("batch_size", self.batch_size)
        if isinstance(self.method, list):  # a YAML list becomes a tuple
            object.__setattr__(self, "method", tuple(self.method))
        names = (self.method,) if isinstance(self.method, str) else self.method or ()
        if (self.method is not None and not names) or any(name not in all_methods() for name in names):
            raise ValueError(f"discovery method must be None or one or more of {all_methods()}, got {self.method!r}")
        if len(set(names)) < len(names):
            raise ValueError(f"discovery method names a method twice: {self.method!r}")

    def methods(self, default: str) -> tuple[str, ...]:
        """The methods whose maps the stage summarises, the first the primary (its maps are the ones shown);
        ``default``: the callback's method, used when ``method`` is None."""
        if self.method is None:
            return (default,)
        return (self.method,) if isinstance(self.method, str) else self.method

    def properties_for(self, channels: int) -> tuple[PropertyName, ...]:
        """The properties tested on images of ``channels`` channels; a named one that does not apply is a ValueError."""
        return chosen_properties(self.properties, channels, "discovery.properties")

    @property
    def analysis(self) -> DiscoverySettings:
        """The :class:`DiscoverySettings` part."""
        return DiscoverySettings(**{f.name: getattr(self, f.name) for f in dataclasses.fields(DiscoverySettings)})


#: Per-class scalar name -> what it is (for docs/logged-keys.md); logged as ``discovery/<prefix><name>/class_<k>``.
#: The class's values are those of its reported test: of its hotspot, grown hotspot and SpRAy strategies'
#: hotspots, the most suspicious test that fires, else the most suspicious.
CLASS_VALUES: dict[str, str] = {
    "suspicion": "suspicion score in [0, 1] of the class's reported test (of its hotspot, grown hotspot and "
    "strategies' hotspots, the most suspicious that fires, else the most suspicious): flip excess x square root of "
    "concentration x constancy",
    "p_value": "the reported test's adjusted p-value over every test of the epoch: the flips' sign test first (Holm "
    "at `alpha`/2), then, where that passes, the pixels' agreement test (Holm at `alpha`/2 over those tests), the "
    "larger of the two; flagged when at most `alpha` with the suspicion at least "
    "`alert_threshold`",
    "flagged": "1 when a test of the class fires (adjusted p-value at most `alpha`, suspicion at least "
    "`alert_threshold`), else 0: the class's alarm, to monitor or stop on",
    "peak_suspicion": "in fit: the class's highest suspicion so far in this fit (kept in checkpoints)",
    "tested_share": "share of the class's discovery probes in the reported test's group (1: the whole class; less: "
    "a SpRAy strategy, its shared-patch group or its copy group)",
    "flip_rate": "share of other classes' probes predicted as the class with the tested region pasted in; NaN when "
    "the reported test was not measured (its map or pixel cue is 0, so it cannot fire, and no test of the epoch "
    "reached `alert_threshold`; its p-value is then 1)",
    "random_flip_rate": "control: a region of the tested region's shape at a random place of the same probes",
    "other_class_flip_rate": "control: the tested region's place taken from other classes' probes",
    "constancy": "how much more the tested region's pixels agree across the group's images (the whole class: its "
    "`pixel_probes_per_class` images) than within other classes (1: a stamp on every image, s^2 on a share s)",
    "consistency": "mean pairwise Spearman correlation of the group's maps",
    "concentration": "1 - the group's hotspot patches / (share x all patches)",
    "strategies": "SpRAy strategies (eigengap) among the class's maps",
    "hotspot/top": "the tested region's box in pixels: top row (also left, bottom, right; bottom and right exclusive)",
}
BOX_SIDES = ("top", "left", "bottom", "right")


def discovery_scalars(
    found: Discovery, patch_size: tuple[int, int], prefix: str, peak: Tensor | None = None
) -> dict[str, float]:
    """The ``discovery`` scalars of one epoch: per class k the :data:`CLASS_VALUES` (``peak_suspicion`` with
    ``peak`` (K,), in fit) and the hotspot box in pixels, plus ``max_suspicion``, ``peak_suspicion`` (with
    ``peak``) and ``flagged`` (how many classes a test fires for)."""
    summary, scalars = found.summary, dict[str, float]()
    for label, test in enumerate(found.reported):
        transplant = test.transplant
        per_class: dict[str, float] = {
            "suspicion": float(found.suspicion[label]),
            "p_value": float(found.p_values[label]),
            "flagged": float(found.flagged[label]),
            "tested_share": test.group.share,
            "flip_rate": transplant.flip_rate,
            "random_flip_rate": transplant.random_flip_rate,
            "other_class_flip_rate": transplant.other_class_flip_rate,
            "constancy": transplant.constancy,
            "consistency": test.group.consistency,
            "concentration": test.group.concentration,
            "strategies": float(len(summary.strategies[label].sizes)),
        }
        if peak is not None:
            per_class["peak_suspicion"] = float(peak[label])
        for side, patches in zip(BOX_SIDES, test.box, strict=True):
            per_class[f"hotspot/{side}"] = float(patches * patch_size[side in ("left", "right")])
        for name, value in per_class.items():
            scalars[key("discovery", prefix, f"{name}/class_{label}")] = value
    for name, values in (("max_suspicion", found.suspicion), ("peak_suspicion", peak)):
        if values is not None:
            finite = values[~values.isnan()]
            scalars[key("discovery", prefix, name)] = float(finite.max()) if len(finite) else math.nan
    scalars[key("discovery", prefix, "flagged")] = float(found.flagged.sum())
    return scalars


def usable_maps(maps: Tensor) -> Tensor:
    """(P,) bool: which token maps (P, h, w) a class summary can use: finite and not all zero (the
    explainer zeroes a probe whose relevance overflowed inside the model; an all-zero map says nothing).

    Example:
        >>> usable_maps(torch.tensor([[[1.0, 0.0]], [[0.0, 0.0]], [[float("inf"), 1.0]]])).tolist()
        [True, False, False]
    """
    flat = maps.flatten(1)
    return torch.isfinite(flat).all(dim=1) & (flat != 0).any(dim=1)


@dataclass(frozen=True)
class StageRun:
    """One run of the stage: its discovery (None when it failed), the first rank's error, the ids of
    the probes whose maps were degenerate and left out of their class's summary, and the global property
    transplants (None when none are tested)."""

    found: Discovery | None
    error: str | None
    degenerate: list[int] = dataclasses.field(default_factory=list)
    properties: PropertyDiscovery | None = None


@dataclass(frozen=True)
class Discovered:
    """A successful run of the stage during fit, kept for what acts on it (a
    :class:`~gradskip_lightning.callbacks.shortcut_correction.ShortcutCorrection`).

    Attributes:
        epoch: the epoch it ran at.
        found: what it found (flagged classes, their hotspots).
        probes: the discovery probes it explained (the flagged class's images are its donors).
        patch_size: (ph, pw) pixels per patch of the hotspots.
        properties: its global property transplants (flagged (class, property) pairs, the pixel space), None
            when none are tested.
    """

    epoch: int
    found: Discovery
    probes: ProbeSet
    patch_size: tuple[int, int]
    properties: PropertyDiscovery | None = None


def _world() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class Discoverer:
    """The discovery stage's state over a callback's life: its probes, the classes and (property, class) pairs
    alerted and each class's (and each property's per class) peak suspicion in this fit.

    Args:
        settings: the ``discovery`` group.
        seed: seed of the probe draw (the callback's ``probe_seed``).
        keys: where mapping dataset items hold the image, the label and the masks (the callback's probes').
    """

    def __init__(self, settings: DiscoveryStage | None, seed: int, keys: ItemKeys = ItemKeys()) -> None:
        self.settings = settings
        per_class = 0 if settings is None else settings.probes_per_class
        self.source = ProbeSource(None, per_class, seed, keys, "discovery.probes_per_class")
        self.pixel_source = ProbeSource(None, 0, seed, keys, "discovery.pixel_probes_per_class")
        self._pixels: tuple[ProbeSet, PixelSample] | None = None  # the drawn images, on the stage's device
        #: The property tests' probe side (statistics, pairings, transferred images), kept over the fit.
        self.transfers: ProbeTransfers | None = None
        self.alerted: set[int] = set()
        self.peak: list[float] = []  # per class, NaN until a finite suspicion
        self.alerted_properties: set[tuple[str, int]] = set()
        self.property_peak: dict[str, list[float]] = {}  # per property, per class as ``peak``

    @property
    def probes(self) -> ProbeSet | None:
        return self.source.probes

    def _pixels_on(self, device: torch.device) -> PixelSample | None:
        """The images the pixel test of a whole class reads (the probes among them) on ``device``, compared once per
        draw; None: the probes alone."""
        drawn = self.pixel_source.probes
        if drawn is None:
            return None
        if self._pixels is None or self._pixels[0] is not drawn or self._pixels[1].images.device != device:
            self._pixels = (drawn, PixelSample(drawn.images.clone().to(device), drawn.labels.to(device)))
        return self._pixels[1]

    def _transfers_for(self, images: Tensor, labels: Tensor, space: PixelSpace, seed: int) -> ProbeTransfers:
        """The property tests' statistics and transfers of these probes, kept from the last run when it had the same
        probes (and space and seed): the probes' transfers are computed once a fit."""
        if self.transfers is None or not self.transfers.holds(images, labels, space, seed):
            self.transfers = ProbeTransfers(images, labels, space, seed)
        return self.transfers

    @property
    def drawn(self) -> bool:
        """Whether the stage has what it needs before an epoch: off, or its probes drawn."""
        return self.settings is None or self.source.probes is not None

    def draw(self, dataset: Dataset, explainer: ModelExplainer) -> None:
        """Draw ``probes_per_class`` x the model's classes probes from ``dataset`` (unless drawn or off) and
        check them against ``explainer`` as the probes are, before any epoch (:func:`~.probes.check_probes`)."""
        if self.settings is None:
            return
        if self.source.probes is None:
            per_class, num_classes = self.settings.probes_per_class, explainer.num_classes
            self.source.num_probes = per_class * num_classes
            self.source.setting = f"discovery.probes_per_class={per_class} (x {num_classes} classes)"
            probes = self.source.draw(dataset)
            check_probes(probes, explainer.in_chans, explainer.img_size, num_classes, "discovery probe")
            explainer.check_images(probes.images)
        pixel_per_class = self.settings.pixel_probes_per_class
        if self.pixel_source.probes is None and pixel_per_class > self.settings.probes_per_class:
            items = len(dataset)  # type: ignore[arg-type]  # map-style: sized
            # as many as the dataset has: fewer images for the pixels is no reason to warn
            self.pixel_source.num_probes = min(pixel_per_class * explainer.num_classes, items)
            self.pixel_source.setting = f"discovery.pixel_probes_per_class={pixel_per_class}"
            sample = self.pixel_source.draw(dataset)
            check_probes(sample, explainer.in_chans, explainer.img_size, explainer.num_classes, "discovery pixel probe")
        self.settings.properties_for(explainer.in_chans)

    def due(self, epoch: int, fitting: bool) -> bool:
        """Whether the explained ``epoch`` runs the stage (always outside fit)."""
        return (
            self.settings is not None
            and self.probes is not None
            and (not fitting or (epoch + 1) % self.settings.every_n_epochs == 0)
        )

    def reset(self) -> None:
        """A new fit: draw again, alert again, peaks afresh."""
        self.source.reset()
        self.pixel_source.reset()
        self._pixels, self.transfers = None, None
        self.alerted, self.alerted_properties = set(), set()
        self.peak, self.property_peak = [], {}

    def run(
        self,
        module: nn.Module,
        explainers: Mapping[str, ModelExplainer],
        *,
        batch_size: int,
        activation: Activation,
        normalisation: Normalisation | None = None,
    ) -> StageRun:
        """Explain with each method (one pass where they can share it:
        :func:`~gradskip_lightning.core.pass_explainer.explain_each`), summarise and transplant on every rank (the
        same :class:`StageRun` on each).

        ``module``: the module the ``explainers`` (by method, the stage's :meth:`DiscoveryStage.methods`) explain
        (a LightningModule, a ``transformers`` model). A probe whose map is degenerate (:func:`usable_maps`) is left
        out of that method's class summary. ``normalisation`` (the probes'; None: each channel's range over them)
        takes the probes to pixels for the property transfers. Every rank must call it. Isolated like the
        callback's explanation (RNG, modes, no parameter gradients).
        """
        probes = self.probes
        if probes is None or self.settings is None:
            return StageRun(None, "no discovery probes")
        explainer = next(iter(explainers.values()))
        shard = shard_positions(len(probes))
        own = shard.positions[: shard.count]
        device = next(explainer.model.parameters()).device
        error, maps = None, dict[str, Tensor]()
        with isolate_rng(include_cuda=True), torch.inference_mode(False), eval_mode(module):
            try:
                chunks: dict[str, list[Tensor]] = {method: [] for method in explainers}
                for start in range(0, len(shard.positions), batch_size):
                    index = shard.positions[start : start + batch_size]
                    images = probes.images[index].clone().to(device)
                    explained = explain_each(list(explainers.values()), images, probes.labels[index].to(device))
                    for method, explanation in zip(explainers, explained, strict=True):
                        chunks[method].append(explanation.token_maps.detach())
                maps = {method: torch.cat(parts)[: shard.count] for method, parts in chunks.items()}
            except Exception as err:  # noqa: BLE001 - isolation, as the callback's explanation
                error = f"{type(err).__name__}: {err}"
            usable = {method: usable_maps(token_maps) for method, token_maps in maps.items()}
            left_out = sorted({p for ok in usable.values() for p in own[~ok.cpu()].tolist()})
            parts: list[tuple[str | None, list[int]]] = [(error, left_out)]
            if _world() > 1:
                parts = [(None, [])] * _world()
                dist.all_gather_object(parts, (error, left_out))
            failed = next((e for e, _ in parts if e is not None), None)
            if failed is not None:
                return StageRun(None, f"discovery: {failed}")
            degenerate = sorted({int(probes.ids[p]) for _, positions in parts for p in positions})
            summaries = {}
            for method, token_maps in maps.items():
                metric = ClassMapSummary(
                    explainer.num_classes, (token_maps.shape[1], token_maps.shape[2]), settings=self.settings.analysis
                ).to(device)
                ok = usable[method]
                if ok.any():  # a class whose every map is degenerate is a class without maps (NaN suspicion)
                    metric.update(token_maps[ok].double(), probes.labels[own].to(device)[ok], own[ok.cpu()])
                summaries[method] = metric.compute()  # syncs across processes
            images, labels = probes.images.clone().to(device), probes.labels.to(device)
            forward = DistinctForward(explainer.model)  # each distinct image once over both tests
            found = discover(
                forward,
                images,
                labels,
                summaries,
                patch_size=explainer.patch_size,
                batch_size=self.settings.batch_size,
                activation=activation,
                measure_all=False,
                pixel_sample=self._pixels_on(device),
            )
            names = self.settings.properties_for(explainer.in_chans)
            try:  # the same probes and seed on every rank: it fails on all or none, with no collective inside
                space, seed = PixelSpace.of(images, normalisation), self.settings.seed
                properties = None if not names else discover_properties(
                    forward, images, labels, explainer.num_classes, names, space=space,
                    alert_threshold=self.settings.property_alert_threshold, alpha=self.settings.alpha,
                    batch_size=self.settings.batch_size, activation=activation, seed=seed,
                    probes=self._transfers_for(images, labels, space, seed),
                )  # fmt: skip
            except Exception as err:  # noqa: BLE001 - isolation, as the explanation
                return StageRun(None, f"discovery (global properties): {type(err).__name__}: {err}")
        return StageRun(found, None, degenerate, properties)

    def newly_flagged(self, found: Discovery) -> list[int]:
        """The flagged classes not alerted yet in this fit (then remembered)."""
        new = [int(c) for c in found.flagged.nonzero()[:, 0].tolist() if int(c) not in self.alerted]
        self.alerted.update(new)
        return new

    def record_peak(self, found: Discovery) -> Tensor:
        """(K,) float64 each class's highest suspicion in this fit, ``found`` included (NaN: never finite)."""
        current = _running_max(self.peak, found.suspicion)
        self.peak = current.tolist()
        return current

    def record_property_peaks(self, found: PropertyDiscovery) -> dict[PropertyName, Tensor]:
        """Per property of ``found``, (K,) float64 each class's highest suspicion for it in this fit (as
        :meth:`record_peak`)."""
        peaks = {name: _running_max(self.property_peak.get(name, []), now) for name, now in found.suspicion.items()}
        self.property_peak.update({name: peak.tolist() for name, peak in peaks.items()})
        return peaks

    def newly_flagged_properties(self, found: PropertyDiscovery) -> list[tuple[PropertyName, int]]:
        """The flagged (property, class) pairs not alerted yet in this fit (then remembered)."""
        new = [
            (name, int(label))
            for name, flagged in found.flagged.items()
            for label in flagged.nonzero()[:, 0].tolist()
            if (name, int(label)) not in self.alerted_properties
        ]
        self.alerted_properties.update(new)
        return new

    def state_dict(self) -> dict[str, object]:
        probes, sample = self.source.probes, self.pixel_source.probes
        return {
            "ids": None if probes is None else probes.ids.clone(),
            "pixel_ids": None if sample is None else sample.ids.clone(),
            "alerted": sorted(self.alerted),
            "peak": list(self.peak),
            "alerted_properties": [[name, label] for name, label in sorted(self.alerted_properties)],
            "property_peak": {name: list(peak) for name, peak in self.property_peak.items()},
        }

    def load_state_dict(self, state: dict[str, object] | None) -> None:
        if not state:
            return
        ids = state.get("ids")
        self.source.restore(ids if isinstance(ids, Tensor) else None)
        pixel_ids = state.get("pixel_ids")
        self.pixel_source.restore(pixel_ids if isinstance(pixel_ids, Tensor) else None)
        alerted, peak = state.get("alerted"), state.get("peak")
        self.alerted = set(alerted) if isinstance(alerted, list) else set()
        self.peak = [float(v) for v in peak] if isinstance(peak, list) else []
        pairs = state.get("alerted_properties")
        self.alerted_properties = {(str(n), int(k)) for n, k in pairs} if isinstance(pairs, list) else set()
        peaks = state.get("property_peak")
        restored = peaks.items() if isinstance(peaks, dict) else ()
        self.property_peak = {str(name): [float(v) for v in peak] for name, peak in restored}


def _running_max(previous: list[float], current: Tensor) -> Tensor:
    """(K,) float64 on the CPU: ``current`` (K,), raised to ``previous`` (K values, else ignored) where higher; NaN
    only where both are.

    Example:
        >>> _running_max([0.7, math.nan, 0.1], torch.tensor([0.2, 0.3, math.nan], dtype=torch.float64)).tolist()
        [0.7, 0.3, 0.1]
    """
    current = current.detach().cpu()
    if len(previous) == len(current):
        current = torch.fmax(current, torch.tensor(previous, dtype=current.dtype))
    return current
