"""The ``faithfulness`` subcommand: options, one run per dataset and training seed, the reports."""

from __future__ import annotations

import argparse
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from benchmarks.profiles import Profiles
from benchmarks.runs import RunClock
from benchmarks.tables import add_markdown_argument
from benchmarks.training import add_checkpoint_arguments, has_data, seed_model
from gradskip_lightning.families import explainer_for
from gradskip_lightning.methods import PASS_METHODS

from . import report
from .ablations import ablation_rows, gradskip_overrides
from .bootstrap import BootstrapSettings
from .data import DATASETS, Subset, fixed_subset, make_datamodule
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
    add_checkpoint_arguments(parser, "<dataset>-seed<k>.ckpt (ViTClassifier)")
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
    add_markdown_argument(parser)


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
    model, facts = seed_model(dataset, datamodule, seed, args)
    subset = fixed_subset(datamodule, args.test_size, args.subset_seed)
    with torch.no_grad():
        accuracy = (model(subset.images).argmax(dim=1) == subset.labels).double().mean().item()
    model_record = ModelRecord(dataset, seed, accuracy=accuracy, images=len(subset.images), **asdict(facts))
    trained = f"trained {facts.epochs} epochs in {facts.train_seconds:.0f} s"
    origin = f"loaded {facts.checkpoint}" if facts.checkpoint else trained
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


def run(args: argparse.Namespace) -> list[dict]:
    """Every requested dataset and seed; print the tables, optionally write them as markdown; return the
    records as dicts (``dataclasses.asdict``), each with its ``record`` kind."""
    PROFILES.apply(args)
    bootstrap = BootstrapSettings(args.bootstrap_resamples, args.bootstrap_seed)
    clock = RunClock()
    records: list[report.Record] = []
    for dataset in args.datasets:
        if not has_data(dataset, dataset, args.data_root):
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
    finished = clock.finish("faithfulness")
    if args.markdown is not None:
        report.write_markdown(args.markdown, records, steps=args.steps, bootstrap=bootstrap, **finished)
        print(f"wrote the tables into {args.markdown}")
    return [asdict(record) for record in records]
