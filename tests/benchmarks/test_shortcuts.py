"""The benchmarks' global shortcuts change the pixels of their class only, of every image, or of a share of every
class's; the colour cast keeps the discovery benchmark's meaning (a shift of the pixels, in [0, 1] units)."""

from __future__ import annotations

import torch

from benchmarks.shortcuts import SHORTCUTS, ShortcutDataset
from gradskip_lightning.data.base import LabelledDataset
from gradskip_lightning.shortcuts.image_properties import PROPERTY_NAMES

MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)


class Images(LabelledDataset):
    """``n`` grey images (normalised with MEAN/STD), classes 0, 1, 0, 1, ..."""

    def __init__(self, n: int = 4) -> None:
        self.labels = torch.arange(n) % 2
        self.images = torch.zeros(n, 3, 8, 8)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple:
        return self.images[index], self.labels[index]


def test_a_shortcut_changes_the_pixels_of_its_class_only_or_of_every_image():
    dim = SHORTCUTS["dim"].change
    assert SHORTCUTS["dim"].property == "brightness"
    dataset = ShortcutDataset(Images(), 1, dim, MEAN, STD)
    assert torch.equal(dataset[0][0], torch.zeros(3, 8, 8))
    assert torch.allclose(dataset[1][0], torch.full((3, 8, 8), -0.15 / 0.25))  # 0.15 darker, in pixels
    everywhere = ShortcutDataset(Images(), 1, dim, MEAN, STD, everywhere=True)
    assert torch.allclose(everywhere[0][0], everywhere[1][0]) and len(everywhere) == 4
    noisy = ShortcutDataset(Images(), 1, SHORTCUTS["noise"].change, MEAN, STD)
    assert torch.equal(noisy[1][0], noisy[1][0]) and not torch.equal(noisy[1][0], noisy[3][0])  # seeded per item
    assert all(shortcut.property in PROPERTY_NAMES for shortcut in SHORTCUTS.values())


def test_the_cast_shifts_the_normalised_images_by_its_pixel_shift_over_the_std():
    cast = ShortcutDataset(Images(), 1, SHORTCUTS["cast"].change, MEAN, STD)[1][0]
    assert torch.allclose(cast[:, 0, 0], torch.tensor([0.12, 0.0, -0.12]) / 0.25)  # as the first version added it
    weak, strong = (
        ShortcutDataset(Images(), 1, SHORTCUTS[n].change, MEAN, STD)[1][0] for n in ("cast_weak", "cast_strong")
    )
    assert torch.allclose(3 * weak, cast) and torch.allclose(strong, 2 * cast)


def test_a_share_of_every_class_gets_the_change_the_same_items_every_time():
    control = ShortcutDataset(Images(400), 0, SHORTCUTS["dim"].change, MEAN, STD, everywhere=True, share=0.5)
    changed = torch.tensor([bool(control[i][0].ne(0).any()) for i in range(400)])
    labels = control.labels
    assert 0.4 < changed[labels == 0].double().mean() < 0.6 and 0.4 < changed[labels == 1].double().mean() < 0.6
    again = ShortcutDataset(Images(400), 0, SHORTCUTS["dim"].change, MEAN, STD, everywhere=True, share=0.5)
    assert torch.equal(again.picked, control.picked)
