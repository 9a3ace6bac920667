"""Small real parts for the transformers.Trainer tests: a 2-layer HF ViT on 32 px images and a dataset
of HF-style dict items (``pixel_values``, ``labels``) with a bright square marking the class."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments, ViTConfig, ViTForImageClassification

NUM_CLASSES = 3
IMAGE_SIZE = 32
PATCH = 8


class SquareItems(Dataset):
    """``n`` normal-noise images (3, 32, 32), class ``i % 3``, with a bright 8 px square at the class's row."""

    def __init__(self, n: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randn(n, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
        self.labels = torch.arange(n) % NUM_CLASSES
        for i, label in enumerate(self.labels.tolist()):
            self.images[i, :, PATCH * label : PATCH * (label + 1), :PATCH] += 2.0

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"pixel_values": self.images[index], "labels": int(self.labels[index])}


def tiny_vit(seed: int = 0, **config: Any) -> ViTForImageClassification:
    """A randomly initialised 2-layer, 2-head HF ViT classifier (16 patches of 8 px at 32 px)."""
    torch.manual_seed(seed)
    options = dict(
        image_size=IMAGE_SIZE, patch_size=PATCH, num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
        intermediate_size=64, num_labels=NUM_CLASSES,
    )  # fmt: skip
    options.update(config)
    return ViTForImageClassification(ViTConfig(**options))


def tiny_args(out: Path, **kwargs: Any) -> TrainingArguments:
    """CPU arguments for 2 epochs of 3 steps (24 items, batch 8), evaluated at each epoch end, no checkpoints."""
    options: dict[str, Any] = dict(
        output_dir=str(out), num_train_epochs=2, per_device_train_batch_size=8, per_device_eval_batch_size=8,
        learning_rate=1e-3, eval_strategy="epoch", save_strategy="no", logging_strategy="epoch", report_to="none",
        use_cpu=True, seed=0, dataloader_num_workers=0, disable_tqdm=True,
    )  # fmt: skip
    options.update(kwargs)
    return TrainingArguments(**options)


def tiny_trainer(out: Path, callbacks: list[Any], model: torch.nn.Module | None = None, **kwargs: Any) -> Trainer:
    """A Trainer of :func:`tiny_vit` on 24 training and 12 evaluation items."""
    return Trainer(
        model=model if model is not None else tiny_vit(),
        args=tiny_args(out, **kwargs),
        train_dataset=SquareItems(24, seed=0),
        eval_dataset=SquareItems(12, seed=1),
        callbacks=callbacks,
    )
