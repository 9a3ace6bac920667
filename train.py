"""Train a model with GradSkip explanations logged at epoch ends (LightningCLI entry point).

    python train.py fit --config configs/planted_shapes.yaml
    python train.py fit --config configs/bloodmnist.yaml --data.root /folder/with/bloodmnist.npz
    python train.py fit --config configs/planted_segformer.yaml

The model is a :class:`~gradskip_lightning.model.ViTClassifier` unless the config's ``model``
names another ``class_path`` (e.g. ``gradskip_lightning.segmentation.module.SegmentationModule``).
W&B runs offline unless you set ``WANDB_MODE`` yourself (e.g. ``WANDB_MODE=online``).
"""

from __future__ import annotations

import os

from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from gradskip_lightning.model import DEFAULT_MODEL, LINKED_FROM_DATA


class GradSkipCLI(LightningCLI):
    """LightningCLI whose model (ViTClassifier by default) takes its class count, image size,
    channels and task from the datamodule."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.set_defaults({"model": {"class_path": DEFAULT_MODEL}})
        for name in LINKED_FROM_DATA:
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}", apply_on="instantiate")


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
        save_config_kwargs={"overwrite": True},
    )


if __name__ == "__main__":
    main()
