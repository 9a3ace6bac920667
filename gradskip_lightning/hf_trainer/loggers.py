"""Where a ``transformers.Trainer``'s explained epochs go, as its ``report_to`` says.

Always the maps files (``<output_dir>/<folder>/maps``, read by ``python -m gradskip_lightning.timeline``)
and the images as PNGs (``<output_dir>/<folder>/images``); with ``"wandb"`` one row per explained
epoch in the run the Trainer's ``WandbCallback`` started (``wandb.run``), charted against
``train/global_step`` as the Trainer's own rows are, and the maps as an artifact at the end of
training; with ``"tensorboard"`` images, histograms and scalars; with ``"mlflow"`` the scalars at the
Trainer's ``global_step``, the images at the epoch and the maps as artifacts, in the run the Trainer's
``MLflowCallback`` started (``mlflow.active_run()``). The loggers here give the sinks of
:mod:`gradskip_lightning.engine.output.sinks` the interfaces Lightning's loggers have.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning.pytorch.utilities import rank_zero_warn

from gradskip_lightning.engine.output.sinks import MLflowSink, Sink, TensorBoardSink, finish_sinks, ordered_sinks

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["STEP_KEY", "RunMlflow", "RunWandb", "TensorBoardFolder", "TrainerOutputs", "trainer_outputs"]

#: The x-axis the Trainer's ``WandbCallback`` defines for every key (``define_metric(step_metric=...)``).
STEP_KEY = "train/global_step"
#: ``report_to`` integrations the callback writes to; the others get nothing from it.
WRITTEN = ("wandb", "tensorboard", "mlflow")


@dataclass
class RunWandb:
    """A W&B run as the sinks' :class:`~gradskip_lightning.engine.output.sinks.WandbRunLogger`:
    each row carries the Trainer's ``train/global_step`` (W&B's own step counts rows)."""

    run: Any  # a wandb.Run

    @property
    def experiment(self) -> Any:
        return self.run

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        self.run.log({**metrics, STEP_KEY: step})


@dataclass
class RunMlflow:
    """An MLflow run (by id, through an ``MlflowClient`` of the current tracking URI) as the sinks'
    :class:`~gradskip_lightning.engine.output.sinks.MLflowSink` logger and scalar logger: Lightning's
    ``MLFlowLogger`` interface (``experiment``, ``run_id``, ``log_metrics``), keys cleaned as it cleans them."""

    run_id: str
    experiment: Any  # an mlflow.MlflowClient

    @classmethod
    def active(cls) -> RunMlflow | None:
        """The run ``mlflow.active_run()`` names (the Trainer's ``MLflowCallback`` starts it), or None."""
        import mlflow

        run = mlflow.active_run()
        return None if run is None else cls(run.info.run_id, mlflow.MlflowClient(mlflow.get_tracking_uri()))

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        import time

        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        cleaned = [Metric(re.sub(r"[^a-zA-Z0-9_/. -]+", "", k), float(v), stamp, step or 0) for k, v in metrics.items()]
        self.experiment.log_batch(self.run_id, metrics=cleaned, synchronous=True)

    def save(self) -> None:
        pass


@dataclass
class TensorBoardFolder:
    """A ``SummaryWriter`` in ``folder`` (opened on first use) as the sinks' writer and scalar logger."""

    folder: Path
    _writer: SummaryWriter | None = field(default=None, init=False, repr=False)

    @property
    def experiment(self) -> SummaryWriter:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.folder))
        return self._writer

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        for name, value in metrics.items():
            self.experiment.add_scalar(name, value, step)

    def save(self) -> None:
        self.experiment.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


@dataclass
class TrainerOutputs:
    """The sinks of one training run (rank zero) and the W&B run its alerts go to."""

    sinks: list[Sink]
    wandb_run: Any | None = None
    tensorboard: TensorBoardFolder | None = None

    def finish(self) -> None:
        """The end of training: the sinks' last words (the W&B maps artifact), the writer closed."""
        finish_sinks(self.sinks)
        if self.tensorboard is not None:
            self.tensorboard.close()


def trainer_outputs(report_to: list[str], out_dir: Path, prefix: str) -> TrainerOutputs:
    """The outputs of ``TrainingArguments.report_to`` (see the module docstring) under ``out_dir``.

    TensorBoard: the Trainer's ``TensorBoardCallback`` keeps its writer to itself, so the callback
    opens its own, in ``TENSORBOARD_LOGGING_DIR`` when set (the same run as the Trainer's scalars),
    else in ``out_dir/tensorboard`` (``tensorboard --logdir <output_dir>`` shows both).
    """
    mlflow_run = RunMlflow.active() if "mlflow" in report_to else None
    if "mlflow" in report_to and mlflow_run is None:
        rank_zero_warn(
            "GradSkipTrainerCallback: report_to has 'mlflow' but no MLflow run is active (the Trainer's MLflowCallback "
            "starts one at the start of training): the explained epochs go to the files only"
        )
    wandb_run = None
    if "wandb" in report_to:
        import wandb

        wandb_run = wandb.run
        if wandb_run is None:
            rank_zero_warn(
                "GradSkipTrainerCallback: report_to has 'wandb' but no W&B run is active (the Trainer's WandbCallback "
                "starts one at the start of training): the explained epochs go to the files only"
            )
    tensorboard = None
    if "tensorboard" in report_to:
        tensorboard = TensorBoardFolder(Path(os.environ.get("TENSORBOARD_LOGGING_DIR") or out_dir / "tensorboard"))
    others = [name for name in report_to if name not in WRITTEN]
    if others:
        rank_zero_warn(
            f"GradSkipTrainerCallback writes to {' and '.join(WRITTEN)}, not to report_to's {others}: their runs get "
            "no GradSkip values (the scalars are in the evaluation's metrics and trainer.state.log_history)"
        )
    writers = [] if tensorboard is None else [tensorboard]
    image_sinks: list[Sink] = [TensorBoardSink(w) for w in writers]
    scalar_loggers: list[Any] = list(writers)
    if mlflow_run is not None:
        image_sinks.append(MLflowSink(mlflow_run, out_dir / "maps", f"{out_dir.name}/maps"))
        scalar_loggers.append(mlflow_run)
    wandb_logger = None if wandb_run is None else RunWandb(wandb_run)
    sinks = ordered_sinks(out_dir, prefix, wandb_logger, image_sinks, scalar_loggers, images=True)
    return TrainerOutputs(sinks, wandb_run, tensorboard)
