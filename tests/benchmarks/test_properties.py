"""The properties subcommand: its shortcuts change only their class's pixels; its report scores hand-made records."""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from gradskip_lightning.benchmarks.properties import SHORTCUTS, PropertyRecord, ShortcutDataset, report
from gradskip_lightning.data.base import LabelledDataset
from gradskip_lightning.metrics.image_properties import PROPERTY_NAMES

MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)


class Images(LabelledDataset):
    """Four grey images (normalised with MEAN/STD), classes 0, 1, 0, 1."""

    def __init__(self) -> None:
        self.labels = torch.tensor([0, 1, 0, 1])
        self.images = torch.zeros(4, 3, 8, 8)

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> tuple:
        return self.images[index], self.labels[index]


def test_a_shortcut_changes_the_pixels_of_its_class_only_or_of_every_image():
    dim = SHORTCUTS["dim"].change
    assert dim is not None and SHORTCUTS["dim"].property == "brightness"
    dataset = ShortcutDataset(Images(), 1, dim, MEAN, STD)
    assert torch.equal(dataset[0][0], torch.zeros(3, 8, 8))
    assert torch.allclose(dataset[1][0], torch.full((3, 8, 8), -0.15 / 0.25))  # 0.15 darker, in pixels
    everywhere = ShortcutDataset(Images(), 1, dim, MEAN, STD, everywhere=True)
    assert torch.allclose(everywhere[0][0], everywhere[1][0]) and len(everywhere) == 4
    noisy = ShortcutDataset(Images(), 1, SHORTCUTS["noise"].change, MEAN, STD)  # type: ignore[arg-type]
    assert torch.equal(noisy[1][0], noisy[1][0]) and not torch.equal(noisy[1][0], noisy[3][0])  # seeded per item
    assert all(shortcut.property in PROPERTY_NAMES for shortcut in SHORTCUTS.values())


BASE = PropertyRecord(
    dataset="d", seed=0, variant="clean", shortcut_property="", target=-1, spurious_score=math.nan, accuracy=1.0,
    property="colour", label=0, recipients=8, flip_rate=0.1, control_flip_rate=0.0, separability=0.6, seconds=1.0,
)  # fmt: skip


def test_the_report_counts_learned_shortcuts_found_and_false_alarms():
    cast = replace(BASE, variant="cast", shortcut_property="colour", target=1, spurious_score=0.99)
    records = [
        BASE,
        replace(BASE, label=1, flip_rate=0.5, control_flip_rate=0.25),  # a clean class at 0.25
        replace(cast, label=0),
        replace(cast, label=1, flip_rate=1.0, control_flip_rate=0.1),  # the cast: 0.9
        replace(cast, label=1, property="brightness", flip_rate=0.5),  # the cast's class, another property
        replace(cast, variant="blur", shortcut_property="sharpness", spurious_score=0.1, property="sharpness"),
    ]
    text = report(records, "c", {})
    assert "| excess | 0.2 | 1/1 | 1/4 | d clean s0 c1 colour |" in text  # the blur was not learned: not counted
    assert "| excess | 0.3 | 1/1 | 0/4 |  |" in text and "| excess | max alarm | 0.250 |  |  |" in text
    assert "| d | colour | 0.25 (2) | 0.10 (1) | 0.90 |" in text
