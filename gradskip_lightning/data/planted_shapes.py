"""Planted shapes: synthetic images whose class-deciding pixels are known, to score explanations.

Each image (RGB, 32 px by default) has a textured, noisy grey background, one filled square whose
colour decides the class, and distractor hollow squares ("rings") of the same size drawn from the
same colour palette independently of the label. The object mask is exactly the filled square's
pixels. An optional :class:`~gradskip_lightning.shortcuts.tags.SpuriousTag` (a small fixed pattern,
mostly on images of one class) is planted in the training, validation and test images alike, a
shortcut a model can learn instead of the square; objects never cover the tag's place.

Everything is generated on the fly and deterministic: item ``i`` of a dataset with seed ``s``
depends only on ``(s, i)`` and the dataset's options.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.data.base import SPLITS, ImageClassificationDataModule, LabelledDataset
from gradskip_lightning.shortcuts.tags import SpuriousTag, TagMode

#: (name, RGB in [0, 1]) of the class colours; class k is a filled square of colour k.
PALETTE: tuple[tuple[str, tuple[float, float, float]], ...] = (
    ("red", (0.90, 0.10, 0.10)),
    ("green", (0.10, 0.75, 0.15)),
    ("blue", (0.15, 0.25, 0.95)),
    ("yellow", (0.95, 0.90, 0.10)),
    ("magenta", (0.90, 0.15, 0.90)),
    ("cyan", (0.10, 0.90, 0.90)),
    ("orange", (1.00, 0.55, 0.00)),
    ("black", (0.05, 0.05, 0.05)),
)

_INDEX_STRIDE = 1_000_003  # per-item generator seed = seed * _INDEX_STRIDE + index
_MAX_PLACEMENT_TRIES = 1000
#: Objects keep clear of this tag's place even without a tag, so that a tag changes nothing else.
_DEFAULT_TAG = SpuriousTag()


class PlantedShapesDataset(LabelledDataset):
    """Images with one class-deciding filled square among same-palette distractor rings.

    Items are ``(image (3, H, W) float32 normalised, label int64 scalar, mask (H, W) bool)``, the
    mask being the filled square; with a tag, ``(image, label, {"object": mask, "tag": mask})``,
    the tag mask all False on items without the tag.

    Args:
        size: number of items.
        seed: dataset seed; item ``i`` is generated from ``seed * 1_000_003 + i``.
        num_classes: number of classes (= palette colours used), 2 to 8.
        img_size: image side in pixels.
        object_size: side of the filled square and of each ring, in pixels.
        num_distractors: rings per image.
        ring_width: border width of the rings, in pixels.
        noise: standard deviation of the Gaussian pixel noise added to the whole image
            (pixel values in [0, 1] before normalisation).
        tag: a spurious tag, pasted after the noise; objects never cover its place (nor, without
            a tag, the default tag's place, the top-left 3 x 3 pixels).
        tag_mode: which items carry the tag (see :data:`~gradskip_lightning.shortcuts.tags.TagMode`).
        tag_stream: the split's number for the tag's draws (0 train, 1 val, 2 test).
        mean: per-channel normalisation mean.
        std: per-channel normalisation standard deviation.
    """

    def __init__(
        self,
        size: int,
        *,
        seed: int,
        num_classes: int = 4,
        img_size: int = 32,
        object_size: int = 8,
        num_distractors: int = 2,
        ring_width: int = 2,
        noise: float = 0.05,
        tag: SpuriousTag | None = None,
        tag_mode: TagMode = "sampled",
        tag_stream: int = 0,
        mean: tuple[float, ...] = (0.5, 0.5, 0.5),
        std: tuple[float, ...] = (0.5, 0.5, 0.5),
    ) -> None:
        if not 1 <= size < _INDEX_STRIDE:
            raise ValueError(f"size must be in [1, {_INDEX_STRIDE}), got {size}")
        if not 2 <= num_classes <= len(PALETTE):
            raise ValueError(f"num_classes must be in [2, {len(PALETTE)}] (palette size), got {num_classes}")
        if object_size < 2 or ring_width < 1 or 2 * ring_width >= object_size:
            raise ValueError(
                f"need object_size >= 2 and 1 <= ring_width < object_size / 2, got object_size={object_size}, "
                f"ring_width={ring_width}"
            )
        keep_clear = _DEFAULT_TAG if tag is None else tag
        keep_clear.check_fits(img_size, img_size)
        if img_size < object_size + max(keep_clear.box[2:]) + 1:
            raise ValueError(
                f"img_size ({img_size}) must leave room for an object ({object_size} px) beside the tag's place "
                f"{keep_clear.box} (top, left, bottom, right)"
            )
        if num_distractors < 0:
            raise ValueError(f"num_distractors must be >= 0, got {num_distractors}")
        if noise < 0:
            raise ValueError(f"noise must be >= 0, got {noise}")
        if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
            raise ValueError(f"mean and std need 3 values (RGB) with std > 0, got mean={mean}, std={std}")
        self.size = size
        self.seed = seed
        self.num_classes = num_classes
        self.img_size = img_size
        self.object_size = object_size
        self.num_distractors = num_distractors
        self.ring_width = ring_width
        self.noise = noise
        self.tag = tag
        self._keep_clear = keep_clear.box
        self.palette = torch.tensor([rgb for _, rgb in PALETTE[:num_classes]])  # (K, 3)
        self.class_names = [f"{name} square" for name, _ in PALETTE[:num_classes]]
        self._normalisation = Normalisation(mean, std)
        # Balanced labels in a seeded random order: (N,) int64.
        order = torch.randperm(size, generator=torch.Generator().manual_seed(seed))
        self.labels = order % num_classes
        if tag is not None:
            if tag.target_class >= num_classes:
                raise ValueError(f"tag.target_class must be < num_classes ({num_classes}), got {tag.target_class}")
            self.carriers = tag.carriers(self.labels, tag_mode, tag_stream)  # (N,) bool
            self._tag_mask = tag.mask(img_size, img_size)  # (H, W) bool

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor, Tensor | dict[str, Tensor]]:
        if not -self.size <= index < self.size:
            raise IndexError(f"index {index} out of range for {self.size} items")
        index %= self.size
        image, mask = self.render(index)
        image = self._normalisation.from_pixels(image)
        if self.tag is None:
            return image, self.labels[index], mask
        tag_mask = self._tag_mask if self.carriers[index] else torch.zeros_like(self._tag_mask)
        return image, self.labels[index], {"object": mask, "tag": tag_mask}

    def render(self, index: int) -> tuple[Tensor, Tensor]:
        """Item ``index`` before normalisation: image (3, H, W) in [0, 1] (with the tag if it carries
        one) and object mask (H, W) bool."""
        gen = torch.Generator().manual_seed(self.seed * _INDEX_STRIDE + index)
        label = int(self.labels[index])
        image = self._background(gen)
        corners = self._place_objects(gen, 1 + self.num_distractors)
        mask = torch.zeros(self.img_size, self.img_size, dtype=torch.bool)
        s, w = self.object_size, self.ring_width
        y, x = corners[0]
        mask[y : y + s, x : x + s] = True
        image[:, mask] = self.palette[label].view(3, 1)
        ring_colours = torch.randint(self.num_classes, (self.num_distractors,), generator=gen)
        for (y, x), colour in zip(corners[1:], ring_colours.tolist()):
            ring = torch.zeros_like(mask)
            ring[y : y + s, x : x + s] = True
            ring[y + w : y + s - w, x + w : x + s - w] = False
            image[:, ring] = self.palette[colour].view(3, 1)
        if self.noise > 0:
            image += self.noise * torch.randn(image.shape, generator=gen)
        image.clamp_(0.0, 1.0)
        if self.tag is not None and self.carriers[index]:
            self.tag.apply(image)
        return image, mask

    def _background(self, gen: torch.Generator) -> Tensor:
        """Smooth grey texture in [0.3, 0.7] with a slight colour tint: (3, H, W)."""
        coarse = torch.rand(1, 1, 5, 5, generator=gen)
        field = F.interpolate(coarse, size=(self.img_size, self.img_size), mode="bilinear", align_corners=True)[0]
        tint = 0.05 * (torch.rand(3, 1, 1, generator=gen) - 0.5)
        return (0.3 + 0.4 * field + tint).expand(3, -1, -1).clone()

    def _place_objects(self, gen: torch.Generator, count: int) -> list[tuple[int, int]]:
        """Top-left corners (y, x) of ``count`` squares, 1 px apart and from the tag's place."""
        s, limit = self.object_size, self.img_size - self.object_size + 1
        top, left, bottom, right = self._keep_clear
        corners: list[tuple[int, int]] = []
        for _ in range(_MAX_PLACEMENT_TRIES):
            y, x = torch.randint(limit, (2,), generator=gen).tolist()
            on_tag = top - s <= y <= bottom and left - s <= x <= right
            overlaps = any(abs(y - cy) <= s and abs(x - cx) <= s for cy, cx in corners)
            if not (on_tag or overlaps):
                corners.append((y, x))
                if len(corners) == count:
                    return corners
        raise RuntimeError(
            f"could not place {count} objects of {s} px in a {self.img_size} px image: "
            "use fewer distractors, smaller objects or larger images"
        )


class PlantedShapesDataModule(ImageClassificationDataModule):
    """Train/val/test splits of :class:`PlantedShapesDataset`, generated on the fly (no download).

    The class is the colour of the one filled square; distractor rings use the same palette. With a
    ``tag``, the training, validation and test images carry it alike (mostly on one class): a model
    that learns it instead of the square keeps a high validation accuracy, but predicts the tag's
    class on ``transplanted_test_dataset`` (test images of the other classes with the tag pasted
    on; built by ``setup("test")`` beside ``clean_test_dataset``), and its explanations point at
    the tag.

    Args:
        num_classes: number of classes (2 to 8).
        img_size: image side in pixels.
        object_size: side of the squares and rings in pixels.
        num_distractors: rings per image.
        noise: Gaussian pixel-noise standard deviation (pixel values in [0, 1]).
        tag: a spurious tag planted in every split, or None.
        train_size: training images.
        val_size: validation images.
        test_size: test images.
        seed: base seed; the splits use ``3 * seed``, ``3 * seed + 1`` and ``3 * seed + 2``.
        batch_size: images per batch.
        num_workers: DataLoader worker processes.
    """

    mean = (0.5, 0.5, 0.5)
    std = (0.5, 0.5, 0.5)

    def __init__(
        self,
        num_classes: int = 4,
        img_size: int = 32,
        object_size: int = 8,
        num_distractors: int = 2,
        noise: float = 0.05,
        tag: SpuriousTag | None = None,
        train_size: int = 2000,
        val_size: int = 500,
        test_size: int = 500,
        seed: int = 0,
        batch_size: int = 64,
        num_workers: int = 0,
    ) -> None:
        super().__init__(batch_size=batch_size, num_workers=num_workers)
        self.save_hyperparameters(ignore="tag")
        self.hparams["tag"] = None if tag is None else asdict(tag)  # plain values: checkpoints load weights_only
        self.num_classes = num_classes
        self.img_size = img_size
        self.tag = tag
        self._options: dict[str, Any] = {
            "num_classes": num_classes,
            "img_size": img_size,
            "object_size": object_size,
            "num_distractors": num_distractors,
            "noise": noise,
            "tag": tag,
            "mean": self.mean,
            "std": self.std,
        }
        self._sizes = {"train": train_size, "val": val_size, "test": test_size}
        self.seed = seed
        # Built eagerly (cheap: labels only) so bad options fail at construction.
        self.class_names = self.shapes_split("val", "sampled").class_names

    def make_split(self, split: str, tag_mode: TagMode) -> LabelledDataset:
        return self.shapes_split(split, tag_mode)

    def shapes_split(self, split: str, tag_mode: TagMode) -> PlantedShapesDataset:
        """The ``split`` dataset ("train", "val" or "test"), the tag put on as ``tag_mode`` says."""
        offset = SPLITS.index(split)
        return PlantedShapesDataset(
            self._sizes[split], seed=3 * self.seed + offset, tag_mode=tag_mode, tag_stream=offset, **self._options
        )
