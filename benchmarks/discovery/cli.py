"""The ``discovery`` subcommand: options, the training runs per dataset, seed and variant, the records."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from gradskip_lightning.callbacks.correction_settings import UNLEARNING
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.methods import PASS_METHODS
from gradskip_lightning.shortcuts import DiscoverySettings, PixelSample
from gradskip_lightning.shortcuts.image_properties import PixelSpace

from ..faithfulness.peers import PEERS, available_peers
from ..profiles import Profiles
from ..runs import command_line, joined_runs, machine
from ..shortcuts import SHORTCUTS
from ..tables import add_markdown_argument
from ..training import has_data, train_or_load
from . import report
from .correction import CORRECTION_MARGIN, add_correction_arguments, corrected, correction_callbacks
from .scoring import Formula
from .trace import (
    STAGE,
    ClassRecord,
    DiscoveryTrace,
    PropertyRecord,
    datamodule_subject,
    discovery_probes,
    token_map_fn,
)
from .variants import (
    CONTROL_P,
    DATASETS,
    DEFAULT_VARIANTS,
    GLOBAL,
    MAPPED,
    PLACED,
    VARIANTS,
    Variant,
    make_datamodule,
    stamp_of,
)

#: The library's defaults, which the report's main tables use: the suspicion formula follows
#: :attr:`DiscoverySettings.consistency`.
DEFAULTS = DiscoverySettings()
#: Defaults that ``--quick`` changes (the full run) and what ``--quick`` sets; an option given wins.
PROFILES = Profiles(
    full={
        "datasets": list(DATASETS),
        "seeds": [0, 1, 2],
        "probes_per_class": 8,
        "pixel_probes_per_class": STAGE.pixel_probes_per_class,
        "shares": [0.1, 0.25],
        "ig_steps": 8,
        "variants": list(DEFAULT_VARIANTS),
        "max_train_batches": None,
        "methods": list(PASS_METHODS.names),
        "peers": list(PEERS),
    },
    quick={
        "datasets": ["planted_shapes"],
        "seeds": [0],
        "probes_per_class": 8,
        "pixel_probes_per_class": STAGE.pixel_probes_per_class,
        "shares": [0.1, 0.25],
        "ig_steps": 4,
        "variants": ["stamped", "clean", "cast"],
        "max_train_batches": 16,
        "methods": ["gradskip", "rollout", "lrp"],
        "peers": ["input_x_gradient"],
    },
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``discovery`` subcommand."""
    for flag, help_text, kwargs in (
        ("--datasets", "datasets, each trained with its config", {"nargs": "+", "choices": list(DATASETS)}),
        ("--seeds", "training seeds: one model of each variant each", {"nargs": "+", "type": int}),
        ("--probes-per-class", "validation images per class explained and transplanted", {"type": int}),
        ("--pixel-probes-per-class", "images per class a class's pixel test reads (the probes too)", {"type": int}),
        ("--shares", "hotspot shares tested", {"nargs": "+", "type": float}),
        ("--ig-steps", "Integrated Gradients steps", {"type": int}),
        ("--variants", "models trained per seed", {"nargs": "+", "choices": list(VARIANTS)}),
        ("--max-train-batches", "cap on training batches per epoch", {"type": int}),
        ("--methods", "engine methods", {"nargs": "*", "choices": list(PASS_METHODS.names)}),
        ("--peers", "pixel-map peers (those installed)", {"nargs": "*", "choices": list(PEERS)}),
    ):
        PROFILES.add(parser, flag, help_text, **kwargs)
    parser.add_argument(
        "--data-root", type=Path, default=None, help="folder holding bloodmnist.npz (BloodMNIST is skipped without it)"
    )
    parser.add_argument(
        "--target", type=int, default=None,
        help="the shortcut's class (default: the dataset's, planted shapes 2, BloodMNIST 5); keep the weights of "
        "another class's models in their own --keep-weights folder",
    )  # fmt: skip
    parser.add_argument(
        "--epochs", type=int, default=None, help="training epochs (default: the config's, 4 BloodMNIST)"
    )
    parser.add_argument(
        "--keep-weights", type=Path, default=None,
        help="keep every model's weights after each epoch here (<dataset>/<variant>/seed<k>/epoch<e>.pt), "
        "to test other detectors on the same trained epochs",
    )  # fmt: skip
    parser.add_argument(
        "--correction-margin", type=int, default=CORRECTION_MARGIN,
        help=f"patches the corrected variant adds around the flagged hotspot (default {CORRECTION_MARGIN})",
    )  # fmt: skip
    add_correction_arguments(parser, "corrected variant: ")
    parser.add_argument(
        "--correction-unlearn", choices=UNLEARNING, default="data",
        help="how the corrected models unlearn a flagged region: data (paste, erase) or loss (input-gradient penalty)",
    )  # fmt: skip
    parser.add_argument(
        "--quick", action="store_true", help="planted shapes, one seed, stamped, clean and cast: minutes"
    )
    add_markdown_argument(parser)
    parser.add_argument(
        "--report-from", type=Path, nargs="+", default=None,
        help="rebuild the tables from these runs' --json (of different models), joined (no training)",
    )  # fmt: skip


def describe(dataset: str, variant: Variant, seed: int, args: argparse.Namespace) -> str:
    """The shortcut of ``dataset``'s model of ``variant`` and ``seed``, in words."""
    stamp = stamp_of(dataset, seed, variant)
    if variant in GLOBAL:
        of = GLOBAL[variant]
        return SHORTCUTS[of.shortcut].describe + (f" on every class at {CONTROL_P:.0%}" if of.control else "")
    how = "pasted only" if args.correction_paste_only else "taken off the class first"
    how = "by the input-gradient loss" if args.correction_unlearn == "loss" else how
    corrected_at = f", corrected at p {args.correction_p:g}, margin {args.correction_margin}, {how}"
    return {"clean": "none", "control": f"{stamp.describe()} on every class at {CONTROL_P:.0%}",
            "corrected": f"{stamp.describe()}{corrected_at}"}.get(variant, stamp.describe())  # fmt: skip


class EpochWeights(Callback):
    """Saves the module's ``state_dict`` after every training epoch as ``folder/epoch<e>.pt`` (e from 1)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        torch.save(pl_module.state_dict(), self.folder / f"epoch{trainer.current_epoch + 1}.pt")


def train_and_trace(
    dataset: str, variant: Variant, seed: int, args: argparse.Namespace
) -> tuple[list[ClassRecord], list[PropertyRecord]]:
    """Train one model of ``dataset``, ``variant`` and ``seed``, tracing what each method (of the
    :data:`~.variants.MAPPED` variants) and the property transplants discover."""
    bench = DATASETS[dataset]
    target = bench.target if args.target is None else args.target
    datamodule = make_datamodule(dataset, variant, seed, args.data_root, target)
    shortcut = describe(dataset, variant, seed, args)
    subject = datamodule_subject(datamodule, dataset, seed, variant, shortcut, target)
    datamodule.setup("fit")
    images, classes = discovery_probes(datamodule.val_dataset, args.probes_per_class)  # type: ignore[arg-type]
    pixels = PixelSample(*discovery_probes(datamodule.val_dataset, args.pixel_probes_per_class))  # type: ignore[arg-type]
    names = [*args.methods, *available_peers(args.peers)] if variant in MAPPED else []
    methods = {name: token_map_fn(name, args.ig_steps) for name in names}
    space = PixelSpace.of(images, Normalisation(datamodule.mean, datamodule.std))
    trace = DiscoveryTrace(subject, images, classes, methods, args.shares, variant in PLACED, space, pixels)
    callbacks: list[Callback] = [trace]
    if args.keep_weights is not None:
        callbacks.append(EpochWeights(args.keep_weights / dataset / variant / f"seed{seed}"))
    correction = None
    if variant == "corrected":
        discovery_and_correction, correction = correction_callbacks(
            args.probes_per_class,
            args.correction_p,
            args.correction_margin,
            not args.correction_paste_only,
            args.correction_unlearn,
        )
        callbacks += discovery_and_correction
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:  # the corrected variant's GradSkipCallback writes its files there
        _, facts = train_or_load(
            bench.config, datamodule, checkpoint=None, epochs=args.epochs, seed=seed,
            max_train_batches=args.max_train_batches, callbacks=callbacks, root=Path(root),
        )  # fmt: skip
    records = trace.records
    if correction is not None:
        records = [replace(r, corrected=corrected(correction)) for r in records]
    last = trace.property_records[-1]
    flagged = sorted({f"class {r.label} {r.property}" for r in trace.property_records if r.flagged})
    print(
        f"{dataset} seed {seed} {variant} ({shortcut}): {facts.epochs} epochs, spurious score "
        f"{last.spurious_score:.2f}, probe accuracy {last.accuracy:.3f}"
        f"{'' if not records else f', clean accuracy {records[-1].clean_accuracy:.3f}'}"
        f"{'' if correction is None else ', corrected: ' + records[-1].corrected}, "
        f"properties flagged: {', '.join(flagged) or 'none'}, {time.perf_counter() - start:.0f} s with the trace",
        flush=True,
    )
    return records, trace.property_records


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every requested dataset, seed and variant (or the records of ``--report-from``); print the tables,
    optionally write them as markdown; return the class records as dicts."""
    PROFILES.apply(args)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    start = time.perf_counter()
    facts = machine()
    if args.report_from is not None:
        runs, command, facts = joined_runs(args.report_from)
        records = [ClassRecord(**{**r, "box": tuple(r["box"]), "stamp": r["stamp"] and tuple(r["stamp"])})
                   for saved in runs for r in saved["records"]]  # fmt: skip
        properties = [PropertyRecord(**r) for saved in runs for r in saved.get("property_records", [])]
    else:
        records, properties = [], []
        for dataset in args.datasets:
            if not has_data(dataset, DATASETS[dataset].config, args.data_root):
                continue
            for seed in args.seeds:
                for variant in args.variants:
                    maps, found = train_and_trace(dataset, variant, seed, args)
                    records, properties = records + maps, properties + found
        facts["wall_seconds"] = time.perf_counter() - start
        command = command_line()
    formula: Formula = "full" if DEFAULTS.consistency else "no_consistency"
    shares = [r.share for r in records] or [DEFAULTS.hotspot_share]
    share = DEFAULTS.hotspot_share if DEFAULTS.hotspot_share in shares else shares[0]
    section = report.markdown(
        records, properties, share=share, formula=formula, threshold=DEFAULTS.alert_threshold, alpha=DEFAULTS.alpha,
        command=command, facts=facts,
    )  # fmt: skip
    print(section)
    if args.markdown is not None:
        report.write(args.markdown, section)
        print(f"wrote the tables into {args.markdown}")
    if args.json is not None and args.report_from is None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        saved = {"command": command, "facts": facts, "records": [asdict(r) for r in records],
                 "property_records": [asdict(r) for r in properties]}  # fmt: skip
        args.json.write_text(json.dumps(saved))
        print(f"wrote {len(records)} class records and {len(properties)} property records to {args.json}")
        args.json = None  # written here, with the facts the report needs
    return [asdict(r) for r in records]
