"""The ``segmentation`` subcommand: options, one run per training seed, the reports."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from benchmarks.faithfulness.bootstrap import BootstrapSettings
from benchmarks.faithfulness.maps import compute_maps
from benchmarks.profiles import Profiles
from benchmarks.runs import RunClock
from benchmarks.tables import add_markdown_argument
from benchmarks.training import add_checkpoint_arguments, seed_model

from . import report
from .figure import FIGURE_METHODS, write_figure
from .methods import METHODS, available_methods
from .models import (
    CONFIG,
    SegmentationSubset,
    default_regions,
    make_datamodule,
    split_scores,
    square_subset,
)
from .records import SegmentationModelRecord, SegmentationScoreRecord
from .summary import SeedScores, interval_records, paired_differences, per_image_scores, pooled_scores

#: Defaults of the options that ``--quick`` changes (the full run), and what ``--quick`` sets instead
#: (a CI-sized run: 2 seeds, 1 epoch of 3 batches, 8 images). An option given explicitly wins.
PROFILES = Profiles(
    full={
        "seeds": [0, 1, 2],
        "epochs": None,
        "max_train_batches": None,
        "eval_batches": None,
        "test_size": 128,
        "steps": 16,
        "bootstrap_resamples": 2000,
    },
    quick={
        "seeds": [0, 1],
        "epochs": 1,
        "max_train_batches": 3,
        "eval_batches": 1,
        "test_size": 8,
        "steps": 4,
        "bootstrap_resamples": 200,
    },
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``segmentation`` subcommand."""
    PROFILES.add(parser, "--seeds", "training seeds: one model each", nargs="+", type=int)
    parser.add_argument("--subset-seed", type=int, default=0, help="seed of the fixed test subset (same for all)")
    add_checkpoint_arguments(parser, f"{CONFIG}-seed<k>.ckpt (SegmentationModule)")
    PROFILES.add(parser, "--epochs", f"training epochs (None: configs/{CONFIG}.yaml's)", type=int)
    PROFILES.add(parser, "--max-train-batches", "cap on training batches per epoch", type=int)
    PROFILES.add(parser, "--eval-batches", "cap on validation and test batches for the models' mIoU", type=int)
    PROFILES.add(parser, "--test-size", "images in the fixed test subset", type=int)
    PROFILES.add(parser, "--steps", "insertion/deletion steps K", type=int)
    parser.add_argument("--patch-size", type=int, default=4, help="pixels per insertion/deletion patch")
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS))
    PROFILES.add(parser, "--bootstrap-resamples", "resamples of the interval bootstrap", type=int)
    parser.add_argument("--bootstrap-seed", type=int, default=0, help="generator seed of the interval bootstrap")
    parser.add_argument("--explain-batch", type=int, default=64, help="images per explain call")
    parser.add_argument("--metric-batch", type=int, default=512, help="perturbed images per forward in the metrics")
    parser.add_argument("--quick", action="store_true", help="CI-sized run of seconds (see the defaults above)")
    add_markdown_argument(parser)
    parser.add_argument(
        "--figure",
        type=Path,
        default=None,
        help=f"save a PNG of the first test images x image, square, {', '.join(FIGURE_METHODS)} (first seed)",
    )
    parser.add_argument("--figure-images", type=int, default=4, help="rows of the figure")


def score_method(
    name: str,
    model: torch.nn.Module,
    subset: SegmentationSubset,
    regions: torch.Tensor,
    args: argparse.Namespace,
    seed: int,
) -> tuple[SeedScores, torch.Tensor]:
    """Maps of method ``name`` on the subset, their per-image and pooled scores, and the maps (n, H, W)."""
    spec = METHODS[name]
    maps, ms = compute_maps(spec.fn, model, subset.images, subset.targets, args.explain_batch)
    values = per_image_scores(
        model,
        subset.images,
        subset.targets,
        maps,
        subset.masks,
        regions,
        steps=args.steps,
        patch_size=args.patch_size,
        batch_size=args.metric_batch,
    )
    record = SegmentationScoreRecord(
        dataset=CONFIG,
        seed=seed,
        method=name,
        kind=spec.kind,
        images=len(subset.images),
        ms_per_map=ms,
        scores={key: value.nanmean().item() for key, value in values.items()},
        pooled=pooled_scores(maps, subset.masks),
    )
    return SeedScores(record, values), maps


def run_seed(
    seed: int, datamodule, subset: SegmentationSubset, methods: list[str], args: argparse.Namespace
) -> tuple[SegmentationModelRecord, list[SeedScores], dict[str, torch.Tensor]]:
    """Train (or load) the model of one seed, score every method; also the maps of the figure's images."""
    model, facts = seed_model(CONFIG, datamodule, seed, args)
    splits: dict[str, Any] = split_scores(model, datamodule, args.eval_batches)
    regions, found = default_regions(model, subset.images, subset.targets)
    model_record = SegmentationModelRecord(
        dataset=CONFIG,
        seed=seed,
        images=len(subset.images),
        empty_regions=int((~found).sum()),
        **asdict(facts),
        **splits,
    )
    print(report.model_line(model_record), flush=True)
    runs, figure_maps = [], {}
    for name in methods:
        scored, maps = score_method(name, model, subset, regions, args, seed)
        runs.append(scored)
        figure_maps[name] = maps[: args.figure_images]
        print(report.progress_line(scored.record), flush=True)
    return model_record, runs, figure_maps


def run(args: argparse.Namespace) -> list[dict]:
    """Every requested seed; print the tables, optionally write the markdown and the figure; return the
    records as dicts (``dataclasses.asdict``), each with its ``record`` kind."""
    PROFILES.apply(args)
    bootstrap = BootstrapSettings(args.bootstrap_resamples, args.bootstrap_seed)
    methods = available_methods(args.methods)
    clock = RunClock()
    datamodule = make_datamodule()
    subset = square_subset(datamodule, args.test_size, args.subset_seed)
    records: list[report.Record] = []
    runs: list[SeedScores] = []
    first_maps: dict[str, torch.Tensor] = {}
    for seed in args.seeds:
        model_record, seed_runs, figure_maps = run_seed(seed, datamodule, subset, methods, args)
        records.append(model_record)
        runs += seed_runs
        first_maps = first_maps or figure_maps
    records += [run.record for run in runs]
    records += interval_records(runs, bootstrap)
    records += paired_differences(runs, bootstrap)
    print("\n".join(["", *report.section_body(records)]), flush=True)
    finished = clock.finish("segmentation")
    if args.markdown is not None:
        settings = report.RunSettings(args.test_size, args.subset_seed, args.steps, args.patch_size, args.epochs)
        report.write_markdown(args.markdown, records, settings=settings, bootstrap=bootstrap, **finished)
        print(f"wrote the tables into {args.markdown}")
    if args.figure is not None:
        count = min(args.figure_images, len(subset.images))
        write_figure(args.figure, subset, first_maps, datamodule, count, seed=args.seeds[0])
        print(f"wrote the figure {args.figure}")
    return [asdict(record) for record in records]
