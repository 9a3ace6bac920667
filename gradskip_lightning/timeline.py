"""Render a probe x epoch timeline PNG from the maps GradSkipCallback wrote.

Usage::

    python -m gradskip_lightning.timeline lightning_logs/version_0 -o timeline.png
    python -m gradskip_lightning.timeline wandb/offline-run-*/gradskip/maps -o timeline.png
    python -m gradskip_lightning.timeline entity/project/gradskip-maps-<run id>:latest -o timeline.png

Rows are probes, columns are logged epochs (the first column is the probe image, under its class
name and beside its probe id); each cell is the overlay of that epoch's map with its insertion and
deletion scores where that epoch computed them (a time budget thins the scores: the other cells
show the epoch alone). With few epochs the probes are laid out in bands side by side, so the picture
stays about as wide as it is tall. A header names the method drawn, the epochs without scores, and
shows the colour scale. When the probes have
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

#: Heights in inches of the header (the method and the colour scale, with up to two lines under
#: the scale), of one probe row and of the region chart under the picture; the width of one column
#: and of the gap between two bands of probes; the side of one image (centred in its column, at the
#: bottom of its row, under its title); the title font size in points.
HEADER_INCHES = 0.7
ROW_INCHES = 1.6
CHART_INCHES = 2.4
COLUMN_INCHES = 1.5
GAP_INCHES = 0.3
IMAGE_INCHES = 1.2
TITLE_POINTS = 7
#: The narrowest figure in inches (the header's text fits it) and the widest the probes are spread to
#: (bands side by side) to keep the picture about as tall as it is wide.
MIN_WIDTH_INCHES = 4.5
MAX_WIDTH_INCHES = 30.0
#: The font size in points of the colour scale's label, and the height of one of its lines in inches.
SCALE_POINTS = 6
SCALE_LINE_INCHES = SCALE_POINTS * 1.25 / 72
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


def bands(probes: int, columns: int, row: float, extra: float) -> int:
    """How many bands of probes side by side (each ``columns`` wide, ``row`` inches a probe, ``extra``
    inches of header and chart) keep the picture closest to square, no wider than
    :data:`MAX_WIDTH_INCHES` where one band is not already wider; the fewest bands among equals.

    >>> bands(32, 2, 1.6, 3.1), bands(32, 13, 1.6, 3.1), bands(3, 4, 1.6, 0.7)  # 1 epoch; 12 epochs; 3 epochs
    (5, 1, 1)
    """

    def size(count: int) -> tuple[float, float]:
        width = count * columns * COLUMN_INCHES + (count - 1) * GAP_INCHES
        return max(width, MIN_WIDTH_INCHES), extra + -(-probes // count) * row

    fitting = [c for c in range(1, probes + 1) if c == 1 or size(c)[0] <= MAX_WIDTH_INCHES]
    return min(fitting, key=lambda c: (abs(np.log(size(c)[1] / size(c)[0])), c))


def _scale_label(unscored: list[int], alpha: float, width: float) -> str:
    """The colour scale's label, wrapped to ``width`` points."""
    text = f"relevance: each map scaled to its own range (1: its most relevant pixel), drawn at alpha {alpha:g}"
    lines = [fit_text(text, width, SCALE_POINTS, max_lines=4)]
    if unscored:
        note = f"no insertion/deletion scores at epoch {_spans(unscored)} (not computed there)"
        lines.append(fit_text(note, width, SCALE_POINTS, max_lines=4))
    return "\n".join(lines)


class _Page:
    """Places axes on a figure of ``width`` x ``height`` inches by their edges in inches from its
    bottom-left corner: the timeline's sizes are all known, so it needs no layout engine (which also
    took most of the drawing time of a large timeline)."""

    def __init__(self, figure, width: float, height: float) -> None:
        self.figure, self.width, self.height = figure, width, height

    def axes(self, left: float, bottom: float, width: float, height: float):
        return self.figure.add_axes((left / self.width, bottom / self.height, width / self.width, height / self.height))


def _header(page: _Page, methods: list[str], label: str, cmap: str) -> None:
    """The method drawn (top left), and over the epoch columns the colour scale of the maps with its
    ``label`` (what it means, the drawn epochs that have no scores) under it."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    top = page.height - 0.1
    page.figure.text(COLUMN_INCHES / 2 / page.width, (top - 0.2) / page.height,
                     fit_text(f"method: {', '.join(methods)}", TITLE_WIDTH, 8), ha="center", va="center",
                     fontsize=8, fontweight="bold")  # fmt: skip
    span = page.width - COLUMN_INCHES  # the columns after the first
    bar_width = min(0.9 * span, 6.0)
    cax = page.axes(COLUMN_INCHES + (span - bar_width) / 2, top - 0.175, bar_width, 0.175)
    bar = page.figure.colorbar(ScalarMappable(Normalize(0.0, 1.0), cmap), cax=cax, orientation="horizontal")
    bar.set_ticks([0.0, 0.5, 1.0])
    bar.ax.tick_params(labelsize=SCALE_POINTS, length=2, pad=1)
    bar.set_label(label, fontsize=SCALE_POINTS, labelpad=1)


def _chart(page: _Page, epochs: list[int], curves: dict[str, np.ndarray]) -> None:
    """The mean relevance mass per region over the epochs, across the bottom of the page."""
    from matplotlib.ticker import MaxNLocator

    chart = page.axes(0.6, 0.45, page.width - 0.8, CHART_INCHES - 0.6)
    for name, values in curves.items():
        chart.plot(epochs, values, marker="o", label=name, linestyle="--" if "transplanted" in name else "-")
    if len(epochs) <= 12:
        chart.set_xticks(epochs)
    else:
        chart.xaxis.set_major_locator(MaxNLocator(integer=True))
    chart.set_xlim(min(epochs) - 0.5, max(epochs) + 0.5)  # one epoch: a point, not a +-0.05 axis
    chart.set_xlabel("epoch", fontsize=7)
    chart.set_ylabel("relevance mass", fontsize=7)
    chart.set_ylim(0.0, 1.0)
    chart.tick_params(labelsize=6)
    chart.legend(fontsize=6, loc="upper left")


def timeline_figure(
    record: MapsRecord, *, max_epochs: int = 12, max_probes: int = 32, cmap: str = "inferno", alpha: float = 0.5
):
    """A matplotlib Figure (Agg) of the timeline; see the module docstring.

    A header names the method drawn and shows the colour scale; each row's probe id is written left
    of its image and the class name, wrapped or cut to fit its column, above it (the rows grow by
    the title lines beyond the first, so the images keep their size). With few epochs the probes are
    laid out in bands side by side (:func:`bands`), so the picture stays about as wide as it is tall.
    """
    from matplotlib.figure import Figure

    epochs = [record.epochs[i] for i in _pick(len(record.epochs), max_epochs)]
    probes = _pick(len(record.probe_ids), max_probes)
    images = record.images
    curve_epochs, curves = region_curves(record)
    names = record.class_names
    titles = [
        fit_text(names[int(record.labels[p])] if names else str(int(record.labels[p])), TITLE_WIDTH) for p in probes
    ]
    row = ROW_INCHES + max(title.count("\n") for title in titles) * TITLE_POINTS * 1.25 / 72  # room for wrapped titles
    columns = len(epochs) + 1  # of one band: the probe image, then one per epoch
    chart = CHART_INCHES if curves else 0.0
    count = bands(len(probes), columns, row, HEADER_INCHES + chart)
    per_band = -(-len(probes) // count)
    width = max(count * columns * COLUMN_INCHES + (count - 1) * GAP_INCHES, MIN_WIDTH_INCHES)
    label = _scale_label(unscored_epochs(epochs), alpha, 0.9 * 72 * (width - COLUMN_INCHES))
    header = HEADER_INCHES + max(0, label.count("\n") - 1) * SCALE_LINE_INCHES
    height = header + per_band * row + chart
    figure = Figure(figsize=(width, height), dpi=100)
    page = _Page(figure, width, height)
    _header(page, sorted({str(arrays["method"]) for arrays in epochs}), label, cmap)
    margin = (COLUMN_INCHES - IMAGE_INCHES) / 2
    for index, (p, title) in enumerate(zip(probes, titles)):
        bottom = height - header - (index % per_band + 1) * row + 0.1
        left = (index // per_band) * (columns * COLUMN_INCHES + GAP_INCHES) + margin
        first = page.axes(left, bottom, IMAGE_INCHES, IMAGE_INCHES)
        first.imshow(images[p])
        first.set_title(title, fontsize=TITLE_POINTS, y=1.0)  # a set y: not moved clear of ticks (there are none)
        first.set_ylabel(f"#{int(record.probe_ids[p])}", fontsize=TITLE_POINTS, labelpad=1)
        first.set(xticks=[], yticks=[])  # no frame or ticks; the probe id stays as the y label
        first.spines[:].set_visible(False)
        for col, arrays in enumerate(epochs, start=1):
            maps = arrays["maps"][p : p + 1]
            factor = images.shape[1] // maps.shape[1]
            maps = np.repeat(np.repeat(maps, factor, axis=1), factor, axis=2)
            cell = page.axes(left + col * COLUMN_INCHES, bottom, IMAGE_INCHES, IMAGE_INCHES)
            cell.imshow(render.overlay(images[p : p + 1], maps, alpha=alpha, cmap=cmap)[0])
            cell.set_title(cell_title(arrays, p), fontsize=6, y=1.0)
            cell.set_axis_off()
    if curves:
        _chart(page, curve_epochs, curves)
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
