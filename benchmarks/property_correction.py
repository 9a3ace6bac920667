"""Does :class:`~gradskip_lightning.ShortcutCorrection` unlearn a global property shortcut? (``--correction``)

For each dataset, seed and shortcut variant of the properties benchmark (a colour cast, a darkening, ...
on the dataset's shortcut class; ``clean`` is skipped), two trainings from the same initial weights and
batch order: the shortcut model, and the same with the callback's discovery stage at its defaults and a
``ShortcutCorrection`` following it (the discovery benchmark's :func:`~.discovery.correction.correction_callbacks`).
After every training epoch: the spurious score (the shortcut given to the other classes' test images:
share predicted as the class) and the accuracy on the test split without the shortcut.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from typing_extensions import override

from gradskip_lightning.data.base import ImageClassificationDataModule, LabelledDataset

from .discovery.correction import CORRECTION_MARGIN, corrected, correction_callbacks
from .discovery.trace import accuracy, predicted_share
from .discovery.variants import DATASETS, make_datamodule
from .runs import command_line
from .tables import table
from .training import train_or_load

#: (dataset, variant, seed, data root) -> the variant's datamodule and the other classes' test images carrying
#: its shortcut (the properties benchmark's ``shortcut_datamodule``).
ShortcutData = Callable[[str, Any, int, Path | None], tuple[ImageClassificationDataModule, LabelledDataset | None]]


@dataclass(frozen=True)
class CorrectionRecord:
    """One model after one training epoch: its spurious score and clean accuracy, and what its correction
    corrected ("" for the shortcut model, "none" if nothing)."""

    dataset: str
    seed: int
    variant: str
    model: str
    epoch: int
    spurious_score: float
    clean_accuracy: float
    corrected: str


class EpochScores(Callback):
    """After every training epoch: the spurious score on ``transplanted`` (other classes' images carrying the
    shortcut of class ``target``) and the accuracy on ``clean`` (the test split without it), in eval mode."""

    def __init__(self, transplanted: LabelledDataset, clean: LabelledDataset, target: int) -> None:
        super().__init__()
        self.transplanted, self.clean, self.target = transplanted, clean, target
        self.scores: list[tuple[float, float]] = []

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        training = pl_module.training
        pl_module.eval()
        try:
            with torch.no_grad():
                score = predicted_share(pl_module, self.transplanted, self.target)
                self.scores.append((score, accuracy(pl_module, self.clean)))
        finally:
            pl_module.train(training)


def measure(
    data: ShortcutData, dataset: str, variant: str, seed: int, corrects: bool, args: argparse.Namespace
) -> list[CorrectionRecord]:
    """Train one model of ``variant`` (with the discovery stage and a correction when ``corrects``), scored
    after every epoch."""
    datamodule, transplanted = data(dataset, variant, seed, args.data_root)
    if transplanted is None:
        raise ValueError(f"variant {variant!r} has no shortcut to correct")
    clean = make_datamodule(dataset, "clean", seed, args.data_root).make_split("test", "none")
    scores = EpochScores(transplanted, clean, DATASETS[dataset].target)
    callbacks: list[Callback] = [scores]
    correction = None
    if corrects:
        erase = not args.correction_paste_only
        followed, correction = correction_callbacks(args.probes_per_class, args.correction_p, CORRECTION_MARGIN, erase)
        callbacks += followed
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:  # the GradSkipCallback writes its files there
        train_or_load(
            DATASETS[dataset].config, datamodule, checkpoint=None, epochs=args.epochs, seed=seed,
            max_train_batches=args.max_train_batches, callbacks=callbacks, root=Path(root),
        )  # fmt: skip
    what = "" if correction is None else corrected(correction)
    model = "corrected" if corrects else variant
    records = [
        CorrectionRecord(dataset, seed, variant, model, epoch + 1, score, clean_accuracy, what)
        for epoch, (score, clean_accuracy) in enumerate(scores.scores)
    ]
    trace = ", ".join(f"{r.spurious_score:.2f}" for r in records)
    print(
        f"{dataset} seed {seed} {model}: spurious score after each epoch {trace}, clean accuracy "
        f"{records[-1].clean_accuracy:.3f}{', corrected: ' + what if what else ''}, "
        f"{time.perf_counter() - start:.0f} s",
        flush=True,
    )
    return records


def report(records: list[CorrectionRecord], command: str) -> str:
    """A markdown table: per dataset, seed and model the spurious score after each epoch and the last clean accuracy."""
    rows = []
    for dataset, seed, variant in sorted({(r.dataset, r.seed, r.variant) for r in records}):
        for model in (variant, "corrected"):
            mine = sorted(
                (r for r in records if (r.dataset, r.seed, r.variant, r.model) == (dataset, seed, variant, model)),
                key=lambda r: r.epoch,
            )
            if mine:
                trace = ", ".join(f"{r.spurious_score:.2f}" for r in mine)
                rows.append([dataset, str(seed), model, mine[-1].corrected or "-", trace,
                             f"{mine[-1].clean_accuracy:.3f}"])  # fmt: skip
    header = ["dataset", "seed", "model", "corrected", "spurious score after each epoch", "clean accuracy"]
    return "\n".join([f"Command: `{command}`", "", *table(header, rows), ""])


def run(args: argparse.Namespace, data: ShortcutData) -> list[dict[str, Any]]:
    """Every dataset, seed and shortcut variant (``data`` builds them), plain and corrected; print the table;
    return the records."""
    records: list[CorrectionRecord] = []
    start = time.perf_counter()
    for dataset in args.datasets:
        for seed in args.seeds:
            for variant in [v for v in args.variants if v != "clean"]:
                for corrects in (False, True):
                    records += measure(data, dataset, variant, seed, corrects, args)
    command = command_line()
    print(report(records, command))
    print(f"wall {(time.perf_counter() - start) / 60:.1f} min")
    rows = [asdict(r) for r in records]
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": command, "records": rows}))
        print(f"wrote {len(rows)} records to {args.json}")
        args.json = None
    return rows
