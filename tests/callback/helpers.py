"""Small real parts for the callback tests: a 2-block ViT classifier and planted-shapes data at 32 px."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch import Trainer

from gradskip_lightning.data import PlantedShapesDataModule
from gradskip_lightning.model import ViTClassifier


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
