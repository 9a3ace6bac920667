"""The ``faithfulness`` subcommand: options, one run per dataset and training seed, the reports."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from benchmarks.profiles import Profiles
from gradskip_lightning.families import explainer_for
from gradskip_lightning.methods import PASS_METHODS

from . import report
from .ablations import ablation_rows, gradskip_overrides
from .bootstrap import BootstrapSettings
from .data import DATASETS, Subset, checkpoint_path, fixed_subset, make_datamodule, needs_data_root, train_or_load
from .maps import Method, adapter_of, compute_maps, cost, engine_method
from .peers import PEERS, available_peers, peer_method
from .records import ModelRecord, Row, ScoreRecord
from .scores import SCORES, ScoreInputs, score_all
from .summary import SUBJECT, SeedScores, interval_records, paired_differences

#: Defaults of the options that ``--quick`` changes (the full run), and what ``--quick`` sets instead
#: (a CI-sized run: planted shapes on the tiny ViT and the small Swin, 2 seeds, 16 images, 1 short epoch). An
#: option given explicitly wins.
PROFILES = Profiles(
    full={
        "datasets": list(DATASETS),
        "seeds": [0, 1, 2],
        "epochs": None,
        "max_train_batches": None,
        "test_size": 256,
        "steps": 16,
        "randomisation_images": 32,
        "ig_steps": 50,
        "ablation_size": 128,
        "bootstrap_resamples": 2000,
    },
    quick={
        "datasets": ["planted_shapes", "planted_shapes_swin"],
        "seeds": [0, 1],
        "epochs": 1,
        "max_train_batches": 4,
        "test_size": 16,
        "steps": 4,
        "randomisation_images": 4,
        "ig_steps": 4,
        "ablation_size": 8,
        "bootstrap_resamples": 500,
    },
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``faithfulness`` subcommand."""
    PROFILES.add(
        parser, "--datasets", "datasets, each trained with configs/<name>.yaml", nargs="+", choices=list(DATASETS)
    )
    parser.add_argument(
        "--data-root", type=Path, default=None, help="folder holding bloodmnist.npz (BloodMNIST is skipped without it)"
    )
    PROFILES.add(parser, "--seeds", "training seeds: one model each", nargs="+", type=int)
    parser.add_argument(
        "--subset-seed", type=int, default=0, help="seed of the fixed test subset (the same for every model)"
    )
    parser.add_argument(
        "--checkpoints",
        type=Path,
        default=None,
        metavar="DIR",
        help="load DIR/<dataset>-seed<k>.ckpt (ViTClassifier checkpoints); a seed without one is trained",
    )
    parser.add_argument(
        "--save-checkpoints", type=Path, default=None, metavar="DIR", help="save each trained model there"
    )
    PROFILES.add(parser, "--epochs", "training epochs (None: the config's, except 4 for BloodMNIST)", type=int)
    PROFILES.add(parser, "--max-train-batches", "cap on training batches per epoch", type=int)
    PROFILES.add(parser, "--test-size", "images in the fixed test subset", type=int)
    PROFILES.add(parser, "--steps", "insertion/deletion steps K", type=int)
    PROFILES.add(
        parser, "--randomisation-images", "first images of the subset used for the randomisation test", type=int
    )
    parser.add_argument("--methods", nargs="*", default=list(PASS_METHODS.names), choices=list(PASS_METHODS.names))
    parser.add_argument("--peers", nargs="*", default=list(PEERS), choices=list(PEERS))
    PROFILES.add(parser, "--ig-steps", "Integrated Gradients steps", type=int)
    parser.add_argument(
        "--gradskip",
        nargs="*",
        default=[],
        metavar="OPTION=VALUE",
        help="GradSkipOptions overrides for the gradskip row and the ablations' base, e.g. gate=layer",
    )
    parser.add_argument(
        "--ablations", action=argparse.BooleanOptionalAction, default=True, help="run the GradSkip ablations"
    )
    PROFILES.add(parser, "--ablation-size", "first images of the subset used for the ablations", type=int)
    parser.add_argument(
        "--ablation-groups", nargs="*", default=None, metavar="GROUP", help="run only these ablation groups"
    )
    parser.add_argument(
        "--costly-ablations",
        action="store_true",
        help="also score class sensitivity and randomisation in the ablations (costly)",
    )
    PROFILES.add(parser, "--bootstrap-resamples", "resamples of the interval bootstrap", type=int)
    parser.add_argument("--bootstrap-seed", type=int, default=0, help="generator seed of the interval bootstrap")
    parser.add_argument("--explain-batch", type=int, default=64, help="images per explain call")
    parser.add_argument("--metric-batch", type=int, default=512, help="perturbed images per forward in the metrics")
    parser.add_argument(
        "--quick", action="store_true", help="CI-sized run of about two minutes (see the defaults above)"
    )
    parser.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help="write the tables into this markdown file (between generated-section markers)",
    )


def _methods(args: argparse.Namespace) -> list[Method]:
    """The methods table's rows: the TimmViTExplainer's methods, then the installed peers."""
    base = gradskip_overrides(args.gradskip)
    engine = []
    for name in args.methods:
        options = base if name == SUBJECT else {}
        engine.append(Method(Row("methods", name, options=options), engine_method(name, **options)))
    peers = [
        Method(Row("methods", name, kind="peer"), peer_method(name, args.ig_steps))
        for name in available_peers(args.peers)
    ]
    return engine + peers


def _score(
    method: Method, model: torch.nn.Module, subset: Subset, args: argparse.Namespace, dataset: str, seed: int
) -> SeedScores:
    """Maps of ``method`` on ``subset``, every score of its table per image, and its cost (methods only)."""
    maps, ms = compute_maps(method.fn, model, subset.images, subset.labels, args.explain_batch)
    inputs = ScoreInputs(
        model=model,
        images=subset.images,
        targets=subset.labels,
        maps=maps,
        masks=subset.masks,
        map_fn=method.fn,
        steps=args.steps,
        batch_size=args.metric_batch,
        patch_size=adapter_of(model).patch_size,
        randomisation_images=args.randomisation_images,
        seed=seed,
    )
    every = method.row.table == "methods" or args.costly_ablations
    scores = SCORES if every else tuple(s for s in SCORES if s.in_ablations)
    values = score_all(inputs, scores)
    spent = cost(method.fn, model, subset.images[:1], subset.labels[:1]) if method.row.table == "methods" else None
    record = ScoreRecord(
        dataset=dataset,
        seed=seed,
        row=method.row,
        images=len(subset.images),
        ms_per_map=ms,
        gflops_per_map=None if spent is None else spent.gflops_per_map,
        ratio_to_forward=None if spent is None else spent.ratio_to_forward,
        cheap=None if spent is None else spent.cheap,
        scores={name: None if v is None else v.mean().item() for name, v in values.items()},
    )
    return SeedScores(record, values)


def run_seed(dataset: str, seed: int, args: argparse.Namespace) -> tuple[ModelRecord, list[SeedScores]]:
    """Train (or load) the model of one dataset and seed; score every method and every ablation."""
    datamodule = make_datamodule(dataset, args.data_root)
    checkpoint = None if args.checkpoints is None else checkpoint_path(args.checkpoints, dataset, seed)
    if checkpoint is not None and not checkpoint.exists():
        print(f"note: {checkpoint} not found: {dataset} seed {seed} is trained", flush=True)
        checkpoint = None
    model, facts = train_or_load(
        dataset,
        datamodule,
        checkpoint=checkpoint,
        epochs=args.epochs,
        seed=seed,
        max_train_batches=args.max_train_batches,
    )
    if args.save_checkpoints is not None and checkpoint is None:
        args.save_checkpoints.mkdir(parents=True, exist_ok=True)
        model.trainer.save_checkpoint(checkpoint_path(args.save_checkpoints, dataset, seed))
    subset = fixed_subset(datamodule, args.test_size, args.subset_seed)
    with torch.no_grad():
        accuracy = (model(subset.images).argmax(dim=1) == subset.labels).double().mean().item()
    model_record = ModelRecord(dataset, seed, accuracy=accuracy, images=len(subset.images), **asdict(facts))
    trained = f"trained {facts.epochs} epochs in {facts.train_seconds:.0f} s"
    origin = f"loaded {checkpoint}" if checkpoint else trained
    print(f"\n== {dataset}, seed {seed}: {origin}; accuracy {accuracy:.3f} on {len(subset.images)} images", flush=True)
    runs = []
    for method in _methods(args):
        runs.append(_score(method, model, subset, args, dataset, seed))
        print(report.progress_line(runs[-1].record), flush=True)
    if args.ablations:
        runs += run_ablations(model, subset, args, dataset, seed, runs)
    return model_record, runs


def run_ablations(
    model: torch.nn.Module,
    subset: Subset,
    args: argparse.Namespace,
    dataset: str,
    seed: int,
    methods: list[SeedScores],
) -> list[SeedScores]:
    """Score GradSkip with one option changed at a time on the first ``args.ablation_size`` images; the
    default row is scored once and repeated in every group. A setting the model's family refuses (a
    Swin's unsupported options) is skipped with a note."""
    subset = subset.head(args.ablation_size)
    done: dict[tuple, SeedScores] = {}
    runs = []
    for row in ablation_rows(gradskip_overrides(args.gradskip), args.ablation_groups):
        refused = _refusal(model, row.options)
        if refused:
            print(f"  seed {seed} {row.name}: skipped, {refused}", flush=True)
            continue
        key = tuple(sorted(row.options.items()))
        if key not in done:
            done[key] = _score(Method(row, engine_method(SUBJECT, **row.options)), model, subset, args, dataset, seed)
        scored = done[key]
        runs.append(SeedScores(replace(scored.record, row=row), scored.values))
        print(report.progress_line(runs[-1].record), flush=True)
    return runs


def _refusal(model: torch.nn.Module, options: dict[str, Any]) -> str:
    """Why ``model``'s family refuses GradSkip with ``options`` ("" when it takes them)."""
    try:
        explainer_for(model, SUBJECT, **options)
    except ValueError as error:
        return str(error)
    return ""


def machine() -> dict[str, Any]:
    """CPU model, logical CPUs, torch version and intra-op threads of this run."""
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        cpu = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "")
    except (OSError, subprocess.CalledProcessError):
        cpu = ""
    return {
        "cpu": cpu or platform.processor(),
        "logical_cpus": torch.multiprocessing.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


def run(args: argparse.Namespace) -> list[dict]:
    """Every requested dataset and seed; print the tables, optionally write them as markdown; return the
    records as dicts (``dataclasses.asdict``), each with its ``record`` kind."""
    PROFILES.apply(args)
    bootstrap = BootstrapSettings(args.bootstrap_resamples, args.bootstrap_seed)
    start, cpu_start = time.perf_counter(), time.process_time()
    records: list[report.Record] = []
    for dataset in args.datasets:
        if needs_data_root(dataset) and args.data_root is None:
            print(f"note: {dataset} skipped: pass --data-root, the folder holding its files")
            continue
        runs: list[SeedScores] = []
        for seed in args.seeds:
            model_record, seed_runs = run_seed(dataset, seed, args)
            records.append(model_record)
            runs += seed_runs
        records += [run.record for run in runs]
        records += interval_records(runs, bootstrap)
        records += paired_differences(runs, bootstrap)
        print("\n".join(["", *report.dataset_section(dataset, records)]), flush=True)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    facts = {**machine(), "cpu_seconds": cpu, "load_average": os.getloadavg()[0]}
    print(
        f"\nfaithfulness benchmark: {wall / 60:.1f} min wall, {cpu / 60:.1f} min CPU time (all threads), "
        f"on {facts['threads']} threads; load average now {facts['load_average']:.1f}"
    )
    if args.markdown is not None:
        command = "python -m benchmarks " + " ".join(sys.argv[1:])
        report.write_markdown(
            args.markdown,
            records,
            command=command,
            machine=facts,
            wall_seconds=wall,
            steps=args.steps,
            bootstrap=bootstrap,
        )
        print(f"wrote the tables into {args.markdown}")
    return [asdict(record) for record in records]
