"""Planted shapes for semantic segmentation: the label map of each image is its filled square.

The images are exactly those of :class:`~gradskip_lightning.data.planted_shapes.PlantedShapesDataset`
(one filled square whose colour is the class, same-palette distractor rings, a noisy background);
the target is a label map instead of an image label: the square's pixels are ``1 + its colour
class``, the rings and the background 0. Telling a square from a ring of the same colour needs
context (is the middle filled?), not just the pixel colour.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from gradskip_lightning.data.base import LabelledDataset, Task
from gradskip_lightning.data.planted_shapes import PlantedShapesDataModule, PlantedShapesDataset
from gradskip_lightning.shortcuts.tags import TagMode

#: Label of the pixels outside the filled square (rings included).
BACKGROUND_CLASS = 0


class PlantedShapesSegmentationDataset(LabelledDataset):
    """The items of a :class:`PlantedShapesDataset` with label maps instead of labels.

    Items are ``(image (3, H, W) float32 normalised, label_map (H, W) int64)``, the label map
    ``1 + label`` on the filled square and 0 elsewhere. ``labels`` is (N, K) int64 multi-hot of the
    classes present besides the background (column 0 all zeros; one square per image), read
    from the planted labels without rendering.

    Args:
        shapes: the planted-shapes dataset that draws the images (without a spurious tag).

    Example:
        >>> shapes = PlantedShapesDataset(8, seed=0, num_classes=3, img_size=32)
        >>> dataset = PlantedShapesSegmentationDataset(shapes)
        >>> image, label_map = dataset[0]
        >>> tuple(label_map.shape), dataset.num_classes, dataset.class_names[:2]
        ((32, 32), 4, ['background', 'red square'])
        >>> int(label_map.max()) == 1 + int(shapes.labels[0]) and bool(dataset.labels[0, 1 + shapes.labels[0]])
        True
    """

    def __init__(self, shapes: PlantedShapesDataset) -> None:
        if shapes.tag is not None:
            raise ValueError(
                f"shapes must have no spurious tag for segmentation (the label map ignores it), got tag={shapes.tag}"
            )
        self.shapes = shapes
        self.num_classes = shapes.num_classes + 1
        self.class_names = ["background", *shapes.class_names]
        self.img_size = shapes.img_size
        labels = F.one_hot(shapes.labels + 1, self.num_classes)  # (N, K) int64
        labels[:, BACKGROUND_CLASS] = 0
        self.labels = labels

    def __len__(self) -> int:
        return len(self.shapes)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        image, label, mask = self.shapes[index]
        assert isinstance(mask, Tensor), "the shapes have no tag, so their third item is the object mask"
        label_map = torch.full(mask.shape, BACKGROUND_CLASS, dtype=torch.int64)
        label_map[mask] = label + 1
        return image, label_map


class PlantedShapesSegmentationDataModule(PlantedShapesDataModule):
    """Train/val/test splits of :class:`PlantedShapesSegmentationDataset` (``task="segmentation"``).

    The images are those of :class:`PlantedShapesDataModule` with the same options and seeds;
    ``num_classes`` is ``num_colours + 1`` (the background is class 0, ``background_class``) and
    ``class_names`` is ``["background", "red square", ...]``. SegFormer needs ``img_size`` to be a
    multiple of 32.

    Args:
        num_colours: classes of squares (palette colours), 2 to 8.
        img_size: image side in pixels.
        object_size: side of the squares and rings in pixels.
        num_distractors: rings per image.
        noise: Gaussian pixel-noise standard deviation (pixel values in [0, 1]).
        train_size: training images.
        val_size: validation images.
        test_size: test images.
        seed: base seed; the splits use ``3 * seed``, ``3 * seed + 1`` and ``3 * seed + 2``.
        batch_size: images per batch.
        num_workers: DataLoader worker processes.
    """

    task: Task = "segmentation"
    background_class = BACKGROUND_CLASS

    def __init__(
        self,
        num_colours: int = 4,
        img_size: int = 64,
        object_size: int = 12,
        num_distractors: int = 2,
        noise: float = 0.05,
        train_size: int = 2000,
        val_size: int = 500,
        test_size: int = 500,
        seed: int = 0,
        batch_size: int = 32,
        num_workers: int = 0,
    ) -> None:
        super().__init__(
            num_classes=num_colours,
            img_size=img_size,
            object_size=object_size,
            num_distractors=num_distractors,
            noise=noise,
            train_size=train_size,
            val_size=val_size,
            test_size=test_size,
            seed=seed,
            batch_size=batch_size,
            num_workers=num_workers,
        )
        self.save_hyperparameters(ignore=["num_classes", "tag"])  # drops the parent's: this class takes neither
        self.num_classes = num_colours + 1
        self.class_names = ["background", *self.class_names]

    def make_split(self, split: str, tag_mode: TagMode) -> PlantedShapesSegmentationDataset:
        """The ``split`` dataset ("train", "val" or "test"): the classification split's images, label maps."""
        return PlantedShapesSegmentationDataset(self.shapes_split(split, tag_mode))
