"""Train a model with GradSkip explanations logged at epoch ends (LightningCLI entry point).

    python train.py fit --config configs/planted_shapes.yaml
    python train.py fit --config configs/bloodmnist.yaml --data.root /folder/with/bloodmnist.npz
    python train.py fit --config configs/planted_segformer.yaml

The model is a :class:`~gradskip_lightning.training.classifier.ViTClassifier` unless the config's ``model``
names another ``class_path`` (e.g. ``gradskip_lightning.training.segmentation.SegmentationModule``).
W&B runs offline unless you set ``WANDB_MODE`` yourself (e.g. ``WANDB_MODE=online``). When stdout
is not a terminal (redirected to a file, a pipe, a batch job's log), the progress bar is off unless
the config sets ``trainer.enable_progress_bar``, and each epoch prints one line of metrics
(:class:`~gradskip_lightning.console.EpochLine`). The resolved config is saved beside the run (the first
logger's folder) and, with an ``MLFlowLogger``, as each MLflow run's ``config.yaml`` artifact.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import MLFlowLogger

from gradskip_lightning.console import EpochLine
from gradskip_lightning.training.classifier import DEFAULT_MODEL, LINKED_FROM_DATA


class SaveConfig(SaveConfigCallback):
    """Lightning's config saving, which also works when the first logger has no local folder (an
    ``MLFlowLogger`` on a database or a server: Lightning's own callback asserts there, Lightning issue
    #19441), and which puts the config into every MLflow run as its ``config.yaml`` artifact."""

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.save_to_log_dir = trainer.log_dir is not None  # on every rank: it broadcasts
        super().setup(trainer, pl_module, stage)

    def save_config(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Log the config to each MLflow run (rank zero)."""
        runs = [logger for logger in trainer.loggers if isinstance(logger, MLFlowLogger)]
        if not runs:
            return
        with tempfile.TemporaryDirectory() as folder:
            self.parser.save(
                self.config, os.path.join(folder, self.config_filename), skip_unset=False, multifile=self.multifile
            )
            for logger in runs:
                logger.experiment.log_artifacts(logger.run_id, folder)


class GradSkipCLI(LightningCLI):
    """LightningCLI whose model (ViTClassifier by default) takes its class count, image size,
    channels and task from the datamodule."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.set_defaults({"model": {"class_path": DEFAULT_MODEL}})
        for name in LINKED_FROM_DATA:
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}", apply_on="instantiate")

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer, without a progress bar when stdout is not a terminal (it would draw nothing
        there) unless the config sets ``enable_progress_bar``."""
        if (
            not sys.stdout.isatty()
            and self._get(self.config_init, "trainer", default={}).get("enable_progress_bar") is None
        ):
            kwargs.setdefault("enable_progress_bar", False)
        return super().instantiate_trainer(**kwargs)


def main(args: list[str] | None = None, run: bool = True) -> GradSkipCLI:
    """Parse ``args`` (default: the command line), build model, data and trainer, and run."""
    os.environ.setdefault("WANDB_MODE", "offline")
    return GradSkipCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        args=args,
        run=run,
        save_config_callback=SaveConfig,
        save_config_kwargs={"overwrite": True},
        trainer_defaults={} if sys.stdout.isatty() else {"callbacks": [EpochLine()]},  # after the config's callbacks
    )


if __name__ == "__main__":
    main()
