"""Turn one epoch's per-probe results into the logged report: scalars, images, histograms, rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gradskip_lightning import render

from .sinks import EpochReport, ProbeSheet

__all__ = ["RenderSettings", "build_report", "HEAD_PARTS"]

#: Explanation fields of head importance and the names they are logged under.
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


def _scores(prefix: str, values: dict[str, Tensor]) -> dict[str, float]:
    scalars = {
        f"{prefix}insertion": _mean(values["insertion"]),
        f"{prefix}deletion": _mean(values["deletion"]),
        f"{prefix}ins_minus_del": _mean(values["insertion"] - values["deletion"]),
    }
    if "fvt_violation" in values:
        scalars[f"{prefix}fvt_violation"] = _mean(values["fvt_violation"])
    if "pointing_hit" in values:
        scalars[f"{prefix}pointing_game"] = _mean(values["pointing_hit"])
    return scalars


def _overlays(sheet: ProbeSheet, maps: Tensor, settings: RenderSettings) -> np.ndarray:
    """Upscaled overlays (P, S, S, 3) uint8 of maps (P, H, W) over the sheet's display images."""
    factor = sheet.images.shape[1] // maps.shape[1]
    maps = maps.repeat_interleave(factor, dim=1).repeat_interleave(factor, dim=2) if factor > 1 else maps
    return render.overlay(sheet.images, maps, alpha=settings.alpha, cmap=settings.colormap)


def build_report(
    values: dict[str, Tensor],
    drift: dict[str, Tensor],
    sheet: ProbeSheet,
    class_names: Sequence[str],
    *,
    epoch: int,
    step: int,
    prefix: str,
    compare_methods: Sequence[str],
    settings: RenderSettings,
    with_images: bool = True,
) -> EpochReport:
    """Build the report of one epoch from merged per-probe ``values`` and ``drift`` (P,) tensors.

    ``values`` is what :func:`~gradskip_lightning.callback.compute.explain_probes` returns, plus
    ``compare/<method>/<key>`` entries for each comparison method.
    """
    scalars = {f"{prefix}epoch": float(epoch), **_scores(prefix, values)}
    for key, per_probe in drift.items():
        scalars[f"{prefix}drift/{key}"] = _mean(per_probe)
    if "gates" in values:
        for layer, gate in enumerate(values["gates"].mean(dim=0).tolist()):
            scalars[f"{prefix}gate/layer_{layer}"] = gate
    for method in compare_methods:
        part = {key.split("/", 2)[2]: v for key, v in values.items() if key.startswith(f"compare/{method}/")}
        scalars.update(_scores(f"{prefix}compare/{method}/", part))
    report = EpochReport(epoch=epoch, step=step, scalars=scalars)
    if not with_images:
        return report

    overlays = _overlays(sheet, values["maps"], settings)
    names = list(class_names)
    predictions = values["predictions"].tolist()
    probabilities = values["probabilities"].tolist()
    for i, probe_id in enumerate(sheet.probe_ids):
        text = render.caption(sheet.labels[i], names[predictions[i]], probabilities[i])
        report.overlays[f"{prefix}overlay/probe_{probe_id}"] = (overlays[i], text)
    report.images[f"{prefix}overlays"] = render.image_grid(overlays)
    for field, name in HEAD_PARTS.items():
        if field not in values:
            continue
        heads = values[field]  # (P, L, H)
        report.images[f"{prefix}heads/{name}"] = render.matrix_image(heads.mean(dim=0), cmap="viridis")
        for layer in range(heads.shape[1]):
            report.histograms[f"{prefix}heads/{name}/layer_{layer}"] = heads[:, layer].flatten().numpy()
    for method in compare_methods:
        report.images[f"{prefix}compare/{method}/overlays"] = render.image_grid(
            _overlays(sheet, values[f"compare/{method}/maps"], settings)
        )

    def cell(key: str, i: int) -> float | None:
        value = float(drift[key][i]) if key in drift else float("nan")
        return value if np.isfinite(value) else None

    for i, probe_id in enumerate(sheet.probe_ids):
        report.rows.append(
            {
                "epoch": epoch,
                "probe_id": probe_id,
                "overlay": overlays[i],
                "label": sheet.labels[i],
                "prediction": names[predictions[i]],
                "probability": probabilities[i],
                "insertion": float(values["insertion"][i]),
                "deletion": float(values["deletion"][i]),
                "drift_prev_spearman": cell("prev/spearman", i),
                "drift_first_spearman": cell("first/spearman", i),
            }
        )
    return report
