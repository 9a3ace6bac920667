"""The discovery stage's parts on kept weights: every recipient against the first look, in one run.

For each model of ``--models`` (``variant/seed/epoch`` of the weights the discovery benchmark kept with
``--keep-weights``), the stage as the callback runs it at its defaults (:data:`~benchmarks.discovery.trace.STAGE`:
its methods' maps of the dataset's discovery probes (one pass), their class summaries, the hotspot tests through one
:class:`~gradskip_lightning.shortcuts.distinct_forward.DistinctForward`, the property tests), twice in a row: with
every measured test taking every recipient (``first_look=None``: the path before the first look) and at the
default :data:`~gradskip_lightning.shortcuts.discovery_transplant.FIRST_LOOK`. Seconds per part and images
forwarded per part, one thread; the flags of both, which should agree. Each pair runs back to back, so its ratio
holds under a load that drifts over the run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.core.pass_explainer import explain_each
from gradskip_lightning.families.timm_vit import TimmViTExplainer, adapter_for
from gradskip_lightning.metrics import CountingModel
from gradskip_lightning.shortcuts import PixelSample, discover, summarise_classes
from gradskip_lightning.shortcuts.discovery import Discovery
from gradskip_lightning.shortcuts.discovery_properties import PropertyDiscovery, discover_properties
from gradskip_lightning.shortcuts.discovery_transplant import FIRST_LOOK
from gradskip_lightning.shortcuts.distinct_forward import DistinctForward
from gradskip_lightning.shortcuts.image_properties import PixelSpace

from .discovery.trace import STAGE, discovery_probes
from .discovery.variants import DATASETS, VARIANTS, make_datamodule
from .runs import command_line
from .tables import table
from .training import configured_model

#: The two paths: every recipient (before the first look), and the default first look.
PATHS: dict[str, int | None] = {"every recipient": None, "first look": FIRST_LOOK}


@dataclass(frozen=True)
class StageCost:
    """One stage run on one kept model: seconds and images forwarded per part, and what it flagged."""

    model: str
    path: str
    maps_s: float
    hotspot_s: float
    properties_s: float
    hotspot_images: int
    property_images: int
    flagged: str

    @property
    def stage_s(self) -> float:
        """The whole stage's seconds."""
        return self.maps_s + self.hotspot_s + self.properties_s


def _flags(found: Discovery, properties: PropertyDiscovery) -> str:
    """The classes a run flagged, in words: ``"hotspot [2]; colour [5]"`` or ``"none"``."""
    parts = [f"hotspot {found.flagged.nonzero()[:, 0].tolist()}"] if found.flagged.any() else []
    parts += [f"{name} {flags.nonzero()[:, 0].tolist()}" for name, flags in properties.flagged.items() if flags.any()]
    return "; ".join(parts) or "none"


def stage_cost(model: nn.Module, images: torch.Tensor, classes: torch.Tensor, pixels: PixelSample, space: PixelSpace,
               name: str, path: str) -> StageCost:  # fmt: skip
    """The stage's parts on ``model`` (eval mode) for the discovery probes ``images`` (P, C, H, W) of ``classes``, a
    whole class's pixel test reading ``pixels``."""
    look = PATHS[path]
    num_classes = int(classes.max()) + 1
    start = time.perf_counter()
    methods = STAGE.methods("gradskip")
    explained = explain_each([TimmViTExplainer(model, method) for method in methods], images, classes)
    summaries = {
        method: summarise_classes(explanation.token_maps.detach().double(), classes, num_classes, STAGE.analysis)
        for method, explanation in zip(methods, explained, strict=True)
    }
    mapped = time.perf_counter()
    counted = CountingModel(model)
    forward = DistinctForward(counted)
    patch = adapter_for(model).patch_size
    found = discover(forward, images, classes, summaries, patch_size=patch, batch_size=STAGE.batch_size,
                     measure_all=False, first_look=look, pixel_sample=pixels)  # fmt: skip
    hotspot, hotspot_images = time.perf_counter(), counted.images
    properties = discover_properties(
        forward, images, classes, num_classes, STAGE.properties_for(images.shape[1]), space=space,
        alert_threshold=STAGE.property_alert_threshold, alpha=STAGE.alpha, batch_size=STAGE.batch_size,
        seed=STAGE.seed, first_look=look,
    )  # fmt: skip
    end = time.perf_counter()
    return StageCost(name, path, mapped - start, hotspot - mapped, end - hotspot, hotspot_images,
                     counted.images - hotspot_images, _flags(found, properties))  # fmt: skip


def _kept_model(
    dataset: str, weights: Path, kept: str, data_root: Path | None, target: int | None = None
) -> tuple[nn.Module, Any]:
    """The model of ``kept`` (``variant/seed/epoch``) under ``weights`` (the discovery benchmark's layout) in eval
    mode, and its datamodule (set up for fitting; the shortcut on class ``target``, None: the dataset's)."""
    variant, seed, epoch = kept.split("/")
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r} in {kept!r}; known: {', '.join(VARIANTS)}")
    file = weights / dataset / variant / f"seed{seed}" / f"epoch{epoch}.pt"
    if not file.is_file():
        raise FileNotFoundError(
            f"no kept weights at {file}: keep them with `python -m benchmarks discovery --keep-weights DIR` (the "
            "layout DIR/<dataset>/<variant>/seed<k>/epoch<e>.pt)"
        )
    datamodule = make_datamodule(dataset, variant, int(seed), data_root, target)
    datamodule.setup("fit")
    model = configured_model(DATASETS[dataset].config, datamodule)
    model.load_state_dict(torch.load(file, weights_only=True))
    return model.eval(), datamodule


def report(records: list[StageCost]) -> str:
    """Per model and path: seconds and images per part, flags; then the medians and the first look's ratios."""
    rows = [
        [r.model, r.path, f"{r.maps_s:.2f}", f"{r.hotspot_s:.2f} ({r.hotspot_images})",
         f"{r.properties_s:.2f} ({r.property_images})", f"{r.stage_s:.2f}", r.flagged]
        for r in records
    ]  # fmt: skip
    for path in dict.fromkeys(r.path for r in records):
        mine = [r for r in records if r.path == path]
        medians = [statistics.median(getattr(r, f) for r in mine) for f in
                   ("maps_s", "hotspot_s", "hotspot_images", "properties_s", "property_images", "stage_s")]  # fmt: skip
        rows.append(["**median**", path, f"{medians[0]:.2f}", f"{medians[1]:.2f} ({medians[2]:.0f})",
                     f"{medians[3]:.2f} ({medians[4]:.0f})", f"{medians[5]:.2f}", ""])  # fmt: skip
    header = ["model", "path", "maps s", "hotspot tests s (images)", "property tests s (images)", "stage s", "flagged"]
    lines = [*table(header, rows)]
    if {r.path for r in records} == set(PATHS):
        pairs = list(zip(records[::2], records[1::2], strict=True))
        ratios = [after.stage_s / before.stage_s for before, after in pairs]
        same = sum(before.flagged == after.flagged for before, after in pairs)
        median, low, high = statistics.median(ratios), min(ratios), max(ratios)
        lines += ["", f"First look / every recipient, stage seconds per model: median {median:.2f} (range "
                  f"{low:.2f}-{high:.2f}); the same flags on {same} of {len(pairs)} models."]  # fmt: skip
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``stage`` subcommand."""
    parser.add_argument("--weights", type=Path, required=True, help="the folder the discovery benchmark's "
                        "--keep-weights wrote")  # fmt: skip
    parser.add_argument("--models", nargs="+", required=True, help="kept models as variant/seed/epoch, e.g. clean/0/4")
    parser.add_argument("--dataset", default="bloodmnist", choices=list(DATASETS))
    parser.add_argument("--data-root", type=Path, default=None, help="folder holding bloodmnist.npz")
    parser.add_argument("--target", type=int, default=None, help="the shortcut's class the models were trained "
                        "with (the discovery benchmark's --target; default: the dataset's)")  # fmt: skip
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS), help="the paths run per "
                        "model (default both; 'first look' alone: the stage's flags, in half the time)")  # fmt: skip


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every kept model, its paths (both by default) back to back, one thread; print the table; return the records."""
    torch.set_num_threads(1)
    records = []
    for kept in args.models:
        model, datamodule = _kept_model(args.dataset, args.weights, kept, args.data_root, args.target)
        images, classes = discovery_probes(datamodule.val_dataset, STAGE.probes_per_class)
        pixels = PixelSample(*discovery_probes(datamodule.val_dataset, STAGE.pixel_probes_per_class))
        pixels.agreements(adapter_for(model).patch_size)  # compared once per fit: the stage's later runs reuse them
        space = PixelSpace.of(images, Normalisation(datamodule.mean, datamodule.std))
        for path in (p for p in PATHS if p in args.paths):
            records.append(stage_cost(model, images, classes, pixels, space, kept, path))
            print(records[-1], flush=True)
    print(f"Command: `{command_line()}`\n")
    print(report(records))
    return [{**asdict(r), "stage_s": r.stage_s} for r in records]
