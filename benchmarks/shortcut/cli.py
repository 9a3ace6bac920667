"""The ``shortcut`` subcommand: options, the three training runs per dataset and seed, the records."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from benchmarks.configs import build_datamodule, config_settings
from benchmarks.profiles import Profiles
from benchmarks.runs import RunClock
from benchmarks.tables import add_markdown_argument
from benchmarks.training import has_data, train_or_load, with_data_root
from gradskip_lightning.data.base import ImageClassificationDataModule
from gradskip_lightning.methods import PASS_METHODS
from gradskip_lightning.shortcuts.tags import SpuriousTag

from ..faithfulness.maps import MapFn, engine_method
from ..faithfulness.peers import PEERS, available_peers, peer_method
from . import report
from .detection import detection_auroc, first_flag_epoch, spurious_epoch
from .records import VARIANTS, DetectionRecord, ModelRecord, Variant
from .trace import Probes, TagTrace, Trace, tagged_probes


@dataclass(frozen=True)
class ShortcutData:
    """A dataset of the benchmark: the config it trains with (its ``data.tag`` is the spurious tag)
    and the trace points per training epoch."""

    config: str
    traces_per_epoch: int = 1


#: Datasets: 4 trace points per epoch on planted shapes (32 batches an epoch), 2 on BloodMNIST (94).
#: Their configs carry the tag a tiny ViT learns: an 8 x 8 checkerboard on every class-0 image and no
#: other (a 3 x 3 stamp on 90 % of class 0 and 2 % of the others is not learned: spurious score
#: 0.00 on planted shapes, where the square alone predicts the class and is easier).
DATASETS: dict[str, ShortcutData] = {
    "planted_shapes": ShortcutData("shortcut", traces_per_epoch=4),
    "bloodmnist": ShortcutData("bloodmnist_shortcut", traces_per_epoch=2),
}
#: Tag frequency, in every class alike, of the negative control.
CONTROL_P = 0.5
#: Defaults that ``--quick`` changes (the full run) and what ``--quick`` sets; an option given wins.
#: ``traces_per_epoch`` None: each dataset's own (:data:`DATASETS`).
PROFILES = Profiles(
    full={
        "datasets": list(DATASETS),
        "seeds": [0, 1, 2],
        "probes": 32,
        "ig_steps": 16,
        "traces_per_epoch": None,
    },
    quick={
        "datasets": ["planted_shapes"],
        "seeds": [0],
        "probes": 16,
        "ig_steps": 8,
        "traces_per_epoch": 2,
    },
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``shortcut`` subcommand."""
    for flag, help_text, kwargs in (
        (
            "--datasets",
            "datasets, each trained with its configs/*shortcut.yaml",
            {"nargs": "+", "choices": list(DATASETS)},
        ),
        ("--seeds", "training seeds: three models each (spurious, clean, control)", {"nargs": "+", "type": int}),
        ("--probes", "tagged validation images explained every epoch", {"type": int}),
        ("--ig-steps", "Integrated Gradients steps", {"type": int}),
        (
            "--traces-per-epoch",
            "trace points per epoch, evenly over its batches; None: 4 planted shapes, 2 BloodMNIST",
            {"type": int},
        ),
    ):
        PROFILES.add(parser, flag, help_text, **kwargs)
    parser.add_argument(
        "--data-root", type=Path, default=None, help="folder holding bloodmnist.npz (BloodMNIST is skipped without it)"
    )
    parser.add_argument("--epochs", type=int, default=None, help="training epochs (default: the config's)")
    parser.add_argument("--max-train-batches", type=int, default=None, help="cap on training batches per epoch")
    parser.add_argument("--methods", nargs="*", default=list(PASS_METHODS.names), choices=list(PASS_METHODS.names))
    parser.add_argument("--peers", nargs="*", default=list(PEERS), choices=list(PEERS))
    parser.add_argument(
        "--control", action=argparse.BooleanOptionalAction, default=True, help="train the negative control too"
    )
    parser.add_argument(
        "--quick", action="store_true", help="planted shapes, one seed, 16 probes, 2 traces an epoch: under 2 minutes"
    )
    add_markdown_argument(parser)


def make_datamodule(dataset: str, variant: Variant, data_root: Path | None) -> ImageClassificationDataModule:
    """The datamodule of ``dataset`` with its config's settings and the tag of ``variant``."""
    config = DATASETS[dataset].config
    _, data, _ = config_settings(config)
    tag = SpuriousTag(**data["tag"])
    probabilities: dict[str, tuple[float, float]] = {  # the tag's (p_in, p_out) of each variant
        "spurious": (tag.p_in, tag.p_out),
        "clean": (0.0, 0.0),
        "control": (CONTROL_P, CONTROL_P),
    }
    p_in, p_out = probabilities[variant]
    data = with_data_root(dataset, {**data, "tag": replace(tag, p_in=p_in, p_out=p_out)}, data_root)
    return build_datamodule(config, ImageClassificationDataModule, **data)


def map_functions(args: argparse.Namespace) -> dict[str, MapFn]:
    """Method name -> map function: the TimmViTExplainer's methods, then the installed peers."""
    engine = {name: engine_method(name) for name in args.methods}
    return engine | {name: peer_method(name, args.ig_steps) for name in available_peers(args.peers)}


def train_traced(
    dataset: str, variant: Variant, seed: int, args: argparse.Namespace, probes: Probes
) -> tuple[Trace, ModelRecord]:
    """Train one model of ``dataset`` and ``variant`` under ``seed``, tracing every method on ``probes``."""
    datamodule = make_datamodule(dataset, variant, args.data_root)
    per_epoch = args.traces_per_epoch or DATASETS[dataset].traces_per_epoch
    trace = TagTrace(probes, map_functions(args), per_epoch)
    _, facts = train_or_load(
        DATASETS[dataset].config,
        datamodule,
        checkpoint=None,
        epochs=args.epochs,
        seed=seed,
        max_train_batches=args.max_train_batches,
        callbacks=[trace],
    )
    scores = trace.trace
    record = ModelRecord(
        dataset,
        seed,
        variant,
        epochs=facts.epochs,
        traces_per_epoch=per_epoch,
        val_accuracy=scores.val_accuracy[-1],
        spurious_score=scores.spurious[-1],
        spurious_epoch=spurious_epoch(_tensor(scores.spurious), scores.times()),
        train_seconds=facts.train_seconds,
    )
    print(
        f"{dataset} seed {seed} {variant}: val acc {record.val_accuracy:.3f}, spurious score "
        f"{record.spurious_score:.3f} (at epochs {scores.epochs}: {[round(s, 3) for s in scores.spurious]}), "
        f"{record.train_seconds:.0f} s with the trace",
        flush=True,
    )
    return trace.trace, record


def detection_records(dataset: str, seed: int, subject: Trace, clean: Trace) -> list[DetectionRecord]:
    """One record per method: ``subject`` (the spurious model, or the control) against the clean model."""
    records = []
    for method in subject.mass:
        masses, clean_masses = subject.masses(method), clean.masses(method)
        records.append(
            DetectionRecord(
                dataset=dataset,
                seed=seed,
                method=method,
                tag_mass_spurious=masses[-1].nanmean().item(),
                tag_mass_clean=clean_masses[-1].nanmean().item(),
                tag_rank_spurious=subject.ranks(method)[-1].nanmean().item(),
                detection_auroc=detection_auroc(masses[-1], clean_masses[-1]),
                first_flag_epoch=first_flag_epoch(masses, clean_masses, subject.times()),
                spurious_epoch=spurious_epoch(_tensor(subject.spurious), subject.times()),
                spurious_score=subject.spurious[-1],
            )
        )
    return records


def run(args: argparse.Namespace) -> list[dict]:
    """Every requested dataset and seed; print the tables, optionally write them as markdown; return the
    detection records as dicts (``dataclasses.asdict``)."""
    PROFILES.apply(args)
    clock = RunClock()
    detections: list[DetectionRecord] = []
    models: list[ModelRecord] = []
    curves: dict[tuple[str, Variant], list[Trace]] = {}
    variants = VARIANTS if args.control else VARIANTS[:2]
    for dataset in args.datasets:
        if not has_data(dataset, DATASETS[dataset].config, args.data_root):
            continue
        probes = tagged_probes(make_datamodule(dataset, "spurious", args.data_root), args.probes)
        for seed in args.seeds:
            traces = {}
            for variant in variants:
                traces[variant], model = train_traced(dataset, variant, seed, args, probes)
                models.append(model)
                curves.setdefault((dataset, variant), []).append(traces[variant])
            detections += detection_records(dataset, seed, traces["spurious"], traces["clean"])
            if args.control:
                detections += detection_records(f"{dataset} control", seed, traces["control"], traces["clean"])
    finished = clock.finish("shortcut")
    section = report.markdown(detections, models, curves, probes=args.probes, ig_steps=args.ig_steps, **finished)
    print(section)
    if args.markdown is not None:
        report.write(args.markdown, section)
        print(f"wrote the tables into {args.markdown}")
    return [asdict(record) for record in detections]


def _tensor(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.double)
