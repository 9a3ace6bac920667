"""PlantedShapesSegmentationDataset / DataModule: label maps are the classification items' squares."""

from __future__ import annotations

import pytest
import torch

from gradskip_lightning.data import (
    PlantedShapesDataModule,
    PlantedShapesDataset,
    PlantedShapesSegmentationDataModule,
    PlantedShapesSegmentationDataset,
)
from gradskip_lightning.shortcuts import SpuriousTag


def test_label_maps_are_the_filled_squares_of_the_classification_items():
    shapes = PlantedShapesDataset(24, seed=3, num_classes=4, img_size=32)
    dataset = PlantedShapesSegmentationDataset(shapes)
    assert len(dataset) == 24 and dataset.num_classes == 5
    for index in range(len(dataset)):
        image, label_map = dataset[index]
        shapes_image, label, mask = shapes[index]
        assert torch.equal(image, shapes_image) and image.dtype == torch.float32
        assert label_map.shape == (32, 32) and label_map.dtype == torch.int64
        assert torch.equal(label_map == label + 1, mask)  # the square's pixels, all of them
        assert (label_map[~mask] == 0).all()  # rings and background
        assert set(label_map.unique().tolist()) == {0, int(label) + 1}


def test_labels_are_multi_hot_of_the_square_class_without_background():
    shapes = PlantedShapesDataset(40, seed=1, num_classes=3)
    dataset = PlantedShapesSegmentationDataset(shapes)
    assert dataset.labels.shape == (40, 4) and dataset.labels.dtype == torch.int64
    assert (dataset.labels[:, 0] == 0).all() and (dataset.labels.sum(dim=1) == 1).all()
    assert torch.equal(dataset.labels[:, 1:].argmax(dim=1), shapes.labels)
    for index in (0, 7, 39):  # what the label maps contain
        present = torch.zeros(4, dtype=torch.int64)
        present[dataset[index][1].unique()] = 1
        present[0] = 0
        assert torch.equal(present, dataset.labels[index])
    assert dataset.class_names == ["background", "red square", "green square", "blue square"]


def test_a_tagged_shapes_dataset_is_refused():
    with pytest.raises(ValueError, match="no spurious tag"):
        PlantedShapesSegmentationDataset(PlantedShapesDataset(8, seed=0, tag=SpuriousTag()))


def test_datamodule_interface_and_same_images_as_the_classification_datamodule():
    options = {"img_size": 64, "object_size": 12, "train_size": 16, "val_size": 8, "test_size": 8, "seed": 2}
    dm = PlantedShapesSegmentationDataModule(num_colours=3, batch_size=4, **options)
    assert (dm.num_classes, dm.background_class, dm.task, dm.in_chans, dm.img_size) == (4, 0, "segmentation", 3, 64)
    assert dm.class_names == ["background", "red square", "green square", "blue square"]
    assert dm.mean == dm.std == (0.5, 0.5, 0.5)
    assert "num_classes" not in dm.hparams and dm.hparams.num_colours == 3  # checkpoints rebuild it
    dm.setup("fit")
    dm.setup("test")
    images, label_maps = next(iter(dm.val_dataloader()))
    assert images.shape == (4, 3, 64, 64) and label_maps.shape == (4, 64, 64) and label_maps.dtype == torch.int64
    assert 0 < label_maps.max() < 4
    classification = PlantedShapesDataModule(num_classes=3, **options)
    classification.setup("test")
    image, label, mask = classification.test_dataset[5]
    assert torch.equal(dm.test_dataset[5][0], image) and torch.equal(dm.test_dataset[5][1] > 0, mask)
