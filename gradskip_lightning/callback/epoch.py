"""One epoch's explanation, isolated from training, and its scalars made monitorable.

Training does not see it: RNG states (torch, CUDA, numpy, Python) and every module's train/eval
mode are restored, no parameter ``.grad`` is written, and a failure (out of memory, non-finite
maps) is returned as a message instead of raised.
"""

from __future__ import annotations

import math

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.seed import isolate_rng
from torch import Tensor

from gradskip_lightning.callback.keys import key
from gradskip_lightning.callback.output.report import build_report
from gradskip_lightning.callback.output.sinks import EpochReport, ProbeSheet, Sink
from gradskip_lightning.callback.probes import ProbeSet
from gradskip_lightning.callback.scoring.compute import EpochWork, explain_probes
from gradskip_lightning.callback.scoring.distributed import gather_records, shard_positions
from gradskip_lightning.callback.scoring.record import ProbeRecord
from gradskip_lightning.callback.scoring.transplant import Transplant
from gradskip_lightning.callback.settings import RenderSettings, ScoreSettings
from gradskip_lightning.core.adapter import eval_mode
from gradskip_lightning.core.explanation import ModelExplainer
from gradskip_lightning.metrics.perturbation import Activation

__all__ = [
    "explain_isolated",
    "full_report",
    "invalidate",
    "log_to_sinks",
    "logged_step",
    "monitor",
    "skipped_report",
]


def explain_isolated(
    pl_module: LightningModule,
    explainers: dict[str, ModelExplainer],
    probes: ProbeSet,
    settings: ScoreSettings,
    *,
    batch_size: int,
    transplant: Transplant | None,
    activation: Activation,
    progress: bool,
    work: EpochWork | None = None,
) -> tuple[dict[str, ProbeRecord], str | None]:
    """Explain this rank's shard of ``probes`` with every explainer (the first also gives head
    statistics) and gather the shards: (method -> record of all P probes, None), or ({}, the error)
    when any rank failed. Every rank must call it (see :func:`~.distributed.gather_records`).
    ``work`` (one per epoch end) shares the perturbation starts between the methods."""
    shard = shard_positions(len(probes))
    records: dict[str, ProbeRecord] = {}
    error = None
    first = next(iter(explainers))
    work = EpochWork() if work is None else work
    with isolate_rng(include_cuda=True), torch.inference_mode(False):
        try:
            part = probes.subset(shard.positions)
            part.images = part.images.clone()  # a normal tensor, even under inference mode
            with eval_mode(pl_module):  # every module's own mode back afterwards
                for name, explainer in explainers.items():
                    records[name] = explain_probes(
                        explainer,
                        part,
                        settings,
                        batch_size=batch_size,
                        transplant=transplant,
                        heads=name == first,
                        activation=activation,
                        progress=progress,
                        agree=True,
                        work=work,
                    )
        except Exception as err:  # noqa: BLE001 - isolation: torch.OutOfMemoryError, non-finite maps, ...
            error, records = f"{type(err).__name__}: {err}", {}
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        return gather_records(records, shard, len(probes), error)


def monitor(trainer: Trainer, scalars: dict[str, float]) -> None:
    """Make the finite ``scalars`` monitorable by EarlyStopping and co. (``trainer.callback_metrics``)
    on every rank, not sent to the loggers; a NaN one is left out (an earlier epoch's value removed).

    Not ``pl_module.log(..., logger=False)``: under DDP Lightning then warns once per key to use
    ``sync_dist=True`` (the values are already equal on every rank), and ``sync_dist`` would add a
    collective per key at points ranks need not share (e.g. rank zero's progress bar); ``on_fit_end``
    allows no ``log`` at all.
    """
    metrics = trainer.callback_metrics
    for name, value in scalars.items():
        if math.isfinite(value):
            metrics[name] = torch.tensor(value, dtype=torch.float32)
        else:
            metrics.pop(name, None)


def invalidate(trainer: Trainer, names: set[str]) -> None:
    """Set the callback's monitored ``names`` to NaN in ``trainer.callback_metrics``: a skipped epoch
    has no score, and a NaN one is what monitors act on (``EarlyStopping(check_finite=True)`` stops,
    ``ModelCheckpoint`` ranks it worst), where a removed key would make them raise and an earlier
    epoch's value would be taken for this one's."""
    metrics = trainer.callback_metrics
    for name in names:
        metrics[name] = torch.tensor(float("nan"))


def logged_step(trainer: Trainer) -> int:
    """The step Lightning logs its epoch metrics at (no public attribute holds it)."""
    return getattr(trainer.fit_loop.epoch_loop, "_batches_that_stepped", trainer.global_step)


def full_report(
    records: dict[str, ProbeRecord],
    method: str,
    drift: dict[str, Tensor],
    sheet: ProbeSheet,
    scalars: dict[str, float],
    trainer: Trainer,
    epoch: int,
    prefix: str,
    settings: RenderSettings,
    save: bool,
) -> EpochReport:
    """The epoch's full report (rank zero; :func:`~.report.build_report`); if building it fails,
    one with the scalars only, and a warning."""
    step = logged_step(trainer)
    try:
        return build_report(
            records, method, drift, sheet, scalars, epoch=epoch, step=step, prefix=prefix, settings=settings, save=save
        )
    except Exception as err:  # noqa: BLE001 - rank zero only, no collective inside: safe to go on alone
        rank_zero_warn(
            f"GradSkipCallback: the images and maps files of epoch {epoch} were not built, its scalars are "
            f"logged. {type(err).__name__}: {err}"
        )
        return EpochReport(epoch=epoch, step=step, scalars=dict(scalars), method=method)


def log_to_sinks(sinks: list[Sink], report: EpochReport, sheet: ProbeSheet) -> None:
    """Hand ``report`` to every sink; a failing sink warns, naming itself, and the others still write."""
    for sink in sinks:
        try:
            sink.log(report, sheet)
        except Exception as err:  # noqa: BLE001
            rank_zero_warn(
                f"GradSkipCallback: {type(sink).__name__} failed at epoch {report.epoch}, the other outputs are "
                f"written. {type(err).__name__}: {err}"
            )


def skipped_report(trainer: Trainer, epoch: int, prefix: str, error: str, monitored: set[str]) -> EpochReport | None:
    """A skipped epoch: one warning, the callback's ``monitored`` scores NaN in ``callback_metrics``,
    ``<prefix>skipped`` = 1, and (rank zero) the report of those scalars."""
    rank_zero_warn(f"GradSkipCallback: explanation of epoch {epoch} skipped, training goes on. {error}")
    invalidate(trainer, monitored)
    scalars = {key(None, prefix, "epoch"): float(epoch), key(None, prefix, "skipped"): 1.0}
    monitor(trainer, scalars)
    return EpochReport(epoch=epoch, step=logged_step(trainer), scalars=scalars) if trainer.is_global_zero else None
