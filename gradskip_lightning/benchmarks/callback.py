"""The callback's epoch-end time against one training epoch (BloodMNIST, as configs/bloodmnist.yaml).

Trains ``--epochs`` epochs of the tiny ViT with GradSkipCallback attached (CSV logger, no W&B, so
no upload or media time is counted) and reports, per epoch, the training time (first training
batch start to the last training batch end, validation excluded), the callback's own
``gradskip/time_s`` (explain, score, render, write the npz), the whole hook's wall time (that plus
handing the row to the loggers and writing the PNGs), and ratio = hook time / training time.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

from lightning.pytorch import Callback, Trainer, seed_everything
from lightning.pytorch.loggers import CSVLogger

from gradskip_lightning.benchmarks.configs import config_settings
from gradskip_lightning.callback import DiscoveryStage, GradSkipCallback, ProbeSettings, ScoreSettings
from gradskip_lightning.validation import required


class _TrainTimer(Callback):
    """Seconds from each training epoch's first batch to its last (validation excluded)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._start = 0.0
        self._end = 0.0

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._end = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.seconds.append(self._end - self._start)


class _HookTimer(Callback):
    """Wall seconds of the callbacks between ``start`` and ``stop`` at each validation end (logging included)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._start = 0.0

    def start(self) -> Callback:
        timer = self

        class _Start(Callback):
            def on_validation_epoch_end(self, trainer, pl_module) -> None:
                timer._start = time.perf_counter()

        return _Start()

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self.seconds.append(time.perf_counter() - self._start)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-root", default="../shared/data", help="folder holding bloodmnist.npz")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--num-probes", type=int, default=32)
    parser.add_argument("--insertion-steps", type=int, default=16)
    parser.add_argument("--compare", nargs="*", default=[], help="comparison methods (default: none)")
    parser.add_argument(
        "--discovery",
        type=int,
        default=0,
        metavar="PER_CLASS",
        help="run the discovery stage with this many probes per class",
    )


def run(args: argparse.Namespace) -> list[dict]:
    from gradskip_lightning.data import BloodMNISTDataModule
    from gradskip_lightning.model import ViTClassifier

    seed_everything(0)
    timer, hook = _TrainTimer(), _HookTimer()
    callback = GradSkipCallback(
        probes=ProbeSettings(num_probes=args.num_probes),
        scores=ScoreSettings(insertion_steps=args.insertion_steps),
        compare_methods=args.compare,
        discovery=DiscoveryStage(enabled=args.discovery > 0, probes_per_class=max(1, args.discovery)),
        progress=False,
    )
    with tempfile.TemporaryDirectory() as folder:
        logger = CSVLogger(folder, name="bench")
        trainer = Trainer(
            max_epochs=args.epochs,
            accelerator="cpu",
            devices=1,
            logger=logger,
            callbacks=[timer, hook.start(), callback, hook],
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            default_root_dir=folder,
        )
        model_args, data_args, _ = config_settings("bloodmnist")
        data = BloodMNISTDataModule(**{**data_args, "root": args.data_root, "download": False})
        model = ViTClassifier(num_classes=data.num_classes, img_size=data.img_size, **model_args)
        trainer.fit(model, datamodule=data)
        with open(Path(logger.log_dir) / "metrics.csv") as handle:
            rows = [r for r in csv.DictReader(handle) if r.get("gradskip/time_s")]
        callback_s = [float(r["gradskip/time_s"]) for r in rows]
        discovery_s = [float(r.get("discovery/gradskip/time_s") or 0.0) for r in rows]
    records = []
    for epoch, (train_s, cb_s, hook_s, disc_s) in enumerate(zip(timer.seconds, callback_s, hook.seconds, discovery_s)):
        record = dict(
            epoch=epoch,
            train_epoch_s=round(train_s, 3),
            callback_time_s=round(cb_s, 3),
            hook_s=round(hook_s, 3),
            ratio=round(hook_s / train_s, 4),
            discovery_s=round(disc_s, 3),
            discovery_ratio=round(disc_s / train_s, 4),
            num_probes=args.num_probes,
            insertion_steps=args.insertion_steps,
            compare=list(args.compare),
            discovery_per_class=args.discovery,
            train_images=len(required(data.train_dataset, "the training split")),
        )
        records.append(record)
        print(record)
    return records
