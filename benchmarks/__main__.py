"""Command line entry point: ``python -m benchmarks SUBCOMMAND [--json PATH]``."""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

SUBCOMMANDS = {
    "cost": "FLOPs and CPU milliseconds per map of every method",
    "metrics": "insertion/deletion throughput and forward calls",
    "callback": "the callback's epoch-end time against one training epoch",
    "stage": "the discovery stage's parts on kept weights: every recipient against the first look, in one run",
    "scaling": "how the callback's epoch-end time grows with the probes, the classes, the model and the image size",
    "faithfulness": "every method scored over training seeds, with intervals, paired differences and ablations",
    "gpu": "checks that need a CUDA device: batch = singles, mixed-precision fits, OOM skipped, ms per map",
    "coverage": "which timm, torchvision and HF ViTs and timm Swins are accepted; properties on small ones",
    "shortcut": "do the maps flag a spurious tag (AUROC against a clean model), and how many epochs early",
    "discovery": "find a shortcut nobody named: per-class maps and hotspot transplants, AUROC and false alarms",
    "properties": "global property transplants (colour, brightness, sharpness, noise, compression, tone, signature): "
    "shortcuts found, false alarms",
    "segmentation": "SegFormer maps of GradSkip, the baselines and Grad-CAM against planted squares, over seeds",
}


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m benchmarks``: one subparser per :data:`SUBCOMMANDS` entry, its module's options."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in SUBCOMMANDS.items():
        module = importlib.import_module(f"benchmarks.{name}")
        sub_parser = sub.add_parser(name, help=help_text, description=module.__doc__)
        sub_parser.add_argument("--json", type=Path, default=None, help="also write the records as JSON here")
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(module=module)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (None: the command line), run the subcommand, write ``--json``."""
    args = build_parser().parse_args(argv)
    records = args.module.run(args)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(records, indent=2))
        print(f"wrote {len(records)} record(s) to {args.json}")


if __name__ == "__main__":
    main()
