"""Shortcuts with no place, shared by the ``discovery`` and ``properties`` benchmarks: a change of every pixel
of one class's images (a colour cast, a darkening, a blur, extra noise), made in pixel space ([0, 1] units)
under the datamodule's normalisation, on its training, validation and test images alike.

:class:`ShortcutDataset` is the one wrapper (a class's images, every image, or a share of every class's);
:data:`SHORTCUTS` the one table; :func:`add_shortcut` puts one on a datamodule's splits and
:func:`shortcut_transplanted` gives it to the other classes' test images (the spurious score's images).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from gradskip_lightning.data.base import ImageClassificationDataModule, LabelledDataset, LabelledSubset
from gradskip_lightning.metrics.perturbation import gaussian_blur
from gradskip_lightning.shortcuts.image_properties import PropertyName
from gradskip_lightning.shortcuts.tags import TagMode

#: (pixels (C, H, W) in [0, 1] units, the item's index) -> the changed pixels (not clamped).
Change = Callable[[Tensor, int], Tensor]
ShortcutName = Literal["cast_weak", "cast", "cast_strong", "dim", "blur", "noise"]


@dataclass(frozen=True)
class Shortcut:
    """A change of a whole image: the property it should be found by, in words, and the change."""

    property: PropertyName
    describe: str
    change: Change


def colour_cast(shift: tuple[float, ...]) -> Change:
    """Adds ``shift`` (C,) to the pixels, in [0, 1] units.

    >>> colour_cast((0.25, 0.0, -0.25))(torch.full((3, 1, 1), 0.5), 0).flatten().tolist()
    [0.75, 0.5, 0.25]
    """
    offset = torch.tensor(shift).reshape(-1, 1, 1)
    return lambda pixels, index: pixels + offset


def _noisy(pixels: Tensor, index: int) -> Tensor:
    noise = torch.randn(pixels.shape, generator=torch.Generator().manual_seed(index))
    return pixels + 0.1 * noise


#: The shortcuts; ``cast`` is the discovery benchmark's colour cast since its first version (added to the pixels).
SHORTCUTS: dict[ShortcutName, Shortcut] = {
    "cast_weak": Shortcut("colour", "colour cast (0.04, 0, -0.04)", colour_cast((0.04, 0.0, -0.04))),
    "cast": Shortcut("colour", "colour cast (0.12, 0, -0.12)", colour_cast((0.12, 0.0, -0.12))),
    "cast_strong": Shortcut("colour", "colour cast (0.24, 0, -0.24)", colour_cast((0.24, 0.0, -0.24))),
    "dim": Shortcut("brightness", "darker by 0.15", lambda pixels, index: pixels - 0.15),
    "blur": Shortcut("sharpness", "Gaussian blur, sigma 1 px", lambda p, index: gaussian_blur(p[None], 5, 1.0)[0]),
    "noise": Shortcut("noise", "white noise, sigma 0.1", _noisy),
}


class ShortcutDataset(LabelledDataset):
    """``dataset`` with ``change`` applied, in pixel space, to the images of class ``target`` (with
    ``everywhere``: of every class, on the items a seeded draw picks with probability ``share``);
    ``mean``/``std`` (C values) are the images' normalisation.
    """

    def __init__(
        self,
        dataset: LabelledDataset,
        target: int,
        change: Change,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        everywhere: bool = False,
        share: float = 1.0,
    ) -> None:
        self.dataset, self.target, self.change, self.everywhere = dataset, target, change, everywhere
        self.mean, self.std = torch.tensor(mean)[:, None, None], torch.tensor(std)[:, None, None]
        self.labels = dataset.labels
        self.picked = torch.rand(len(dataset), generator=torch.Generator().manual_seed(0)) < share

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple:
        item = tuple(self.dataset[index])
        if bool(self.picked[index]) if self.everywhere else int(self.labels[index]) == self.target:
            pixels = self.change(item[0] * self.std + self.mean, index)
            item = ((pixels - self.mean) / self.std, *item[1:])
        return item


def add_shortcut(
    datamodule: ImageClassificationDataModule, target: int, change: Change, everywhere: bool = False, share: float = 1
) -> None:
    """Make ``datamodule``'s splits carry ``change`` (as :class:`ShortcutDataset`: on class ``target``, or with
    ``everywhere`` on ``share`` of every class's images); its ``make_split`` is wrapped."""
    make_split: Callable[[str, TagMode], LabelledDataset] = datamodule.make_split
    mean, std = tuple(datamodule.mean), tuple(datamodule.std)

    def with_shortcut(split: str, tag_mode: TagMode) -> LabelledDataset:
        return ShortcutDataset(make_split(split, tag_mode), target, change, mean, std, everywhere, share)

    datamodule.make_split = with_shortcut  # type: ignore[method-assign]  # one instance, not the class


def shortcut_transplanted(datamodule: ImageClassificationDataModule, target: int, change: Change) -> LabelledDataset:
    """The test images of the classes other than ``target``, every one with ``change`` (without the shortcut
    :func:`add_shortcut` put on the split): the share of them predicted as ``target`` is the spurious score."""
    test = datamodule.make_split("test", "none")
    if isinstance(test, ShortcutDataset):
        test = test.dataset
    others = LabelledSubset(test, (test.labels != target).nonzero()[:, 0])
    return ShortcutDataset(others, target, change, tuple(datamodule.mean), tuple(datamodule.std), everywhere=True)
