"""Models and fixed test subsets for the faithfulness benchmark: planted shapes (a tiny and a deeper
ViT) and BloodMNIST.

Each dataset is trained from scratch with the settings of its ``configs/<name>.yaml`` (a timm ViT
in :class:`~gradskip_lightning.training.classifier.ViTClassifier`, Lightning Trainer on CPU, no logger, no
validation; fewer BloodMNIST epochs; :func:`benchmarks.training.cached_model`), once per training seed,
unless a checkpoint is given. The test subset is a seeded random draw from the test split, the same
for every training seed, loaded once into tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from benchmarks.configs import build_datamodule, config_settings
from benchmarks.training import with_data_root
from gradskip_lightning.data.base import ImageClassificationDataModule

#: Datasets; each trains with ``configs/<name>.yaml``.
DATASETS = ("planted_shapes", "planted_shapes_deep", "planted_shapes_swin", "bloodmnist")


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
    data = with_data_root(name, config_settings(name)[1], data_root)
    return build_datamodule(name, ImageClassificationDataModule, **data)


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
