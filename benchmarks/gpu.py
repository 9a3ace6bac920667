"""Checks only a CUDA device can run, as one script (under 5 minutes on one H200).

- ``batch_equals_singles``: a batch's maps equal one call per image on CUDA (tiny ViT and ViT-B/16,
  every deterministic method, TF32 off), max relative difference <= ``--tolerance``;
- ``mixed_precision_fit``: a few ``bf16-mixed`` and ``16-mixed`` training steps of a tiny ViT on
  planted shapes with the GradSkipCallback and a CSV logger; maps written for every epoch, finite;
- ``oom_skipped``: a real CUDA out-of-memory error inside the explain path (an impossible
  allocation before each explain call) skips the epoch's explanation with a warning and training
  finishes;
- ``ms_per_map``: CUDA milliseconds per map of ViT-B/16 (random init) at batch 32, GradSkip and
  Chefer, synchronised, with the peak memory.

Every record holds ``check``, ``passed`` (None when not run), its figures and ``seconds``.
Without a CUDA device nothing runs: each record says so (``passed=None``, ``skipped``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, get_args
from unittest import mock

import numpy as np
import timm
import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.loggers import CSVLogger

from gradskip_lightning import GradSkipCallback, ProbeSettings, ScoreSettings
from gradskip_lightning.data import PlantedShapesDataModule
from gradskip_lightning.families.timm_vit import TimmViTExplainer
from gradskip_lightning.methods import PASS_METHODS
from gradskip_lightning.training.classifier import ViTClassifier

CheckName = Literal["batch_equals_singles", "mixed_precision_fit", "oom_skipped", "ms_per_map"]
ModelName = Literal["vit_tiny_test", "vit_base_patch16_224"]
Precision = Literal["bf16-mixed", "16-mixed"]

#: timm.create_model arguments (random init); "vit_tiny_test" is the 2-block ViT of the unit tests.
MODELS: dict[str, dict] = {
    "vit_tiny_test": dict(
        model_name="vit_tiny_patch16_224", num_classes=4, img_size=32, patch_size=8, depth=2, num_heads=3, embed_dim=48
    ),
    "vit_base_patch16_224": dict(model_name="vit_base_patch16_224"),
}
#: Methods whose maps are a function of the image and target only ("random" draws afresh per call).
DETERMINISTIC_METHODS = tuple(method for method in PASS_METHODS.names if method != "random")
#: Bytes no device holds (256 TiB): allocating them raises torch.OutOfMemoryError on CUDA.
IMPOSSIBLE_BYTES = 1 << 48
NO_CUDA = "No CUDA device is present: the GPU checks were not run. Run this command on a machine with a GPU."


def build_vit(name: ModelName, device: str | torch.device) -> Any:
    """A randomly initialised timm ViT from :data:`MODELS`, in eval mode on ``device``."""
    torch.manual_seed(0)
    options = dict(MODELS[name])
    return timm.create_model(options.pop("model_name"), pretrained=False, **options).eval().to(device)


def synchronize(device: torch.device) -> None:
    """Wait for queued CUDA work (no-op elsewhere), so wall times cover it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def full_float32() -> Iterator[None]:
    """TF32 off for matmuls and convolutions inside the block (restored after)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def check_batch_equals_singles(
    device: str | torch.device, model: ModelName = "vit_tiny_test", batch_size: int = 4, tolerance: float = 1e-4
) -> dict:
    """Maps of one batched call against one call per image, for every deterministic method.

    Passed when, for each method, max |batch - singles| / max |batch| <= ``tolerance``.
    """
    start, device = time.perf_counter(), torch.device(device)
    vit = build_vit(model, device)
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(batch_size, 3, *vit.patch_embed.img_size, generator=generator).to(device)
    targets = torch.randint(0, vit.num_classes, (batch_size,), generator=generator).to(device)
    relative = {}
    with full_float32():
        for method in DETERMINISTIC_METHODS:
            explainer = TimmViTExplainer(vit, method)
            batch = explainer.explain(images, targets).maps
            singles = torch.cat(
                [explainer.explain(images[i : i + 1], targets[i : i + 1]).maps for i in range(batch_size)]
            )
            relative[method] = float((batch - singles).abs().max() / batch.abs().max())
    return {
        "check": "batch_equals_singles",
        "passed": all(value <= tolerance for value in relative.values()),
        "model": model,
        "device": str(device),
        "batch_size": batch_size,
        "tolerance": tolerance,
        "max_relative_difference": relative,
        "seconds": time.perf_counter() - start,
    }


def _tiny_fit(
    device: torch.device, root: Path, precision: Precision | Literal["32-true"], name: str, epochs: int = 2
) -> tuple[Trainer, CSVLogger, list[warnings.WarningMessage]]:
    """Fit a tiny ViTClassifier on planted shapes (4 steps an epoch) with the GradSkipCallback and a CSV logger."""
    seed_everything(0, workers=True)
    data = PlantedShapesDataModule(num_classes=4, img_size=32, train_size=64, val_size=32, test_size=8, batch_size=16)
    module = ViTClassifier(**MODELS["vit_tiny_test"])
    logger = CSVLogger(save_dir=str(root), name=name)
    trainer = Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        precision=precision,
        max_epochs=epochs,
        logger=logger,
        callbacks=[
            GradSkipCallback(
                probes=ProbeSettings(num_probes=8), scores=ScoreSettings(insertion_steps=4), progress=False
            )
        ],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, datamodule=data)
    return trainer, logger, caught


def _map_files(logger: CSVLogger) -> list[Path]:
    return sorted(Path(logger.log_dir).glob("gradskip/maps/epoch_*.npz"))


def check_mixed_precision_fit(device: str | torch.device, precision: Precision, root: Path, epochs: int = 2) -> dict:
    """A short fit under ``precision``; passed when every epoch's maps were written and are finite."""
    start, device = time.perf_counter(), torch.device(device)
    trainer, logger, _ = _tiny_fit(device, root, precision, name=precision, epochs=epochs)
    files = _map_files(logger)
    finite = [bool(np.isfinite(np.load(path)["maps"]).all()) for path in files]
    loss = float(trainer.callback_metrics.get("train/loss", torch.tensor(float("nan"))))
    return {
        "check": "mixed_precision_fit",
        "passed": bool(trainer.state.finished and len(files) == epochs and all(finite) and np.isfinite(loss)),
        "precision": precision,
        "device": str(device),
        "steps": trainer.global_step,
        "map_files": [path.name for path in files],
        "maps_finite": finite,
        "train_loss": loss,
        "seconds": time.perf_counter() - start,
    }


@contextmanager
def impossible_allocation_before_explain(device: torch.device) -> Iterator[None]:
    """Every ``TimmViTExplainer.explain`` call first allocates :data:`IMPOSSIBLE_BYTES` on ``device`` (and fails)."""
    explain = TimmViTExplainer.explain

    def explain_after_allocation(self, images, targets=None):
        torch.empty(IMPOSSIBLE_BYTES, dtype=torch.uint8, device=device)
        return explain(self, images, targets)

    with mock.patch.object(TimmViTExplainer, "explain", explain_after_allocation):
        yield


def check_oom_skipped(device: str | torch.device, root: Path, epochs: int = 2) -> dict:
    """Out of memory in every explain call: passed when the fit finishes, every epoch's explanation is
    skipped with a warning (the callback retries at the epoch's later hooks) and no maps are written.

    On CUDA the warning must name ``OutOfMemoryError``; elsewhere the allocator's RuntimeError.
    """
    start, device = time.perf_counter(), torch.device(device)
    with impossible_allocation_before_explain(device):
        trainer, logger, caught = _tiny_fit(device, root, "32-true", name="oom", epochs=epochs)
    skipped = sorted({str(w.message) for w in caught if "skipped, training goes on" in str(w.message)})
    error_name = "OutOfMemoryError" if device.type == "cuda" else "RuntimeError"
    return {
        "check": "oom_skipped",
        "passed": bool(
            trainer.state.finished
            and trainer.global_step == 4 * epochs
            and all(any(f"epoch {epoch} skipped" in message for message in skipped) for epoch in range(epochs))
            and all(error_name in message for message in skipped)
            and not _map_files(logger)
        ),
        "device": str(device),
        "steps": trainer.global_step,
        "warnings": [message[:300] for message in skipped],
        "memory_allocated_after_mib": torch.cuda.memory_allocated(device) / 2**20 if device.type == "cuda" else None,
        "seconds": time.perf_counter() - start,
    }


def check_ms_per_map(
    device: str | torch.device,
    methods: tuple[str, ...] = ("gradskip", "chefer"),
    model: ModelName = "vit_base_patch16_224",
    batch_size: int = 32,
    repeats: int = 3,
) -> list[dict]:
    """Milliseconds per map (synchronised, after one warm-up call) per method; passed when the maps are finite."""
    device = torch.device(device)
    vit = build_vit(model, device)
    images = torch.randn(batch_size, 3, *vit.patch_embed.img_size, generator=torch.Generator().manual_seed(0))
    images = images.to(device)
    records = []
    for method in methods:
        start = time.perf_counter()
        explainer = TimmViTExplainer(vit, method)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        maps = explainer.explain(images).maps
        synchronize(device)
        timed = time.perf_counter()
        for _ in range(repeats):
            explainer.explain(images)
        synchronize(device)
        elapsed = time.perf_counter() - timed
        records.append(
            {
                "check": "ms_per_map",
                "passed": bool(torch.isfinite(maps).all()),
                "model": model,
                "method": method,
                "device": str(device),
                "batch_size": batch_size,
                "ms_per_map": elapsed * 1000.0 / (repeats * batch_size),
                "peak_memory_mib": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
                "seconds": time.perf_counter() - start,
            }
        )
    return records


def _all_checks(device: torch.device, root: Path, tolerance: float) -> dict[CheckName, Callable[[], list[dict]]]:
    return {
        "batch_equals_singles": lambda: [
            check_batch_equals_singles(device, model, tolerance=tolerance) for model in get_args(ModelName)
        ],
        "mixed_precision_fit": lambda: [
            check_mixed_precision_fit(device, precision, root) for precision in get_args(Precision)
        ],
        "oom_skipped": lambda: [check_oom_skipped(device, root)],
        "ms_per_map": lambda: check_ms_per_map(device),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    checks = list(get_args(CheckName))
    parser.add_argument("--checks", nargs="+", default=checks, choices=checks, help="checks to run (default: all)")
    parser.add_argument(
        "--tolerance", type=float, default=1e-4, help="max relative batch-vs-singles map difference (TF32 off)"
    )


def run(args: argparse.Namespace) -> list[dict]:
    if not torch.cuda.is_available():
        print(NO_CUDA)
        return [{"check": name, "passed": None, "skipped": "no CUDA device", "seconds": 0.0} for name in args.checks]
    device = torch.device("cuda")
    print(f"GPU checks on {torch.cuda.get_device_name(device)} ...", flush=True)
    records = []
    with tempfile.TemporaryDirectory(prefix="gradskip_gpu_") as folder:
        checks = _all_checks(device, Path(folder), args.tolerance)
        for name in args.checks:
            for record in checks[name]():
                records.append(record)
                figures = {k: v for k, v in record.items() if k not in ("check", "passed", "seconds")}
                verdict = "ok" if record["passed"] else "FAILED"
                print(f"{name:22s} {verdict:6s} {record['seconds']:6.1f} s  {figures}", flush=True)
    failed = [r["check"] for r in records if not r["passed"]]
    print(f"FAILED: {failed}" if failed else f"all {len(records)} checks passed")
    return records
