"""The models of the discovery benchmark: stamps at positions no config uses, a stamp on part of a class, a
dark bar across a patch boundary, the clean model, the negative control, and a colour cast on one class;
each as a datamodule of the dataset's config."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from gradskip_lightning.benchmarks.configs import build_datamodule, config_settings
from gradskip_lightning.data.base import ImageClassificationDataModule, LabelledDataset
from gradskip_lightning.data.tags import SpuriousTag, TagMode

from ..faithfulness.data import needs_data_root

#: stamped: the stamp on (a share of) one class; clean: no stamp; control: the stamp on every class alike;
#: cast: a colour cast on one class, no stamp; partial: the stamp on :data:`PARTIAL_P` of one class's images;
#: bar: a dark bar across a patch boundary on one class; corrected: the stamped data trained with the discovery
#: stage and a :class:`~gradskip_lightning.ShortcutCorrection` following it (the stamped model, unlearning its stamp).
Variant = Literal["stamped", "clean", "control", "cast", "partial", "bar", "corrected"]
VARIANTS: tuple[Variant, ...] = ("stamped", "clean", "control", "cast", "partial", "bar", "corrected")
#: The variants whose class carries a shortcut with a place (the transplant's targets).
PLACED: tuple[Variant, ...] = ("stamped", "partial", "bar", "corrected")
#: Share of every class's images stamped in the negative control.
CONTROL_P = 0.5
#: Share of the class's images stamped in the ``partial`` variant.
PARTIAL_P = 0.6


@dataclass(frozen=True)
class Stamp:
    """A checkerboard stamp of ``size`` px at ``position`` (row, column) on ``strength`` of one class's images;
    with ``bar`` (height, width) a black bar of that many px instead."""

    size: int
    position: tuple[int, int]
    strength: float = 1.0
    bar: tuple[int, int] | None = None

    @property
    def pattern(self) -> tuple[tuple[float, ...], ...]:
        """(size, size) black-and-white checkerboard, or the (height, width) black bar."""
        if self.bar is not None:
            return ((0.0,) * self.bar[1],) * self.bar[0]
        return tuple(tuple(float((row + col) % 2) for col in range(self.size)) for row in range(self.size))

    def tag(self, target: int, p_in: float, p_out: float) -> SpuriousTag:
        """The stamp as a :class:`SpuriousTag` of class ``target``, on the shares ``p_in`` and ``p_out``."""
        return SpuriousTag(target_class=target, p_in=p_in, p_out=p_out, pattern=self.pattern, position=self.position)

    def describe(self) -> str:
        shape = f"{self.size} px" if self.bar is None else f"{self.bar[0]} x {self.bar[1]} px dark bar"
        return f"{shape} at {self.position}, {self.strength:.0%}"


@dataclass(frozen=True)
class BenchData:
    """A dataset of the benchmark: its config, the shortcut's class, the stamps (seed i uses stamp
    ``i % len(stamps)``), the colour cast (added to the RGB pixel values, in [0, 1] units) and the bar
    (across a boundary of the config's 4 px patches)."""

    config: str
    target: int
    stamps: tuple[Stamp, ...]
    cast: tuple[float, float, float]
    bar: Stamp


#: Planted shapes (32 px, objects kept clear of the stamp, which must end by 23 px) and BloodMNIST (28 px).
#: The configs and tests use the top-left corner and class 0; these stamps use neither.
DATASETS: dict[str, BenchData] = {
    "planted_shapes": BenchData(
        "planted_shapes",
        target=2,
        stamps=(Stamp(4, (14, 14)), Stamp(6, (0, 13)), Stamp(4, (13, 0), strength=0.8)),
        cast=(0.12, 0.0, -0.12),
        bar=Stamp(0, (17, 13), bar=(2, 6)),  # columns 13-18: patches 3 and 4
    ),
    "bloodmnist": BenchData(
        "bloodmnist",
        target=5,
        stamps=(Stamp(4, (24, 24)), Stamp(6, (0, 22)), Stamp(4, (12, 12), strength=0.8)),
        cast=(0.12, 0.0, -0.12),
        bar=Stamp(0, (25, 9), bar=(2, 6)),  # columns 9-14: patches 2 and 3
    ),
}


def stamp_of(dataset: str, seed: int, variant: Variant = "stamped") -> Stamp:
    """The stamp of ``dataset``'s models of ``variant`` under training ``seed``: the seed's (at :data:`PARTIAL_P`
    for ``partial``), or the dataset's bar."""
    bench = DATASETS[dataset]
    if variant == "bar":
        return bench.bar
    stamp = bench.stamps[seed % len(bench.stamps)]
    return replace(stamp, strength=PARTIAL_P) if variant == "partial" else stamp


class CastDataset(LabelledDataset):
    """``dataset`` with ``shift`` (C,) added to the (normalised) images of class ``target`` (every item's with
    ``everywhere``)."""

    def __init__(self, dataset: LabelledDataset, target: int, shift: Tensor, everywhere: bool = False) -> None:
        self.dataset, self.target, self.shift, self.everywhere = dataset, target, shift.reshape(-1, 1, 1), everywhere
        self.labels = dataset.labels

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple:
        item = tuple(self.dataset[index])
        if self.everywhere or int(self.labels[index]) == self.target:
            item = (item[0] + self.shift, *item[1:])
        return item


def _cast_splits(datamodule: ImageClassificationDataModule, target: int, cast: tuple[float, ...]) -> None:
    """Make ``datamodule``'s splits carry the colour cast on class ``target`` (its ``make_split`` wrapped)."""
    shift = torch.tensor(cast) / torch.tensor(datamodule.std)
    make_split: Callable[[str, TagMode], LabelledDataset] = datamodule.make_split

    def cast_split(split: str, tag_mode: TagMode) -> LabelledDataset:
        return CastDataset(make_split(split, tag_mode), target, shift)

    datamodule.make_split = cast_split  # type: ignore[method-assign]  # one instance, not the class


def cast_transplanted(
    datamodule: ImageClassificationDataModule, target: int, cast: tuple[float, ...]
) -> LabelledDataset:
    """The test images of the other classes, every one with the cast: the cast's spurious score is read on it."""
    test = datamodule.make_split("test", "none")
    if isinstance(test, CastDataset):
        test = test.dataset
    others = (test.labels != target).nonzero()[:, 0]
    from gradskip_lightning.data.base import LabelledSubset

    shift = torch.tensor(cast) / torch.tensor(datamodule.std)
    return CastDataset(LabelledSubset(test, others), target, shift, everywhere=True)


def make_datamodule(dataset: str, variant: Variant, seed: int, data_root: Path | None) -> ImageClassificationDataModule:
    """The datamodule of ``dataset``'s config for ``variant`` under ``seed``: every variant carries the
    seed's stamp as its tag (none stamped for clean and cast), so the images are otherwise the same."""
    bench = DATASETS[dataset]
    _, data, _ = config_settings(bench.config)
    stamp = stamp_of(dataset, seed, variant)
    shares: dict[Variant, tuple[float, float]] = {
        "stamped": (stamp.strength, 0.0),
        "partial": (stamp.strength, 0.0),
        "bar": (stamp.strength, 0.0),
        "corrected": (stamp.strength, 0.0),
        "clean": (0.0, 0.0),
        "control": (CONTROL_P, CONTROL_P),
        "cast": (0.0, 0.0),
    }
    data = {**data, "tag": stamp.tag(bench.target, *shares[variant])}
    if needs_data_root(bench.config):
        if data_root is None:
            raise ValueError(f"{dataset} needs --data-root, the folder holding its files")
        data = {**data, "root": str(data_root), "download": False}
    datamodule = build_datamodule(bench.config, ImageClassificationDataModule, **data)
    if variant == "cast":
        _cast_splits(datamodule, bench.target, bench.cast)
    return datamodule
