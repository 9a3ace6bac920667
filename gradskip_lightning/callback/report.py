"""Turn one epoch's per-probe records into the logged report: scalars, images, histograms, rows, arrays."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gradskip_lightning import render

from .probes import ProbeSet
from .record import ProbeRecord, npz_fields, scalar_fields, table_fields
from .sinks import EpochReport, ProbeSheet

__all__ = ["RenderSettings", "build_report", "probe_sheet", "HEAD_PARTS"]

#: Record fields of head importance and the names they are logged under.
HEAD_PARTS = {"head_weights": "omega", "grad_flow": "grad_flow", "sparsity": "sparsity"}


@dataclass(frozen=True)
class RenderSettings:
    """Display options: colour map, heat-map weight and the smallest displayed side in pixels."""

    colormap: str = "inferno"
    alpha: float = 0.5
    display_size: int = 128


def _mean(values: Tensor) -> float:
    """Mean over finite entries (NaN when there are none)."""
    values = values.double()
    finite = values[torch.isfinite(values)]
    return float(finite.mean()) if finite.numel() else float("nan")


def _scores(prefix: str, record: ProbeRecord, compared_only: bool) -> dict[str, float]:
    values = record.values()
    return {
        f"{prefix}{key}": _mean(values[name])
        for name, key in scalar_fields(compared_only).items()
        if name in values
    }


def _overlays(sheet: ProbeSheet, maps: Tensor, settings: RenderSettings) -> np.ndarray:
    """Upscaled overlays (P, S, S, 3) uint8 of maps (P, H, W) over the sheet's display images."""
    factor = sheet.images.shape[1] // maps.shape[1]
    maps = maps.repeat_interleave(factor, dim=1).repeat_interleave(factor, dim=2) if factor > 1 else maps
    return render.overlay(sheet.images, maps, alpha=settings.alpha, cmap=settings.colormap)


def probe_sheet(
    probes: ProbeSet,
    class_names: Sequence[str],
    mean: Sequence[float] | None,
    std: Sequence[float] | None,
    display_size: int,
) -> ProbeSheet:
    """The fixed display part of the report: ids, label names and upscaled uint8 images."""
    display = render.upscale(render.to_display(probes.images, mean, std), display_size)
    names = list(class_names)
    return ProbeSheet(
        probes.ids.tolist(), [names[int(c)] for c in probes.labels], probes.labels.numpy(), names, display
    )


def build_report(
    records: dict[str, ProbeRecord],
    method: str,
    drift: dict[str, Tensor],
    sheet: ProbeSheet,
    *,
    epoch: int,
    step: int,
    prefix: str,
    settings: RenderSettings,
    save: bool = True,
) -> EpochReport:
    """Build the report of one epoch from merged per-probe ``records`` (method -> record) and ``drift``.

    ``records[method]`` is the explained method's; every other entry is a comparison method,
    logged under ``compare/<name>/``. With ``save`` the report carries the arrays of the maps
    files (:func:`~.record.npz_fields` plus ``probe_ids`` and ``labels``).
    """
    main = records[method]
    compared = [name for name in records if name != method]
    scalars = {f"{prefix}epoch": float(epoch), **_scores(prefix, main, compared_only=False)}
    for key, per_probe in drift.items():
        scalars[f"{prefix}drift/{key}"] = _mean(per_probe)
    if main.gates is not None:
        for layer, gate in enumerate(main.gates.mean(dim=0).tolist()):
            scalars[f"{prefix}gate/layer_{layer}"] = gate
    for name in compared:
        scalars.update(_scores(f"{prefix}compare/{name}/", records[name], compared_only=True))
    arrays = None
    if save:
        arrays = {"probe_ids": np.asarray(sheet.probe_ids), "labels": sheet.label_ids}
        arrays.update({name: value.numpy() for name, value in main.values().items() if name in npz_fields()})
    report = EpochReport(epoch=epoch, step=step, scalars=scalars, method=method, arrays=arrays)

    overlays = _overlays(sheet, main.maps, settings)
    names = sheet.class_names
    predictions = main.predictions.tolist()
    probabilities = main.probabilities.tolist()
    for i, probe_id in enumerate(sheet.probe_ids):
        text = render.caption(sheet.labels[i], names[predictions[i]], probabilities[i])
        report.overlays[f"{prefix}overlay/probe_{probe_id}"] = (overlays[i], text)
    report.images[f"{prefix}overlays"] = render.image_grid(overlays)
    for field, part in HEAD_PARTS.items():
        heads = getattr(main, field)  # (P, L, H)
        if heads is None:
            continue
        report.images[f"{prefix}heads/{part}"] = render.matrix_image(heads.mean(dim=0), cmap="viridis")
        for layer in range(heads.shape[1]):
            report.histograms[f"{prefix}heads/{part}/layer_{layer}"] = heads[:, layer].flatten().numpy()
    for name in compared:
        report.images[f"{prefix}compare/{name}/overlays"] = render.image_grid(
            _overlays(sheet, records[name].maps, settings)
        )

    def cell(key: str, i: int) -> float | None:
        value = float(drift[key][i]) if key in drift else float("nan")
        return value if np.isfinite(value) else None

    columns = table_fields()
    values = main.values()
    for i, probe_id in enumerate(sheet.probe_ids):
        row = {
            "epoch": epoch,
            "probe_id": probe_id,
            "overlay": overlays[i],
            "label": sheet.labels[i],
            "prediction": names[predictions[i]],
        }
        row.update({column: float(values[name][i]) for name, column in columns.items()})
        row["drift_prev_spearman"] = cell("prev/spearman", i)
        row["drift_first_spearman"] = cell("first/spearman", i)
        report.rows.append(row)
    return report
