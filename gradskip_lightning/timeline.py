"""Render a probe x epoch timeline PNG from the maps GradSkipCallback wrote.

Usage::

    python -m gradskip_lightning.timeline lightning_logs/version_0 -o timeline.png
    python -m gradskip_lightning.timeline wandb/offline-run-*/gradskip/maps -o timeline.png
    python -m gradskip_lightning.timeline entity/project/gradskip-maps-<run id>:latest -o timeline.png

Rows are probes, columns are logged epochs (the first column is the probe image); each cell is
the overlay of that epoch's map with its insertion and deletion scores. When the probes have
named regions (e.g. ``object`` and ``tag``), a chart under the picture shows the mean relevance
mass on each region over every logged epoch (and on the transplanted tag, when the callback ran
the transplant test): a map that moves from the object to the tag is a model learning a
shortcut. The source is a maps
folder (``probes.npz`` + ``epoch_*.npz``), any folder above exactly one, or a W&B artifact name
(downloaded with ``wandb.Api``, which needs a connection).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gradskip_lightning import render
from gradskip_lightning.callback.files import PROBES_FILE, MapsRecord, read_maps

__all__ = ["find_maps_dir", "timeline_figure", "region_curves", "main"]

#: Height in inches of one probe row, and of the region chart under the picture.
ROW_INCHES = 1.6
CHART_INCHES = 2.4


#: A W&B artifact name: ``[entity/]project/name:version`` (a local path has no ``:version`` part).
ARTIFACT = re.compile(r"([^/:\s]+/){1,2}[^/:\s]+:[^/:\s]+")


def find_maps_dir(source: str | Path) -> Path:
    """The maps folder for ``source``: itself, the one folder below it holding ``probes.npz``, or
    a downloaded W&B artifact when ``source`` is an artifact name (``entity/project/name:version``).

    Raises:
        FileNotFoundError: a local path that does not exist (or holds no maps folder, or several).
    """
    path = Path(source)
    if not path.exists():
        if isinstance(source, Path) or not ARTIFACT.fullmatch(source):
            raise FileNotFoundError(
                f"{source} does not exist. Pass a maps folder, a folder above one (a log dir, a W&B run dir), or "
                "a W&B artifact name entity/project/gradskip-maps-<run id>:latest"
            )
        import wandb

        return Path(wandb.Api().artifact(str(source), type="gradskip-maps").download())
    if (path / PROBES_FILE).is_file():
        return path
    found = sorted({p.parent for p in path.rglob(PROBES_FILE)})
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise FileNotFoundError(
            f"{what} GradSkip maps folders under {path}; pass one of them: {[str(f) for f in found]}"
        )
    return found[0]


def _pick(count: int, most: int) -> list[int]:
    """At most ``most`` indices spread evenly over range(count), first and last included."""
    if count <= most:
        return list(range(count))
    return sorted({int(round(i)) for i in np.linspace(0, count - 1, most)})


def _nanmean(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """Mean over ``axis`` of the finite entries (NaN where there are none), without warnings."""
    finite = np.isfinite(values)
    count = finite.sum(axis=axis)
    total = np.where(finite, values, 0.0).sum(axis=axis)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def region_curves(record: MapsRecord) -> tuple[list[int], dict[str, np.ndarray]]:
    """The mean relevance mass per region over the logged epochs: (epochs, name -> (E,) values).

    Regions come from each epoch's ``region_mass`` (P, R) and ``region_names``; the transplant
    test's ``transplant_mass`` appears as ``"tag (transplanted)"``. Empty when none was saved.
    """
    epochs = [int(arrays["epoch"]) for arrays in record.epochs]
    curves: dict[str, list[float]] = {}
    for index, arrays in enumerate(record.epochs):
        means: dict[str, float] = {}
        if "region_mass" in arrays:
            names = [str(n) for n in arrays["region_names"]]
            means.update(zip(names, _nanmean(arrays["region_mass"].astype(np.float64)).tolist()))
        if "transplant_mass" in arrays:
            means["tag (transplanted)"] = float(_nanmean(arrays["transplant_mass"].astype(np.float64)))
        for name, mean in means.items():
            curves.setdefault(name, [float("nan")] * len(epochs))[index] = mean
    return epochs, {name: np.asarray(values) for name, values in curves.items()}


def timeline_figure(
    record: MapsRecord, *, max_epochs: int = 12, max_probes: int = 32, cmap: str = "inferno", alpha: float = 0.5
):
    """A matplotlib Figure (Agg) of the timeline; see the module docstring."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    epochs = [record.epochs[i] for i in _pick(len(record.epochs), max_epochs)]
    probes = _pick(len(record.probe_ids), max_probes)
    images = record.images
    curve_epochs, curves = region_curves(record)
    height = ROW_INCHES * len(probes) + (CHART_INCHES if curves else 0.0)
    figure = Figure(figsize=(1.5 * (len(epochs) + 1), height), dpi=100)
    ratios = [ROW_INCHES] * len(probes) + ([CHART_INCHES] if curves else [])
    grid = figure.add_gridspec(len(ratios), len(epochs) + 1, height_ratios=ratios)
    axes = np.array([[figure.add_subplot(grid[r, c]) for c in range(len(epochs) + 1)] for r in range(len(probes))])
    names = record.class_names
    for row, p in enumerate(probes):
        label = names[int(record.labels[p])] if names else str(int(record.labels[p]))
        axes[row, 0].imshow(images[p])
        axes[row, 0].set_title(f"#{int(record.probe_ids[p])} {label}", fontsize=7)
        for col, arrays in enumerate(epochs, start=1):
            maps = arrays["maps"][p : p + 1]
            factor = images.shape[1] // maps.shape[1]
            maps = np.repeat(np.repeat(maps, factor, axis=1), factor, axis=2)
            axes[row, col].imshow(render.overlay(images[p : p + 1], maps, alpha=alpha, cmap=cmap)[0])
            axes[row, col].set_title(
                f"e{int(arrays['epoch'])} ins {float(arrays['insertion'][p]):.2f} "
                f"del {float(arrays['deletion'][p]):.2f}",
                fontsize=6,
            )
    for axis in axes.flat:
        axis.set_axis_off()
    if curves:
        chart = figure.add_subplot(grid[len(probes), :])
        for name, values in curves.items():
            chart.plot(curve_epochs, values, marker="o", label=name, linestyle="--" if "transplanted" in name else "-")
        chart.xaxis.set_major_locator(MaxNLocator(integer=True))
        chart.set_xlabel("epoch", fontsize=7)
        chart.set_ylabel("relevance mass", fontsize=7)
        chart.set_ylim(0.0, 1.0)
        chart.tick_params(labelsize=6)
        chart.legend(fontsize=6, loc="upper left")
    figure.tight_layout()
    return figure


def main(argv: Sequence[str] | None = None) -> Path:
    """Command-line entry point; returns the PNG path written."""
    parser = argparse.ArgumentParser(prog="python -m gradskip_lightning.timeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="maps folder, a folder above it (log dir, W&B run dir), or a W&B artifact name")
    parser.add_argument("-o", "--output", default="timeline.png", help="PNG to write (default: timeline.png)")
    parser.add_argument("--max-epochs", type=int, default=12, help="columns: epochs spread evenly over the run")
    parser.add_argument("--max-probes", type=int, default=32, help="rows: probes spread evenly over the set")
    parser.add_argument("--cmap", default="inferno", help="matplotlib colour map")
    args = parser.parse_args(argv)
    record = read_maps(find_maps_dir(args.source))
    for path, reason in record.skipped:
        print(f"skipped {path}: {reason}", file=sys.stderr)
    figure = timeline_figure(record, max_epochs=args.max_epochs, max_probes=args.max_probes, cmap=args.cmap)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output)
    probes, epochs = (
        len(_pick(len(x), most)) for x, most in ((record.probe_ids, args.max_probes), (record.epochs, args.max_epochs))
    )
    print(f"wrote {output} ({probes} of {len(record.probe_ids)} probes, {epochs} of {len(record.epochs)} epochs)")
    return output


if __name__ == "__main__":
    main()
