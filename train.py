"""Train a timm ViT with GradSkip explanations logged at epoch ends (LightningCLI entry point).

    python train.py fit --config configs/planted_shapes.yaml
    python train.py fit --config configs/bloodmnist.yaml --data.root /folder/with/bloodmnist.npz

W&B runs offline unless you set ``WANDB_MODE`` yourself (e.g. ``WANDB_MODE=online``).
"""
from __future__ import annotations

import os

from lightning.pytorch import LightningDataModule
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from gradskip_lightning.model import ViTClassifier


class GradSkipCLI(LightningCLI):
    """LightningCLI whose model takes its class count and image size from the datamodule."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
        parser.link_arguments("data.img_size", "model.img_size", apply_on="instantiate")


def main(args: list[str] | None = None, run: bool = True) -> GradSkipCLI:
    """Parse ``args`` (default: the command line), build model, data and trainer, and run."""
    os.environ.setdefault("WANDB_MODE", "offline")
    return GradSkipCLI(
        ViTClassifier,
        LightningDataModule,
        subclass_mode_data=True,
        args=args,
        run=run,
        save_config_kwargs={"overwrite": True},
    )


if __name__ == "__main__":
    main()
