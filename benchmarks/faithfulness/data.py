"""Models and fixed test subsets for the faithfulness benchmark: planted shapes (a tiny and a deeper
ViT) and BloodMNIST.

Each dataset is trained from scratch with the settings of its ``configs/<name>.yaml`` (a timm ViT
in :class:`~gradskip_lightning.training.classifier.ViTClassifier`, Lightning Trainer on CPU, no logger, no
validation; fewer BloodMNIST epochs), once per training seed, unless a checkpoint is given. The test
subset is a seeded random draw from the test split, the same for every training seed, loaded once
into tensors.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningDataModule, LightningModule, Trainer, seed_everything
from torch import Tensor

from benchmarks.configs import build_datamodule, config_settings, model_class
from gradskip_lightning.data.base import ImageClassificationDataModule
from gradskip_lightning.training.classifier import LINKED_FROM_DATA

#: Datasets; each trains with ``configs/<name>.yaml``.
DATASETS = ("planted_shapes", "planted_shapes_deep", "planted_shapes_swin", "bloodmnist")
#: Training epochs that differ from the config's: 4 of BloodMNIST's 10, so the whole benchmark fits
#: in 30 minutes on 2 CPU cores (``--epochs 10`` trains as the config does).
EPOCHS = {"bloodmnist": 4}


@dataclass
class Subset:
    """A fixed test subset: images (n, C, H, W) normalised, labels (n,), masks (n, H, W) bool or None."""

    images: Tensor
    labels: Tensor
    masks: Tensor | None
    indices: Tensor  # (n,) positions in the test split

    def head(self, count: int) -> Subset:
        """The first ``count`` items (all of them when there are fewer)."""
        cut = slice(0, count)
        return Subset(
            self.images[cut], self.labels[cut], None if self.masks is None else self.masks[cut], self.indices[cut]
        )


def make_datamodule(name: str, data_root: Path | None) -> ImageClassificationDataModule:
    """The datamodule of ``name`` with its config's settings; a dataset read from files (its config has
    a ``root``, e.g. BloodMNIST) needs ``data_root``, the folder holding them (no download)."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {DATASETS}")
    _, data, _ = config_settings(name)
    if needs_data_root(name):
        if data_root is None:
            raise ValueError(f"{name} needs --data-root, the folder holding its files")
        data = {**data, "root": str(data_root), "download": False}
    return build_datamodule(name, ImageClassificationDataModule, **data)


def needs_data_root(name: str) -> bool:
    """Whether dataset ``name`` reads files from a ``root`` folder (its config sets one)."""
    return "root" in config_settings(name)[1]


def fixed_subset(datamodule: ImageClassificationDataModule, size: int, seed: int) -> Subset:
    """``size`` test items drawn without replacement under ``seed``, stacked into tensors."""
    datamodule.setup("test")
    dataset = datamodule.test_dataset
    if dataset is None:
        raise RuntimeError(f"{type(datamodule).__name__}.setup('test') made no test_dataset")
    if not 1 <= size <= len(dataset):
        raise ValueError(f"test subset size must be in [1, {len(dataset)}], got {size}")
    indices = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:size].sort().values
    items = [dataset[int(i)] for i in indices]
    images = torch.stack([item[0] for item in items])
    labels = torch.stack([torch.as_tensor(item[1]) for item in items]).long()
    masks = torch.stack([item[2] for item in items]) if len(items[0]) > 2 else None
    return Subset(images, labels, masks, indices)


def checkpoint_path(folder: Path, name: str, seed: int) -> Path:
    """Where ``--save-checkpoints`` writes, and ``--checkpoints`` reads, the model of one dataset and seed."""
    return folder / f"{name}-seed{seed}.ckpt"


def quiet_trainer(**kwargs: Any) -> Trainer:
    """A CPU Trainer of one device with no logger, checkpoints, progress bar or summary; ``kwargs``
    add to it."""
    options: dict[str, Any] = dict(
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    return Trainer(accelerator="cpu", devices=1, **options, **kwargs)


@dataclass(frozen=True)
class TrainingFacts:
    """How a benchmark model came to be: loaded from ``checkpoint``, or trained ``epochs`` epochs
    in ``train_seconds`` (wall clock; 0 when loaded)."""

    checkpoint: str | None
    epochs: int | None
    train_seconds: float


def train_or_load(
    name: str,
    datamodule: LightningDataModule,
    *,
    checkpoint: Path | None,
    epochs: int | None,
    seed: int,
    max_train_batches: int | None = None,
    callbacks: list[Callback] | None = None,
    root: Path | None = None,
) -> tuple[LightningModule, TrainingFacts]:
    """The model of ``configs/<name>.yaml`` in eval mode, loaded from ``checkpoint`` or trained (no
    validation); and facts about it.

    The model takes the config's init args and the datamodule's
    :data:`~gradskip_lightning.training.classifier.LINKED_FROM_DATA`, as train.py gives them.
    ``epochs`` None uses the config's (fewer for BloodMNIST, :data:`EPOCHS`); ``max_train_batches``
    caps the batches per epoch; ``callbacks`` go to the Trainer, whose ``default_root_dir`` is ``root`` (None:
    the working folder; only callbacks write there).

    Returns the model and its :class:`TrainingFacts`.
    """
    cls = model_class(name)
    if checkpoint is not None:
        model = cls.load_from_checkpoint(checkpoint, map_location="cpu")
        return model.eval(), TrainingFacts(str(checkpoint), None, 0.0)
    settings, _, trainer_args = config_settings(name)
    epochs = EPOCHS.get(name, trainer_args["max_epochs"]) if epochs is None else epochs
    seed_everything(seed, verbose=False)
    links = {link: getattr(datamodule, link) for link in LINKED_FROM_DATA}
    model = cls(**{**settings, **links})  # a config that also sets a linked value (in_chans) gets the data's
    trainer = quiet_trainer(
        max_epochs=epochs,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        limit_train_batches=max_train_batches,
        callbacks=callbacks,
        **({} if root is None else {"default_root_dir": str(root)}),
    )
    start = time.perf_counter()
    trainer.fit(model, datamodule=datamodule)
    return model.eval(), TrainingFacts(None, epochs, time.perf_counter() - start)
