"""The SegFormers of the segmentation benchmark and its fixed test subset.

Each training seed trains a :class:`~gradskip_lightning.training.segmentation.SegmentationModule` from
scratch with the model, data and epoch settings of ``configs/planted_segformer.yaml``
(:func:`~benchmarks.training.cached_model`), unless a checkpoint is
given; then one pass over the validation and test splits gives its mIoU and pixel accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from torch import Tensor

from benchmarks.configs import build_datamodule, config_settings
from benchmarks.faithfulness.data import fixed_subset
from benchmarks.training import quiet_trainer
from gradskip_lightning.data import PlantedShapesSegmentationDataModule
from gradskip_lightning.families.segformer import target_region

#: The config whose model, data and epochs the benchmark trains.
CONFIG = "planted_segformer"


@dataclass
class SegmentationSubset:
    """A fixed test subset: images (n, C, H, W) normalised, the class of each image's square
    ``targets`` (n,), its pixels ``masks`` (n, H, W) bool, and positions in the test split (n,)."""

    images: Tensor
    targets: Tensor
    masks: Tensor
    indices: Tensor


def make_datamodule() -> PlantedShapesSegmentationDataModule:
    """The planted-shapes segmentation datamodule with the config's settings."""
    return build_datamodule(CONFIG, PlantedShapesSegmentationDataModule, **config_settings(CONFIG)[1])


def square_subset(datamodule: PlantedShapesSegmentationDataModule, size: int, seed: int) -> SegmentationSubset:
    """``size`` test images drawn under ``seed``; each image's target is its square's class (the one
    class other than the background in its label map), its mask that class's pixels.

    Raises:
        ValueError: an image has no square (a label map that is all background).
    """
    subset = fixed_subset(datamodule, size, seed)
    label_maps = subset.labels  # (n, H, W) int64
    targets = label_maps.flatten(1).amax(dim=1)
    if (targets == datamodule.background_class).any():
        raise ValueError("every test image must hold a square: some label maps are all background")
    return SegmentationSubset(subset.images, targets, label_maps == targets[:, None, None], subset.indices)


def split_scores(model: LightningModule, datamodule: LightningDataModule, batches: int | None) -> dict[str, float]:
    """``val_miou``, ``val_pixel_accuracy``, ``test_miou``, ``test_pixel_accuracy`` of ``model`` (the
    module's own metrics) on the first ``batches`` batches of each split (None: all of it)."""
    trainer = quiet_trainer(limit_val_batches=batches, limit_test_batches=batches)
    val = trainer.validate(model, datamodule=datamodule, verbose=False)[0]
    test = trainer.test(model, datamodule=datamodule, verbose=False)[0]
    model.eval()
    return {
        "val_miou": val["val/miou"],
        "val_pixel_accuracy": val["val/pixel_acc"],
        "test_miou": test["test/miou"],
        "test_pixel_accuracy": test["test/pixel_acc"],
    }


def default_regions(model: LightningModule, images: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """The explained region of each image, (n, h, w) bool on the logits grid: the positions predicted
    as its target (the whole grid where there are none), and (n,) True where there were some."""
    with torch.no_grad():
        return target_region(model(images), targets, None)
