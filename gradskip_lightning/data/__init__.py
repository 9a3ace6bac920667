"""LightningDataModules: any MedMNIST v2 2D dataset (BloodMNIST by default) and synthetic planted
shapes with object masks; both can carry a spurious tag (:mod:`gradskip_lightning.shortcuts.tags`).
Planted shapes also come as a segmentation task (label maps of the filled squares)."""

from gradskip_lightning.data.base import ImageClassificationDataModule, LabelledSubset, Task
from gradskip_lightning.data.medmnist2d import BloodMNISTDataModule, MedMNISTDataModule
from gradskip_lightning.data.planted_segmentation import (
    PlantedShapesSegmentationDataModule,
    PlantedShapesSegmentationDataset,
)
from gradskip_lightning.data.planted_shapes import PlantedShapesDataModule, PlantedShapesDataset

__all__ = [
    "BloodMNISTDataModule",
    "ImageClassificationDataModule",
    "LabelledSubset",
    "MedMNISTDataModule",
    "PlantedShapesDataModule",
    "PlantedShapesDataset",
    "PlantedShapesSegmentationDataModule",
    "PlantedShapesSegmentationDataset",
    "Task",
]
