"""Faithfulness benchmark: every method scored on planted shapes and BloodMNIST, with GradSkip ablations.

Run as ``python -m gradskip_lightning.benchmarks faithfulness [--data-root DIR] [--markdown PATH]``.
Per dataset: a tiny ViT is trained with its config's settings (or loaded with ``--checkpoint``), a
fixed seeded test subset is explained by every method, with the true label as target, and each
method gets insertion, deletion, insertion minus deletion, the Faithfulness Violation Test ratio,
the Pointing Game (planted shapes only: they have object masks), the parameter-randomisation
similarity, FLOPs and CPU milliseconds per map. Then GradSkip's options are ablated one at a time.
Without ``--data-root`` only planted shapes runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from gradskip_lightning.benchmarks import faithfulness_report as report
from gradskip_lightning.benchmarks.faithfulness_data import (
    DATASETS,
    Subset,
    fixed_subset,
    make_datamodule,
    train_or_load,
)
from gradskip_lightning.benchmarks.faithfulness_peers import (
    PEERS,
    available_peers,
    peer_method,
)
from gradskip_lightning.benchmarks.faithfulness_scoring import (
    Method,
    compute_maps,
    cost,
    engine_method,
    randomisation_similarity,
    score_maps,
)
from gradskip_lightning.explainer import METHODS
from gradskip_lightning.methods import GradSkipOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the ``faithfulness`` subcommand."""
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument(
        "--data-root", type=Path, default=None, help="folder holding bloodmnist.npz (BloodMNIST is skipped without it)"
    )
    parser.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="DATASET=PATH",
        help="load this ViTClassifier checkpoint instead of training (repeatable)",
    )
    parser.add_argument(
        "--save-checkpoints",
        type=Path,
        default=None,
        metavar="DIR",
        help="save each trained model as DIR/<dataset>.ckpt",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="training epochs (default: 3 for planted shapes as in its config, 4 for BloodMNIST)",
    )
    parser.add_argument("--max-train-batches", type=int, default=None, help="cap on training batches per epoch")
    parser.add_argument("--test-size", type=int, default=256, help="images in the fixed test subset")
    parser.add_argument("--seed", type=int, default=0, help="training and subset seed")
    parser.add_argument("--steps", type=int, default=16, help="insertion/deletion steps K")
    parser.add_argument(
        "--randomisation-images",
        type=int,
        default=32,
        help="first images of the subset used for the randomisation test",
    )
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--peers", nargs="*", default=list(PEERS), choices=list(PEERS))
    parser.add_argument("--ig-steps", type=int, default=50, help="Integrated Gradients steps")
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
    parser.add_argument(
        "--ablation-size", type=int, default=128, help="first images of the subset used for the ablations"
    )
    parser.add_argument("--explain-batch", type=int, default=64, help="images per explain call")
    parser.add_argument("--metric-batch", type=int, default=512, help="perturbed images per forward in the metrics")
    parser.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help="write the tables into this markdown file (between generated-section markers)",
    )


def _checkpoints(pairs: list[str]) -> dict[str, Path]:
    out = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or name not in DATASETS:
            raise ValueError(f"--checkpoint must be DATASET=PATH with DATASET in {tuple(DATASETS)}, got {pair!r}")
        out[name] = Path(path)
    return out


def gradskip_overrides(pairs: list[str]) -> dict:
    """``["gate=layer", "alpha=0.25"]`` -> ``{"gate": "layer", "alpha": 0.25}``, typed as GradSkipOptions' defaults."""
    defaults = GradSkipOptions()
    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not hasattr(defaults, name):
            raise ValueError(f"--gradskip takes OPTION=VALUE with OPTION a GradSkipOptions field, got {pair!r}")
        kind = type(getattr(defaults, name))
        if kind is bool and text not in ("True", "False"):
            raise ValueError(f"--gradskip {name} must be True or False, got {text!r}")
        out[name] = text == "True" if kind is bool else kind(text)
    GradSkipOptions(**out)  # validates the values
    return out


def ablations(base: dict | None = None) -> list[tuple[str, str, dict]]:
    """(group, setting, GradSkip options) of every ablation row, each one option changed from ``base``
    (GradSkipOptions overrides; None = the defaults). The row equal to ``base`` is the default row."""
    base = base or {}
    defaults = GradSkipOptions(**base)
    rows = [("alpha", f"alpha={a}", {"alpha": a}) for a in (0.0, 0.25, 0.5, 0.75, 1.0)]
    rows += head_selection_rows()
    rows += [("gate", f"gate={g}", {"gate": g}) for g in ("token", "layer", "off")]
    rows += [("cls_mode", f"cls_mode={c}", {"cls_mode": c}) for c in ("readout", "paper")]
    rows += [
        ("attention_weighting", f"attention_weighting={w}", {"attention_weighting": w})
        for w in ("abs_grad", "pos_grad", "none")
    ]
    rows += [("value_norm", f"value_norm={v}", {"value_norm": v}) for v in (True, False)]
    # An option equal to the base's is left out: the row with no change is the default row.
    return [(g, s, {**base, **{k: v for k, v in o.items() if getattr(defaults, k) != v}}) for g, s, o in rows]


def head_selection_rows() -> list[tuple[str, str, dict]]:
    """All heads, then the top 25 % of heads by omega, by sparsity, and the bottom 25 % by sparsity."""
    rows = [("heads", "all heads", {"head_top_fraction": 1.0})]
    for selection, label in (
        ("top_omega", "top 25% by omega"),
        ("top_sparsity", "top 25% by sparsity"),
        ("bottom_sparsity", "bottom 25% by sparsity"),
    ):
        rows.append(("heads", label, {"head_top_fraction": 0.25, "head_selection": selection}))
    return rows


def _methods(args: argparse.Namespace) -> list[Method]:
    options = {"gradskip": gradskip_overrides(args.gradskip)}
    engine = [Method(name, engine_method(name, **options.get(name, {}))) for name in args.methods]
    peers = [Method(name, peer_method(name, args.ig_steps), "peer") for name in available_peers(args.peers)]
    return engine + peers


def run_dataset(name: str, args: argparse.Namespace, checkpoint: Path | None) -> list[dict]:
    """Train or load, then score every method and every ablation on one dataset; print the tables."""
    datamodule = make_datamodule(name, args.data_root)
    model, facts = train_or_load(
        name,
        datamodule,
        checkpoint=checkpoint,
        epochs=args.epochs,
        seed=args.seed,
        max_train_batches=args.max_train_batches,
    )
    if args.save_checkpoints is not None and checkpoint is None:
        args.save_checkpoints.mkdir(parents=True, exist_ok=True)
        path = args.save_checkpoints / f"{name}.ckpt"
        model.trainer.save_checkpoint(path)
        print(f"saved {path}")
    subset = fixed_subset(datamodule, args.test_size, args.seed)
    images, targets = subset.images, subset.labels
    with torch.no_grad():
        accuracy = (model(images).argmax(dim=1) == targets).double().mean().item()
    common = {
        "dataset": name,
        "test_size": len(images),
        "accuracy": accuracy,
        "steps": args.steps,
        "gradskip_options": gradskip_overrides(args.gradskip),
        **facts,
    }
    print(
        f"\n== {name}: test-subset accuracy {accuracy:.3f} on {len(images)} images; "
        f"trained {facts['epochs']} epochs in {facts['train_seconds']:.0f} s"
        if checkpoint is None
        else f"\n== {name}: test-subset accuracy {accuracy:.3f} on {len(images)} images; loaded {checkpoint}"
    )
    few = slice(0, min(args.randomisation_images, len(images)))
    records = []
    print(report.method_header())
    for method in _methods(args):
        maps, ms = compute_maps(method.fn, model, images, targets, args.explain_batch)
        record = {
            **common,
            "table": "methods",
            "method": method.name,
            "kind": method.kind,
            "ms_per_map": ms,
            **score_maps(model, images, targets, maps, subset.masks, steps=args.steps, batch_size=args.metric_batch),
            **randomisation_similarity(method.fn, model, images[few], targets[few], args.seed),
            **cost(method.fn, model, images[:1], targets[:1]),
        }
        records.append(record)
        print(report.method_row(record), flush=True)
    if args.ablations:
        records += run_ablations(model, subset, args, common)
    for line in report.rank_lines(records):
        print(line)
    return records


def run_ablations(model: torch.nn.Module, subset: Subset, args: argparse.Namespace, common: dict) -> list[dict]:
    """Score GradSkip with one option changed at a time on the first ``args.ablation_size`` images of
    the subset; the default row is scored once (on those images) and repeated in every group."""
    subset = subset.head(args.ablation_size)
    common = {**common, "test_size": len(subset.images)}
    scored: dict[tuple, dict] = {}
    records = []
    print(report.ablation_header())
    base = gradskip_overrides(args.gradskip)
    for group, setting, options in ablations(base):
        key = tuple(sorted(options.items()))
        if key not in scored:
            maps, ms = compute_maps(
                engine_method("gradskip", **options), model, subset.images, subset.labels, args.explain_batch
            )
            scored[key] = {
                "ms_per_map": ms,
                **score_maps(
                    model,
                    subset.images,
                    subset.labels,
                    maps,
                    subset.masks,
                    steps=args.steps,
                    batch_size=args.metric_batch,
                ),
            }
        record = {
            **common,
            "table": "ablation",
            "group": group,
            "setting": setting,
            "options": options,
            "is_default": options == base,
            **scored[key],
        }
        records.append(record)
        print(report.ablation_row(record), flush=True)
    return records


def machine() -> dict:
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
    """Run every requested dataset; print the tables, optionally write them as markdown; return records."""
    checkpoints = _checkpoints(args.checkpoint)
    start, cpu_start = time.perf_counter(), time.process_time()
    records = []
    for name in args.datasets:
        if name == "bloodmnist" and args.data_root is None:
            print("note: bloodmnist skipped: pass --data-root, the folder holding bloodmnist.npz")
            continue
        records += run_dataset(name, args, checkpoints.get(name))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    facts = {**machine(), "cpu_seconds": cpu, "load_average": os.getloadavg()[0]}
    print(
        f"\nfaithfulness benchmark: {wall / 60:.1f} min wall, {cpu / 60:.1f} min CPU time (all threads), "
        f"on {facts['threads']} threads; load average now {facts['load_average']:.1f}"
    )
    if args.markdown is not None:
        command = "python -m gradskip_lightning.benchmarks " + " ".join(sys.argv[1:])
        report.write_markdown(args.markdown, records, command=command, machine=facts, wall_seconds=wall)
        print(f"wrote the tables into {args.markdown}")
    return records
