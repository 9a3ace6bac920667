"""The callback's epoch-end time against the training epoch, per part, on the main config's own settings.

Trains ``--epochs`` epochs of the main config (``configs/bloodmnist.yaml``: its model, data and
GradSkipCallback init args, read through :mod:`~benchmarks.configs`; W&B offline
in a temporary folder as the config logs, ``--logger csv`` for none) on one CPU device and reports,
per epoch, the training time (first training batch start to the last training batch end,
validation excluded), the whole epoch-end hook's wall time (explaining, scoring, rendering,
handing the row to the loggers, files) and their ratio, with the hook split into the parts the
callback times itself (its public ``GradSkipCallback.epoch_seconds``): maps (the explain calls and
the scores without perturbation, every method), scores (the perturbation scores: insertion,
deletion and violation forwards with their shared starts), discovery (when the callback has that
stage), report (building the epoch report and every sink: rendering, loggers, files) and other
(the rest: gathering, drift, monitoring).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger

from benchmarks.configs import callback_settings, config_settings
from gradskip_lightning import (
    DiscoveryStage,
    GradSkipCallback,
    MethodSettings,
    ProbeSettings,
    RenderSettings,
    ScoreSettings,
)
from gradskip_lightning.core.validation import required

#: The parts of the hook, in the table's order.
PARTS = ("maps", "scores", "discovery", "report", "other")


class _TrainTimer(Callback):
    """Seconds from each training epoch's first batch to its last (validation excluded)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._start = 0.0
        self._end = 0.0

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        self._end = time.perf_counter()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.seconds.append(self._end - self._start)


class HookTimer(Callback):
    """Wall seconds of the callbacks between ``start()`` and this one at each validation end, and the
    callback's own parts (``callback.epoch_seconds``, read after its hook: this one is listed after it)."""

    def __init__(self, callback: GradSkipCallback) -> None:
        self.seconds: list[float] = []
        self.parts: list[dict[str, float]] = []
        self.scored: list[list[str]] = []  # the methods whose perturbation scores ran, per epoch
        self._callback = callback
        self._start = 0.0

    def start(self) -> Callback:
        timer = self

        class _Start(Callback):
            def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
                timer._start = time.perf_counter()

        return _Start()

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking:
            self.seconds.append(time.perf_counter() - self._start)
            seconds = self._callback.epoch_seconds
            self.parts.append(split_parts(seconds))
            self.scored.append([name.removesuffix("/scores") for name in seconds if name.endswith("/scores")])


def split_parts(seconds: dict[str, float]) -> dict[str, float]:
    """The callback's ``epoch_seconds`` summed into :data:`PARTS` (without "other").

    >>> split_parts({"gradskip/maps": 1.0, "rollout/maps": 0.5, "gradskip/scores": 2.0, "report": 0.25, "total": 4})
    {'maps': 1.5, 'scores': 2.0, 'discovery': 0.0, 'report': 0.25}
    """
    parts = {part: 0.0 for part in PARTS if part != "other"}
    for name, value in seconds.items():
        part = name.rsplit("/", 1)[-1]
        if part in parts:
            parts[part] += value
    return parts


def _max_overhead(text: str) -> float | None:
    return None if text.lower() == "none" else float(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-root", default="../shared/data", help="folder holding bloodmnist.npz")
    parser.add_argument("--config", default="bloodmnist", help="configs/<name>.yaml: model, data, callback settings")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--logger", choices=("wandb", "csv"), default="wandb", help="W&B offline (as the config)")
    parser.add_argument("--num-probes", type=int, default=None, help="override the config's")
    parser.add_argument("--insertion-steps", type=int, default=None, help="override the config's")
    parser.add_argument("--compare", nargs="*", default=None, help="override the config's comparison methods")
    parser.add_argument(
        "--max-overhead",
        type=_max_overhead,
        default=argparse.SUPPRESS,
        help="override the config's time budget, a fraction of the training epoch ('none': off)",
    )
    parser.add_argument(
        "--discovery",
        type=int,
        default=0,
        metavar="PER_CLASS",
        help="run the discovery stage with this many probes per class (0: as the config; the main config runs it)",
    )
    parser.add_argument("--markdown", action="store_true", help="print the per-part table as Markdown")


def configured_callback(args: argparse.Namespace) -> GradSkipCallback:
    """The config's GradSkipCallback with the command line's overrides."""
    init = callback_settings(args.config)
    probes = dict(init.pop("probes", {}) or {})
    scores = dict(init.pop("scores", {}) or {})
    render = dict(init.pop("render", {}) or {})
    methods = dict(init.pop("methods", {}) or {})
    if args.num_probes is not None:
        probes["num_probes"] = args.num_probes
    if "max_overhead" in vars(args):
        probes["max_overhead"] = args.max_overhead
    if args.insertion_steps is not None:
        scores["insertion_steps"] = args.insertion_steps
    if args.compare is not None:
        methods["compare"] = args.compare
    init["progress"] = False
    discovery = init.pop("discovery", None)
    if args.discovery > 0:
        discovery = {**(discovery or {}), "probes_per_class": args.discovery}
    return GradSkipCallback(
        discovery=None if discovery is None else DiscoveryStage(**discovery),
        methods=MethodSettings(**methods),
        probes=ProbeSettings(**probes),
        scores=ScoreSettings(**scores),
        render=RenderSettings(**render),
        **init,
    )


def benchmark_logger(kind: str, folder: str) -> Logger:
    """The run's logger writing under ``folder``: ``"wandb"``, W&B offline (as the main config logs; its
    directories pointed at ``folder``), or ``"csv"``, Lightning's CSVLogger. Call ``wandb.finish()`` after a
    W&B fit."""
    if kind == "wandb":
        for variable in ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR"):
            os.environ[variable] = folder
        return WandbLogger(offline=True, save_dir=folder, project="gradskip-callback-benchmark")
    return CSVLogger(folder, name="bench")


def run(args: argparse.Namespace) -> list[dict]:
    from gradskip_lightning.data import BloodMNISTDataModule
    from gradskip_lightning.training.classifier import ViTClassifier

    seed_everything(0)
    callback = configured_callback(args)
    timer, hook = _TrainTimer(), HookTimer(callback)
    with tempfile.TemporaryDirectory() as folder:
        logger = benchmark_logger(args.logger, folder)
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
        model_args, data_args, _ = config_settings(args.config)
        data = BloodMNISTDataModule(**{**data_args, "root": args.data_root, "download": False})
        model = ViTClassifier(num_classes=data.num_classes, img_size=data.img_size, **model_args)
        trainer.fit(model, datamodule=data)
        if args.logger == "wandb":
            import wandb

            wandb.finish()
    settings = dict(
        num_probes=callback.probes.num_probes,
        insertion_steps=callback.scores.insertion_steps,
        compare=list(callback.methods.compare),
        max_overhead=callback.probes.max_overhead,
        metrics_batch_size=callback.scores.metrics_batch_size,
        logger=args.logger,
        train_images=len(required(data.train_dataset, "the training split")),
    )
    records = []
    epochs = zip(timer.seconds, hook.seconds, hook.parts, hook.scored)
    for epoch, (train_s, hook_s, seconds, scored) in enumerate(epochs):
        split = {part: seconds.get(part, 0.0) for part in PARTS if part != "other"}
        split["other"] = max(0.0, hook_s - sum(split.values()))
        record = dict(
            epoch=epoch, train_epoch_s=train_s, hook_s=hook_s, ratio=hook_s / train_s, parts=split, scored=scored
        )
        records.append({**record, **settings})
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in record.items() if k != "parts"})
    load = os.getloadavg()
    summary = summarise(records)
    print(
        f"callback: median ratio {100 * summary['median_ratio']:.2f} % of the training epoch "
        f"(mean {100 * summary['mean_ratio']:.2f} %) over {len(records)} epochs; the fit: "
        f"{100 * summary['fit_ratio']:.2f} % of its training time (every epoch's callback seconds over its training "
        f"seconds, epoch 0 included); settings {settings}; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(markdown_table(records) if args.markdown else summary)
    return records


def summarise(records: list[dict]) -> dict[str, Any]:
    """Median and mean ratio, the fit's (summed callback over summed training seconds), and each part's median
    seconds and share of the median training epoch."""
    train = statistics.median(r["train_epoch_s"] for r in records)
    return dict(
        median_ratio=statistics.median(r["ratio"] for r in records),
        mean_ratio=statistics.mean(r["ratio"] for r in records),
        fit_ratio=sum(r["hook_s"] for r in records) / sum(r["train_epoch_s"] for r in records),
        train_epoch_s=train,
        hook_s=statistics.median(r["hook_s"] for r in records),
        parts={part: statistics.median(r["parts"][part] for r in records) for part in PARTS},
    )


def markdown_table(records: list[dict]) -> str:
    """The per-part table: seconds per epoch and share of the training epoch, per epoch and the median; and the
    methods whose perturbation scores ran at each epoch end."""
    head = "| part | " + " | ".join(f"epoch {r['epoch']} s" for r in records) + " | median s | % of training epoch |"
    rows = [head, "|---|" + "---:|" * (len(records) + 2)]
    summary = summarise(records)
    for part in PARTS:
        cells = " | ".join(f"{r['parts'][part]:.3f}" for r in records)
        median = summary["parts"][part]
        rows.append(f"| {part} | {cells} | {median:.3f} | {100 * median / summary['train_epoch_s']:.2f} |")
    hooks = " | ".join(f"{r['hook_s']:.3f}" for r in records)
    trains = " | ".join(f"{r['train_epoch_s']:.2f}" for r in records)
    ratios = " | ".join(f"{100 * r['ratio']:.2f} %" for r in records)
    rows.append(f"| **callback** | {hooks} | {summary['hook_s']:.3f} | **{100 * summary['median_ratio']:.2f}** |")
    rows.append(f"| training epoch | {trains} | {summary['train_epoch_s']:.2f} | |")
    scored = " | ".join(", ".join(r["scored"]) or "-" for r in records)
    rows.append(f"| scored methods | {scored} | | |")
    fit = f"fit: {100 * summary['fit_ratio']:.2f} %"
    rows.append(f"| ratio | {ratios} | {100 * summary['median_ratio']:.2f} % | {fit} |")
    return "\n".join(rows)
