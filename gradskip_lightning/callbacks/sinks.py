"""The sinks of a Lightning ``Trainer``'s loggers (:mod:`gradskip_lightning.engine.output.sinks` has the sinks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import Logger, MLFlowLogger, TensorBoardLogger, WandbLogger

from gradskip_lightning.engine.output.sinks import MLflowSink, Sink, TensorBoardSink, ordered_sinks

__all__ = ["make_sinks"]


def make_sinks(trainer: Any, prefix: str, out_dir: Path) -> list[Sink]:
    """The sinks of a Trainer's loggers, those sending scalars last.

    With a :class:`WandbLogger` the folder moves beside the W&B run's files (``<run dir>/<name>``),
    images go to W&B and the maps folder becomes an artifact at the end of fit. With an
    :class:`MLFlowLogger` (and no W&B) the folder is the run's own, ``<default_root_dir>/<name>/<run id>``
    (MLflow keeps no local run folder, and its file store's folder holds only experiments); images go
    to MLflow and the maps folder becomes the run's artifacts ``<name>/maps`` at the end of fit. Without either,
    images are PNGs under ``out_dir/images``. Every other logger gets the scalars; a
    :class:`TensorBoardLogger` the images and histograms too.
    """
    name = out_dir.name
    wandb_logger = next((lg for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)
    mlflow_loggers = [lg for lg in trainer.loggers if isinstance(lg, MLFlowLogger)]
    if wandb_logger is not None:
        out_dir = Path(wandb_logger.experiment.dir).parent / name
    elif mlflow_loggers:
        out_dir = Path(trainer.default_root_dir) / name / str(mlflow_loggers[0].run_id)
    loggers: list[Logger] = trainer.loggers
    image_sinks: list[Sink] = [TensorBoardSink(lg) for lg in loggers if isinstance(lg, TensorBoardLogger)]
    image_sinks += [MLflowSink(lg, out_dir / "maps", f"{name}/maps") for lg in mlflow_loggers]
    others = [lg for lg in loggers if lg is not wandb_logger]
    files = wandb_logger is None and not mlflow_loggers
    return ordered_sinks(out_dir, prefix, wandb_logger, image_sinks, others, images=files)
