"""Global property benchmark: does giving other classes' probes one class's image-wide statistics
(:func:`gradskip_lightning.metrics.discover_properties`) flag a shortcut with no place, and how often
does it flag a class that really differs in colour, brightness, sharpness or noise?

For each dataset (planted shapes, whose class IS a colour: the filled square's; BloodMNIST with
``--data-root``, whose cell types differ in stain) and training seed it trains, from the dataset's
config, the models of ``--variants``: ``clean`` (no shortcut) and one per shortcut of
:data:`SHORTCUTS` on the dataset's shortcut class (the discovery benchmark's class and colour cast;
a blur, extra noise, a darkening), training, validation and test images alike. A shortcut's spurious
score is the share of the other classes' test images, given the shortcut, predicted as the class.
Then every property's transfer test runs on the discovery probes (``--probes-per-class`` validation
images per class) and the report scores suspicion formulas (:data:`FORMULAS`): the shortcut class's
suspicion for its own property on the models that learned it (spurious score >= 0.5) against the
false alarms, every (class, property) of the clean models and every other class of the shortcut models.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import torch
from lightning.pytorch import LightningModule
from torch import Tensor

from gradskip_lightning.data.base import ImageClassificationDataModule, LabelledDataset, LabelledSubset
from gradskip_lightning.metrics.discovery_properties import discover_properties
from gradskip_lightning.metrics.image_properties import PROPERTY_NAMES, PixelSpace, PropertyName
from gradskip_lightning.metrics.perturbation import gaussian_blur
from gradskip_lightning.training.classifier import LINKED_FROM_DATA

from .configs import config_settings, model_class
from .discovery.report import _table as table_lines
from .discovery.trace import discovery_probes, predicted_share
from .discovery.variants import DATASETS, cast_transplanted, make_datamodule
from .faithfulness.cli import machine
from .faithfulness.data import needs_data_root, train_or_load
from .profiles import Profiles

Variant = Literal["clean", "cast", "blur", "noise", "dim"]
VARIANTS: tuple[Variant, ...] = get_args(Variant)
#: Learned: a shortcut whose spurious score reaches this counts for detection.
LEARNED = 0.5
#: Alert thresholds the report tabulates.
THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)


@dataclass(frozen=True)
class Shortcut:
    """A class-wide change: the property it should be found by, in words, and (pixels (C, H, W) in [0, 1]
    units, item index) -> the changed pixels (None: the discovery benchmark's own variant)."""

    property: PropertyName
    describe: str
    change: Callable[[Tensor, int], Tensor] | None


def _noisy(pixels: Tensor, index: int) -> Tensor:
    noise = torch.randn(pixels.shape, generator=torch.Generator().manual_seed(index))
    return pixels + 0.1 * noise


#: The shortcuts beside the clean model (the cast is the discovery benchmark's own, added to the normalised images).
SHORTCUTS: dict[Variant, Shortcut] = {
    "cast": Shortcut("colour", "colour cast (0.12, 0, -0.12)", None),
    "blur": Shortcut("sharpness", "Gaussian blur, sigma 1 px", lambda p, index: gaussian_blur(p[None], 5, 1.0)[0]),
    "noise": Shortcut("noise", "white noise, sigma 0.1", _noisy),
    "dim": Shortcut("brightness", "darker by 0.15", lambda pixels, index: pixels - 0.15),
}


class ShortcutDataset(LabelledDataset):
    """``dataset`` with ``change`` applied, in pixel space, to the images of class ``target`` (every item's
    with ``everywhere``); ``mean``/``std`` are the images' normalisation."""

    def __init__(
        self,
        dataset: LabelledDataset,
        target: int,
        change: Callable[[Tensor, int], Tensor],
        mean: tuple[float, ...],
        std: tuple[float, ...],
        everywhere: bool = False,
    ) -> None:
        self.dataset, self.target, self.change, self.everywhere = dataset, target, change, everywhere
        self.mean, self.std = torch.tensor(mean)[:, None, None], torch.tensor(std)[:, None, None]
        self.labels = dataset.labels

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple:
        item = tuple(self.dataset[index])
        if self.everywhere or int(self.labels[index]) == self.target:
            pixels = self.change(item[0] * self.std + self.mean, index)
            item = ((pixels - self.mean) / self.std, *item[1:])
        return item


def shortcut_datamodule(
    dataset: str, variant: Variant, seed: int, data_root: Path | None
) -> tuple[ImageClassificationDataModule, LabelledDataset | None]:
    """The datamodule of ``variant`` and the other classes' test images carrying its shortcut (None: clean)."""
    bench = DATASETS[dataset]
    change = SHORTCUTS[variant].change if variant in SHORTCUTS else None
    if change is None:  # clean, and the discovery benchmark's colour cast
        datamodule = make_datamodule(dataset, "clean" if variant == "clean" else "cast", seed, data_root)
        return datamodule, None if variant == "clean" else cast_transplanted(datamodule, bench.target, bench.cast)
    datamodule = make_datamodule(dataset, "clean", seed, data_root)
    make_split = datamodule.make_split
    mean, std = tuple(datamodule.mean), tuple(datamodule.std)

    def changed(split: str, tag_mode: Any) -> LabelledDataset:
        return ShortcutDataset(make_split(split, tag_mode), bench.target, change, mean, std)

    datamodule.make_split = changed  # type: ignore[method-assign]  # one instance, not the class
    test = make_split("test", "none")
    others = LabelledSubset(test, (test.labels != bench.target).nonzero()[:, 0])
    return datamodule, ShortcutDataset(others, bench.target, change, mean, std, everywhere=True)


@dataclass(frozen=True)
class PropertyRecord:
    """One (class, property) of one model: the transfer test's figures (:class:`~gradskip_lightning.metrics.
    discovery_properties.PropertyTransfer`), the model's shortcut (its property and class; "" and -1 when
    clean) and spurious score, and the seconds of the whole test of the model."""

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


def _trained(dataset: str, variant: Variant, seed: int, datamodule: Any, args: argparse.Namespace) -> LightningModule:
    """The model, from ``--cache`` when it holds it, else trained (and saved there)."""
    config = DATASETS[dataset].config
    path = None if args.cache is None else args.cache / f"{dataset}_{variant}_seed{seed}_e{args.epochs}.pt"
    if path is not None and path.exists():
        settings, _, _ = config_settings(config)
        links = {link: getattr(datamodule, link) for link in LINKED_FROM_DATA}
        model = model_class(config)(**{**settings, **links})
        model.load_state_dict(torch.load(path, weights_only=True))
        return model.eval()
    model, facts = train_or_load(
        config, datamodule, checkpoint=None, epochs=args.epochs, seed=seed, max_train_batches=args.max_train_batches
    )
    print(f"  trained {facts.epochs} epochs in {facts.train_seconds:.0f} s", flush=True)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), path)
    return model


def _accuracy(model: LightningModule, images: Tensor, labels: Tensor) -> float:
    with torch.no_grad():
        return float((model(images).argmax(dim=1) == labels).double().mean())


def measure(dataset: str, variant: Variant, seed: int, args: argparse.Namespace) -> list[PropertyRecord]:
    """Train (or load) one model and run every property's transfer test on its discovery probes."""
    bench = DATASETS[dataset]
    datamodule, transplanted = shortcut_datamodule(dataset, variant, seed, args.data_root)
    datamodule.setup("fit")
    model = _trained(dataset, variant, seed, datamodule, args)
    images, classes = discovery_probes(datamodule.val_dataset, args.probes_per_class)  # type: ignore[arg-type]
    with torch.no_grad():
        score = math.nan if transplanted is None else predicted_share(model, transplanted, bench.target)
    space = PixelSpace.of(images, datamodule.mean, datamodule.std)
    start = time.perf_counter()
    found = discover_properties(
        model, images, classes, datamodule.num_classes, space=space, alert_threshold=1.0, batch_size=64
    )
    seconds = time.perf_counter() - start
    shortcut = SHORTCUTS[variant].property if variant in SHORTCUTS else ""
    target = bench.target if shortcut else -1
    accuracy = _accuracy(model, images, classes)
    print(
        f"{dataset} seed {seed} {variant}: spurious score {score:.2f}, probe accuracy {accuracy:.2f}, "
        f"property tests {seconds:.1f} s",
        flush=True,
    )
    return [
        PropertyRecord(
            dataset, seed, variant, shortcut, target, score, accuracy, name, t.target, t.recipients, t.flip_rate,
            t.control_flip_rate, t.separability, seconds,
        )
        for name, transfers in found.transfers.items()
        for t in transfers
    ]  # fmt: skip


#: Candidate suspicion formulas of a record: name -> (flip, control, separability) -> score.
FORMULAS: dict[str, Callable[[float, float, float], float]] = {
    "flip": lambda flip, control, apart: flip,
    "excess": lambda flip, control, apart: max(0.0, flip - control),
    "excess_x_separability": lambda flip, control, apart: max(0.0, flip - control) * min(1.0, max(0.0, 2 * apart - 1)),
    "relative_excess": lambda flip, control, apart: max(0.0, flip - control) / (1 - control) if control < 1 else 0.0,
}


def _score(formula: str, record: PropertyRecord) -> float:
    values = (record.flip_rate, record.control_flip_rate, record.separability)
    if any(math.isnan(v) for v in values):
        return math.nan
    return FORMULAS[formula](*values)


def _is_alarm_candidate(record: PropertyRecord) -> bool:
    """A (class, property) where a flag is a false alarm: clean models, and the other classes of shortcut models."""
    return record.target < 0 or record.label != record.target


def report(records: list[PropertyRecord], command: str, facts: dict[str, Any]) -> str:
    """Markdown tables: each model's shortcut class against its other classes, per property; then per formula and
    threshold, the shortcuts detected and the false alarms."""
    lines = [f"Command: `{command}`", "", f"Machine: {facts.get('cpu', '')}, {facts.get('threads')} threads.", ""]
    models = sorted({(r.dataset, r.seed, r.variant) for r in records})
    rows = []
    for dataset, seed, variant in models:
        own = [r for r in records if (r.dataset, r.seed, r.variant) == (dataset, seed, variant)]
        for name in PROPERTY_NAMES:
            of_property = [r for r in own if r.property == name]
            if not of_property:
                continue
            first = of_property[0]
            shortcut = [r for r in of_property if r.label == r.target]
            rest = [r for r in of_property if r.label != r.target]
            top = max(rest, key=lambda r: _score("excess", r) if not math.isnan(_score("excess", r)) else -1)
            cells = [dataset, str(seed), variant, f"{first.spurious_score:.2f}", f"{first.accuracy:.2f}", name]
            if shortcut:
                s = shortcut[0]
                cells.append(f"{s.flip_rate:.2f} / {s.control_flip_rate:.2f} / {s.separability:.2f}")
            else:
                cells.append("")
            cells.append(f"{top.label}: {top.flip_rate:.2f} / {top.control_flip_rate:.2f} / {top.separability:.2f}")
            rows.append(cells)
    lines += [
        "Per model and property: the shortcut class's flip rate / control flip rate / separability, and those of the "
        "other class with the highest excess (flip - control).",
        "",
        *table_lines(
            ["dataset", "seed", "model", "spurious", "probe acc.", "property", "shortcut class", "top other class"],
            rows,
        ),
        "",
    ]  # fmt: skip
    learned = [r for r in records if r.label == r.target and r.property == r.shortcut_property]
    learned = [r for r in learned if r.spurious_score >= LEARNED]
    alarms = [r for r in records if _is_alarm_candidate(r)]
    rows = []
    for formula in FORMULAS:
        for threshold in THRESHOLDS:
            detected = sum(_score(formula, r) >= threshold for r in learned)
            false = sum(_score(formula, r) >= threshold for r in alarms)
            where = sorted({f"{r.dataset[:5]} {r.variant} s{r.seed} c{r.label} {r.property}" for r in alarms
                            if _score(formula, r) >= threshold})  # fmt: skip
            rows.append([formula, f"{threshold:g}", f"{detected}/{len(learned)}", f"{false}/{len(alarms)}",
                         ", ".join(where[:6]) + (" ..." if len(where) > 6 else "")])  # fmt: skip
        highest = max((_score(formula, r) for r in alarms if not math.isnan(_score(formula, r))), default=math.nan)
        rows.append([formula, "max alarm", f"{highest:.3f}", "", ""])
    lines += [
        f"Detected: learned shortcuts (spurious score >= {LEARNED}) whose class's suspicion for their own property "
        "reaches the threshold; false alarms: (class, property) of clean models and the other classes of shortcut "
        "models at or above it.",
        "",
        *table_lines(["formula", "threshold", "detected", "false alarms", "where"], rows),
    ]
    return "\n".join(lines)


PROFILES = Profiles(
    full={"datasets": list(DATASETS), "seeds": [0, 1], "variants": list(VARIANTS), "probes_per_class": 8,
          "max_train_batches": None},
    quick={"datasets": ["planted_shapes"], "seeds": [0], "variants": ["clean", "cast"], "probes_per_class": 8,
           "max_train_batches": 16},
)  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``properties`` subcommand."""
    PROFILES.add(parser, "--datasets", "datasets, each trained with its config", nargs="+", choices=list(DATASETS))
    PROFILES.add(parser, "--seeds", "training seeds (clean models on every seed, shortcuts on the first)", nargs="+",
                 type=int)  # fmt: skip
    PROFILES.add(parser, "--variants", "models per seed", nargs="+", choices=list(VARIANTS))
    PROFILES.add(parser, "--probes-per-class", "validation images per class", type=int)
    PROFILES.add(parser, "--max-train-batches", "cap on training batches per epoch", type=int)
    parser.add_argument(
        "--epochs", type=int, default=None, help="training epochs (default: the config's, 4 BloodMNIST)"
    )
    parser.add_argument("--data-root", type=Path, default=None, help="folder holding bloodmnist.npz")
    parser.add_argument("--cache", type=Path, default=None, help="folder to keep trained models in and reuse them from")
    parser.add_argument("--quick", action="store_true", help="planted shapes, one seed, clean and cast: minutes")
    parser.add_argument("--report-from", type=Path, default=None, help="rebuild the tables from this run's --json")


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every dataset, seed and variant (shortcuts on the first seed only); print the tables; return the records."""
    PROFILES.apply(args)
    if args.report_from is not None:
        saved = json.loads(args.report_from.read_text())
        print(report([PropertyRecord(**r) for r in saved["records"]], saved["command"], saved["facts"]))
        return saved["records"]
    start, records = time.perf_counter(), []
    facts: dict[str, Any] = {**machine(), "load_average": os.getloadavg()[0]}
    for dataset in args.datasets:
        if needs_data_root(DATASETS[dataset].config) and args.data_root is None:
            print(f"note: {dataset} skipped: pass --data-root, the folder holding its files")
            continue
        for seed in args.seeds:
            for variant in args.variants:
                if variant == "clean" or seed == args.seeds[0]:
                    records += measure(dataset, variant, seed, args)
    facts["wall_seconds"] = time.perf_counter() - start
    command = "OMP_NUM_THREADS=1 python -m gradskip_lightning.benchmarks " + " ".join(sys.argv[1:])
    print(report(records, command, facts))
    rows = [asdict(r) for r in records]
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": command, "facts": facts, "records": rows}))
        print(f"wrote {len(rows)} records to {args.json}")
        args.json = None
    return rows
