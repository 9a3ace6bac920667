"""The one report of an epoch, which every sink consumes: built from what the epoch end computed
(:class:`EpochOutcome`) by :func:`epoch_report`: scalars, images, histograms, table rows, maps arrays."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from gradskip_lightning import render
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.core.validation import required
from gradskip_lightning.engine.discovery.images import discovery_images
from gradskip_lightning.engine.discovery.properties import property_images
from gradskip_lightning.engine.keys import key
from gradskip_lightning.engine.probes import ProbeSet
from gradskip_lightning.engine.scoring.record import ProbeRecord, npz_fields, scalar_fields, table_fields
from gradskip_lightning.engine.settings import RenderSettings
from gradskip_lightning.shortcuts import Discovery
from gradskip_lightning.shortcuts.discovery_properties import PropertyDiscovery

__all__ = [
    "HEAD_PARTS",
    "EpochOutcome",
    "EpochReport",
    "ProbeSheet",
    "build_report",
    "epoch_report",
    "epoch_scalars",
    "probe_sheet",
    "table_cells",
]


@dataclass
class ProbeSheet:
    """What stays fixed over the run: probe ids, labels and their display images.

    Attributes:
        probe_ids: the probes' ids.
        labels: the class name each probe explains.
        label_ids: (P,) int64 the class each probe explains.
        class_names: every class's name.
        images: (P, H, W, 3) uint8 display images.
        regions: names of the probes' regions, in the order of the per-region record fields.
    """

    probe_ids: list[int]
    labels: list[str]
    label_ids: np.ndarray
    class_names: list[str]
    images: np.ndarray
    regions: list[str] = field(default_factory=list)


@dataclass
class EpochReport:
    """Everything logged for one epoch, keys already carrying the callback's prefix.

    Attributes:
        epoch, step: the trainer's epoch and the step Lightning logs its epoch metrics at.
        scalars: key -> float.
        overlays: key -> (uint8 (H, W, 3) image, caption), one per probe (with ``probe_overlays``).
        images: key -> uint8 (H, W, 3) image (the grid, layer x head images, comparison grids).
        histograms: key -> 1-D values to histogram.
        rows: one dict per probe, column -> cell (``overlay`` as a uint8 image; None: empty).
        method: the explained method's name.
        arrays: per-probe arrays saved to the maps files, or None when this epoch is not saved.
        started: ``time.perf_counter()`` when the callback began the epoch; time_key: the key of
            the seconds since then in :meth:`timed_scalars` (None: not timed).
    """

    epoch: int
    step: int
    scalars: dict[str, float]
    method: str = ""
    arrays: dict[str, np.ndarray] | None = None
    overlays: dict[str, tuple[np.ndarray, str]] = field(default_factory=dict)
    images: dict[str, np.ndarray] = field(default_factory=dict)
    histograms: dict[str, np.ndarray] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    started: float = 0.0
    time_key: str | None = None

    def timed_scalars(self) -> dict[str, float]:
        """The scalars with ``time_key`` set to the seconds since ``started``, measured now."""
        scalars = dict(self.scalars)
        if self.time_key is not None:
            scalars[self.time_key] = time.perf_counter() - self.started
        return scalars


@dataclass
class EpochOutcome:
    """What one epoch end computed, on rank zero: the report is built from it alone.

    Attributes:
        epoch, step: the epoch, and the step Lightning logs its epoch metrics at (:func:`logged_step`).
        prefix: the callback's prefix of this epoch's keys; saved: whether the maps files get it (trained epochs).
        scalars: every scalar, finite or NaN (a skipped stage's values are NaN).
        method: the explained method; records: method -> the gathered per-probe record (empty when skipped).
        drift: drift name -> (P,) values.
        discovery: the discovery stage's result and its probes, when it ran and succeeded.
        properties: its global property transplants, when it tested any.
        started: ``time.perf_counter()`` when the epoch end began (the report times itself from it).
    """

    epoch: int
    step: int
    prefix: str
    saved: bool
    scalars: dict[str, float]
    method: str
    records: dict[str, ProbeRecord] = field(default_factory=dict)
    drift: dict[str, Tensor] = field(default_factory=dict)
    discovery: tuple[Discovery, ProbeSet] | None = None
    properties: PropertyDiscovery | None = None
    started: float = 0.0


#: Record fields of head importance and the names they are logged under.
HEAD_PARTS = {"head_weights": "omega", "grad_flow": "grad_flow", "sparsity": "sparsity"}


def _mean(values: Tensor) -> float:
    """Mean over finite entries (NaN when there are none)."""
    values = values.double()
    finite = values[torch.isfinite(values)]
    return float(finite.mean()) if finite.numel() else float("nan")


def _scores(prefix: str, record: ProbeRecord, regions: Sequence[str], method: str | None) -> dict[str, float]:
    """The means of ``record``'s scalar fields; ``method`` names a comparison method (None: the explained one)."""
    values = record.values()
    scores = {}
    for name, scalar in scalar_fields(compared_only=method is not None).items():
        if name not in values:
            continue
        if not scalar.regions:
            scores[key(scalar.section, prefix, scalar.name, method=method)] = _mean(values[name])
            continue
        for column, region in enumerate(regions):
            name_of_region = f"{scalar.name}/{region}"
            scores[key(scalar.section, prefix, name_of_region, method=method)] = _mean(values[name][:, column])
    return scores


def epoch_scalars(
    records: dict[str, ProbeRecord],
    method: str,
    drift: dict[str, Tensor],
    regions: Sequence[str],
    *,
    epoch: int,
    prefix: str,
) -> dict[str, float]:
    """Every scalar of one epoch, from the values every rank holds after the gather (scope ``shared``).

    ``records[method]`` is the explained method's; every other entry is a comparison method, whose
    keys end in ``/<name>``. ``regions`` names the columns of the per-region fields.
    """
    main = records[method]
    scalars = {key(None, prefix, "epoch"): float(epoch), **_scores(prefix, main, regions, None)}
    for name, per_probe in drift.items():
        scalars[key("drift", prefix, name)] = _mean(per_probe)
    if main.gates is not None:
        for layer, gate in enumerate(main.gates.mean(dim=0).tolist()):
            scalars[key("gates", prefix, f"layer_{layer}")] = gate
    for name in records:
        if name != method:
            scalars.update(_scores(prefix, records[name], regions, name))
    return scalars


def _display_factor(sheet: ProbeSheet, maps: Tensor) -> int:
    """The integer factor of the sheet's display images over the maps' (= the probes') size."""
    return max(1, sheet.images.shape[1] // maps.shape[1])


def _overlays(sheet: ProbeSheet, maps: Tensor, settings: RenderSettings) -> np.ndarray:
    """Overlays (P, H, W, 3) uint8 of maps (P, H, W) at the probes' own size, coloured there (upscale after).

    The sheet's display images are nearest-upscaled probes, so every ``factor``-th pixel is the probe's:
    the result upscaled is pixel for pixel the overlay of the upscaled map on the display image.
    """
    factor = _display_factor(sheet, maps)
    native = sheet.images[:, ::factor, ::factor] if factor > 1 else sheet.images
    return render.overlay(native, maps, alpha=settings.overlay_alpha, cmap=settings.colormap)


def _upscaled(overlays: np.ndarray, factor: int) -> np.ndarray:
    return np.repeat(np.repeat(overlays, factor, axis=1), factor, axis=2) if factor > 1 else overlays


def probe_sheet(
    probes: ProbeSet,
    class_names: Sequence[str],
    normalisation: Normalisation | None,
    display_size: int,
) -> ProbeSheet:
    """The fixed display part of the report: ids, label names and upscaled uint8 images (taken to pixels with
    ``normalisation``; None: each image min-max scaled)."""
    display = render.upscale(render.to_display(probes.images, normalisation), display_size)
    names = list(class_names)
    return ProbeSheet(
        probes.ids.tolist(),
        [names[int(c)] for c in probes.labels],
        probes.labels.numpy(),
        names,
        display,
        list(probes.regions or {}),
    )


def table_cells(values: dict[str, Tensor], index: int, regions: Sequence[str]) -> dict[str, float | None]:
    """One probe's table cells of the record's table fields (NaN -> None: an empty cell)."""
    cells: dict[str, float | None] = {}
    for name, (column, per_region) in table_fields().items():
        if name not in values:
            continue
        row = values[name][index]
        pairs = [(f"{column}/{r}", row[c]) for c, r in enumerate(regions)] if per_region else [(column, row)]
        for title, cell in pairs:
            cells[title] = float(cell) if bool(torch.isfinite(cell)) else None
    return cells


def build_report(
    records: dict[str, ProbeRecord],
    method: str,
    drift: dict[str, Tensor],
    sheet: ProbeSheet,
    scalars: dict[str, float],
    *,
    epoch: int,
    step: int,
    prefix: str,
    settings: RenderSettings,
    save: bool = True,
) -> EpochReport:
    """Build the report of one epoch (rank zero) from merged per-probe ``records`` (method -> record),
    ``drift`` and the epoch's ``scalars`` (:func:`epoch_scalars`).

    ``records[method]`` is the explained method's; every other entry is a comparison method. With
    ``save`` the report carries the arrays of the maps files (:func:`~.record.npz_fields` plus
    ``probe_ids``, ``labels`` and, with regions, ``region_names``).
    """
    main = records[method]
    compared = [name for name in records if name != method]
    arrays = None
    if save:
        arrays = {"probe_ids": np.asarray(sheet.probe_ids), "labels": sheet.label_ids}
        arrays.update({name: value.numpy() for name, value in main.values().items() if name in npz_fields()})
        if sheet.regions:
            arrays["region_names"] = np.asarray(sheet.regions, dtype=str)
    report = EpochReport(epoch=epoch, step=step, scalars=dict(scalars), method=method, arrays=arrays)

    main_maps = required(main.maps, "the explained method's maps")
    native = _overlays(sheet, main_maps, settings)
    overlays = _upscaled(native, _display_factor(sheet, main_maps))  # display size: single overlays, table
    names = sheet.class_names
    predictions = required(main.predictions, "the predictions").tolist()
    probabilities = required(main.probabilities, "the probabilities").tolist()
    if settings.probe_overlays:
        for i, probe_id in enumerate(sheet.probe_ids):
            text = render.caption(sheet.labels[i], names[predictions[i]], probabilities[i])
            report.overlays[key("probes", prefix, f"overlay/probe_{probe_id}")] = (overlays[i], text)
    report.images[key("probes", prefix, "overlays")] = render.screen_grid(native)
    for name, part in HEAD_PARTS.items():
        heads = getattr(main, name)  # (P, L, H), NaN-padded for SegFormer (its stages differ in heads)
        if heads is None:
            continue
        report.images[key("heads", prefix, part)] = render.matrix_image(heads.mean(dim=0), cmap="viridis")
        for layer in range(heads.shape[1]):
            values = heads[:, layer].flatten().numpy()
            report.histograms[key("heads", prefix, f"{part}/layer_{layer}")] = values[np.isfinite(values)]
    for name in compared:
        report.images[key("probes", prefix, "overlays", method=name)] = render.screen_grid(
            _overlays(sheet, required(records[name].maps, f"{name}'s maps"), settings)
        )

    def cell(name: str, i: int) -> float | None:
        value = float(drift[name][i]) if name in drift else float("nan")
        return value if np.isfinite(value) else None

    values = main.values()
    for i, probe_id in enumerate(sheet.probe_ids):
        row = {
            "epoch": epoch,
            "probe_id": probe_id,
            "overlay": overlays[i],
            "label": sheet.labels[i],
            "prediction": names[predictions[i]],
        }
        row.update(table_cells(values, i, sheet.regions))
        row["drift_prev_spearman"] = cell("prev/spearman", i)
        row["drift_first_spearman"] = cell("first/spearman", i)
        report.rows.append(row)
    return report


def epoch_report(
    outcome: EpochOutcome, sheet: ProbeSheet, settings: RenderSettings, normalisation: Normalisation | None
) -> EpochReport:
    """The epoch's report (rank zero), the one every sink consumes: the scalars only when the
    explanation was skipped; else the full report (:func:`build_report`) with the discovery
    stage's images. If building the images fails, the scalars alone, and a warning. The report
    times itself: ``<prefix>time_s`` is measured when a sink sends the scalars."""
    scalars = dict(outcome.scalars)
    report = EpochReport(outcome.epoch, outcome.step, scalars, method=outcome.method, started=outcome.started)
    report.time_key = key(None, outcome.prefix, "time_s")
    if not outcome.records:
        return report
    try:
        full = build_report(
            outcome.records, outcome.method, outcome.drift, sheet, scalars, epoch=outcome.epoch, step=outcome.step,
            prefix=outcome.prefix, settings=settings, save=outcome.saved,
        )  # fmt: skip
        if outcome.discovery is not None:
            found, probes = outcome.discovery
            full.images.update(
                discovery_images(found, probes, sheet.class_names, normalisation, settings, outcome.prefix)
            )
            if outcome.properties is not None:
                names = sheet.class_names
                full.images.update(
                    property_images(outcome.properties, probes, names, normalisation, settings, outcome.prefix)
                )
    except Exception as err:  # noqa: BLE001 - rank zero only, no collective inside: safe to go on alone
        rank_zero_warn(
            f"GradSkipCallback: the images and maps files of epoch {outcome.epoch} were not built, its scalars are "
            f"logged. {type(err).__name__}: {err}"
        )
        return report
    full.started, full.time_key = report.started, report.time_key
    return full
