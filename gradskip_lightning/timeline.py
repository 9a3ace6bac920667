"""Render a probe x epoch timeline PNG from the maps GradSkipCallback wrote.

Usage::

    python -m gradskip_lightning.timeline lightning_logs/version_0 -o timeline.png
    python -m gradskip_lightning.timeline wandb/offline-run-*/gradskip/maps -o timeline.png
    python -m gradskip_lightning.timeline entity/project/gradskip-maps-<run id>:latest -o timeline.png

Rows are probes, columns are logged epochs (the first column is the probe image, under its class
name and beside its probe id); each cell is the overlay of that epoch's map with its insertion and
deletion scores where that epoch computed them (a time budget thins the scores: the other cells
show the epoch alone). A header names the method drawn, the epochs without scores, and shows the
colour scale. When the probes have
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
from gradskip_lightning.engine.output.files import PROBES_FILE, MapsRecord, read_maps

__all__ = ["find_maps_dir", "fit_text", "timeline_figure", "region_curves", "cell_title", "unscored_epochs", "main"]

#: Heights in inches of the header (the method and the colour scale), of one probe row and of the
#: region chart under the picture; the width of one column; the title font size in points.
HEADER_INCHES = 0.7
ROW_INCHES = 1.6
CHART_INCHES = 2.4
COLUMN_INCHES = 1.5
TITLE_POINTS = 7
#: The widest a title may be, in points: no wider than the image under it, so inside its column and
#: clear of the neighbours' titles.
TITLE_WIDTH = 0.8 * 72 * COLUMN_INCHES


#: The per-probe scores a cell's title shows where its epoch has them: (array name, label).
CELL_SCORES = (("insertion", "ins"), ("deletion", "del"))


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


def cell_title(arrays: dict[str, np.ndarray], probe: int) -> str:
    """A cell's title: the epoch and the scores of :data:`CELL_SCORES` that its file holds.

    >>> cell_title({"epoch": np.asarray(3), "insertion": np.asarray([0.5]), "deletion": np.asarray([0.25])}, 0)
    'e3 ins 0.50 del 0.25'
    >>> cell_title({"epoch": np.asarray(4)}, 0)
    'e4'
    """
    scores = [f"{label} {float(arrays[name][probe]):.2f}" for name, label in CELL_SCORES if name in arrays]
    return " ".join([f"e{int(arrays['epoch'])}", *scores])


def unscored_epochs(epochs: Sequence[dict[str, np.ndarray]]) -> list[int]:
    """The epochs whose files hold none of the :data:`CELL_SCORES` (not computed there: thinned by the
    time budget, or turned off)."""
    return [int(arrays["epoch"]) for arrays in epochs if not any(name in arrays for name, _ in CELL_SCORES)]


def _spans(values: Sequence[int]) -> str:
    """Sorted integers as runs: ``[1, 2, 3, 5]`` -> ``"1-3, 5"``.

    >>> _spans([1, 2, 3, 5, 7, 8])
    '1-3, 5, 7-8'
    """
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}" for run in runs)


def fit_text(text: str, width: float, size: float = TITLE_POINTS, max_lines: int = 3) -> str:
    """``text`` in at most ``max_lines`` lines, each at most ``width`` points wide at font ``size``
    (points): broken at a space or before "(" where one is near, else inside a word; what does not
    fit is cut with an ellipsis.

    >>> print(fit_text("immature granulocytes(myelocytes, metamyelocytes and promyelocytes)", 75.6))
    immature
    granulocytes
    (myelocytes, meta…
    """
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    font, measure = FontProperties(size=size), TextToPath()

    def fits(line: str) -> bool:
        return measure.get_text_width_height_descent(line, font, ismath=False)[0] <= width

    lines: list[str] = []
    rest = text.strip()
    while len(lines) < max_lines - 1 and not fits(rest):
        end = len(rest)
        while end > 1 and not fits(rest[:end]):  # the longest start that fits
            end -= 1
        end = max(rest.rfind(" ", 0, end + 1), rest.rfind("(", 1, end), 0) or end
        lines.append(rest[:end].rstrip())
        rest = rest[end:].lstrip()
    if not fits(rest):  # the last line: what fits of the rest, and an ellipsis
        while rest and not fits(rest + "…"):
            rest = rest[:-1]
        rest = rest.rstrip() + "…"
    return "\n".join([*lines, rest])


def _header(figure, cell, methods: list[str], unscored: list[int], cmap: str, alpha: float) -> None:
    """The method drawn (left), and over the epoch columns the colour scale of the maps and the
    drawn epochs that have no scores."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    label = figure.add_subplot(cell[0, 0])
    label.set_axis_off()
    label.text(0.5, 0.5, fit_text(f"method: {', '.join(methods)}", TITLE_WIDTH, 8), ha="center", va="center",
               fontsize=8, fontweight="bold", transform=label.transAxes)  # fmt: skip
    scale = figure.add_subplot(cell[0, 1:])
    scale.set_axis_off()
    bar = figure.colorbar(
        ScalarMappable(Normalize(0.0, 1.0), cmap),
        cax=scale.inset_axes((0.05, 0.55, 0.9, 0.25)),
        orientation="horizontal",
    )
    bar.set_ticks([0.0, 0.5, 1.0])
    bar.ax.tick_params(labelsize=6, length=2, pad=1)
    label_text = f"relevance: each map scaled to its own range (1: its most relevant pixel), drawn at alpha {alpha:g}"
    if unscored:
        label_text += f"\nno insertion/deletion scores at epoch {_spans(unscored)} (not computed there)"
    bar.set_label(label_text, fontsize=6, labelpad=1)


def timeline_figure(
    record: MapsRecord, *, max_epochs: int = 12, max_probes: int = 32, cmap: str = "inferno", alpha: float = 0.5
):
    """A matplotlib Figure (Agg) of the timeline; see the module docstring.

    A header names the method drawn and shows the colour scale; each row's probe id is written left
    of its image and the class name, wrapped or cut to fit its column, above it (the rows grow by
    the title lines beyond the first, so the images keep their size).
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    epochs = [record.epochs[i] for i in _pick(len(record.epochs), max_epochs)]
    probes = _pick(len(record.probe_ids), max_probes)
    images = record.images
    curve_epochs, curves = region_curves(record)
    names = record.class_names
    titles = [
        fit_text(names[int(record.labels[p])] if names else str(int(record.labels[p])), TITLE_WIDTH) for p in probes
    ]
    row = ROW_INCHES + max(title.count("\n") for title in titles) * TITLE_POINTS * 1.25 / 72  # room for wrapped titles
    ratios = [HEADER_INCHES] + [row] * len(probes) + ([CHART_INCHES] if curves else [])
    figure = Figure(figsize=(COLUMN_INCHES * (len(epochs) + 1), sum(ratios)), dpi=100, layout="constrained")
    grid = figure.add_gridspec(len(ratios), len(epochs) + 1, height_ratios=ratios)
    methods = sorted({str(arrays["method"]) for arrays in epochs})
    _header(figure, grid, methods, unscored_epochs(epochs), cmap, alpha)
    axes = np.array([[figure.add_subplot(grid[1 + r, c]) for c in range(len(epochs) + 1)] for r in range(len(probes))])
    for row, (p, title) in enumerate(zip(probes, titles)):
        axes[row, 0].imshow(images[p])
        axes[row, 0].set_title(title, fontsize=TITLE_POINTS)
        axes[row, 0].set_ylabel(f"#{int(record.probe_ids[p])}", fontsize=TITLE_POINTS)
        for col, arrays in enumerate(epochs, start=1):
            maps = arrays["maps"][p : p + 1]
            factor = images.shape[1] // maps.shape[1]
            maps = np.repeat(np.repeat(maps, factor, axis=1), factor, axis=2)
            axes[row, col].imshow(render.overlay(images[p : p + 1], maps, alpha=alpha, cmap=cmap)[0])
            axes[row, col].set_title(cell_title(arrays, p), fontsize=6)
    for axis in axes[:, 1:].flat:
        axis.set_axis_off()
    for axis in axes[:, 0]:  # no frame or ticks; the probe id stays as the y label
        axis.set(xticks=[], yticks=[])
        axis.spines[:].set_visible(False)
    if curves:
        chart = figure.add_subplot(grid[1 + len(probes), :])
        for name, values in curves.items():
            chart.plot(curve_epochs, values, marker="o", label=name, linestyle="--" if "transplanted" in name else "-")
        chart.xaxis.set_major_locator(MaxNLocator(integer=True))
        chart.set_xlabel("epoch", fontsize=7)
        chart.set_ylabel("relevance mass", fontsize=7)
        chart.set_ylim(0.0, 1.0)
        chart.tick_params(labelsize=6)
        chart.legend(fontsize=6, loc="upper left")
    return figure


def _count(text: str) -> int:
    """An argparse type: an integer >= 1 (a count of columns or rows)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> Path:
    """Command-line entry point; returns the PNG path written."""
    parser = argparse.ArgumentParser(prog="python -m gradskip_lightning.timeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="maps folder, a folder above it (log dir, W&B run dir), or a W&B artifact name")
    parser.add_argument("-o", "--output", default="timeline.png", help="PNG to write (default: timeline.png)")
    parser.add_argument("--max-epochs", type=_count, default=12, help="columns: epochs spread over the run")
    parser.add_argument("--max-probes", type=_count, default=32, help="rows: probes spread evenly over the set")
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
    unscored = unscored_epochs(record.epochs)
    if unscored:
        print(f"epochs without insertion/deletion scores (not computed there, e.g. thinned by the time budget): "
              f"{_spans(unscored)}")  # fmt: skip
    return output


if __name__ == "__main__":
    main()
