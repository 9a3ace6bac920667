"""Small real parts for the callback tests: a 2-block ViT classifier and planted-shapes data at 32 px;
a tiny SegFormer and planted-shapes segmentation data at 64 px."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from lightning.pytorch import Callback, Trainer

from gradskip_lightning.data import PlantedShapesDataModule, PlantedShapesSegmentationDataModule
from gradskip_lightning.training.classifier import ViTClassifier


def tiny_module(seed: int = 0) -> ViTClassifier:
    """A ViTClassifier holding a 2-block, 3-head timm ViT on 32 px images (16 patches of 8 px)."""
    import torch

    torch.manual_seed(seed)
    return ViTClassifier(num_classes=4, img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3, lr=1e-3)


def tiny_data(**kwargs: Any) -> PlantedShapesDataModule:
    """Planted-shapes data (4 classes, masks), small enough for seconds-long epochs."""
    options = dict(num_classes=4, img_size=32, train_size=64, val_size=32, test_size=8, batch_size=16)
    options.update(kwargs)
    return PlantedShapesDataModule(**options)


def tiny_segmentation_module(seed: int = 0):
    """A SegmentationModule holding a 4-block SegFormer (widths 8-16) for 5 classes on 64 px images."""
    import torch

    from gradskip_lightning.training.segmentation import SegmentationModule

    torch.manual_seed(seed)
    sizes = dict(hidden_sizes=[8, 8, 16, 16], depths=[1, 1, 1, 1], decoder_hidden_size=16)
    return SegmentationModule(num_classes=5, img_size=64, task="segmentation", **sizes)


def tiny_segmentation_data(**kwargs: Any) -> PlantedShapesSegmentationDataModule:
    """Planted-shapes segmentation data (4 square colours + background), 64 px."""
    options = dict(num_colours=4, img_size=64, train_size=32, val_size=16, test_size=8, batch_size=16)
    options.update(kwargs)
    return PlantedShapesSegmentationDataModule(**options)


def tiny_trainer(root: Path, **kwargs: Any) -> Trainer:
    """A CPU Trainer for 2 epochs without checkpoints or progress output."""
    options = dict(
        default_root_dir=str(root),
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,
        deterministic=True,
    )
    options.update(kwargs)
    return Trainer(**options)


CallbackT = TypeVar("CallbackT", bound=Callback)


def callback_from_yaml(tmp_path: Path, callback: type[CallbackT], init_args: str) -> CallbackT:
    """The one ``callback`` a LightningCLI config builds from ``init_args`` (YAML flow style), as ``train.py`` does."""
    from lightning.pytorch.cli import LightningCLI

    config = tmp_path / "config.yaml"
    config.write_text(
        f"trainer:\n  logger: false\n  callbacks:\n    - class_path: gradskip_lightning.{callback.__name__}\n"
        f"      init_args: {init_args}\n"
    )
    cli = LightningCLI(ViTClassifier, PlantedShapesDataModule, run=False, args=["--config", str(config)])
    (built,) = [c for c in cli.trainer.callbacks if isinstance(c, callback)]
    return built
