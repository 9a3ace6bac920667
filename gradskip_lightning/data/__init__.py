"""LightningDataModules: BloodMNIST (MedMNIST v2) and synthetic planted shapes with object masks."""
from gradskip_lightning.data.base import ImageClassificationDataModule
from gradskip_lightning.data.bloodmnist import BloodMNISTDataModule
from gradskip_lightning.data.planted_shapes import (
    PlantedShapesDataModule,
    PlantedShapesDataset,
)

__all__ = ["BloodMNISTDataModule", "ImageClassificationDataModule", "PlantedShapesDataModule", "PlantedShapesDataset"]
