"""The benchmarks' global shortcuts change the pixels of their class only, of every image, or of a share of every
class's; the colour cast keeps the discovery benchmark's meaning (a shift of the pixels, in [0, 1] units); every
acquisition family moves its property and has a control; the stain change is one in optical density."""

from __future__ import annotations

import torch
from torch import Tensor

from benchmarks.discovery.variants import DEFAULT_VARIANTS, GLOBAL, GlobalVariant
from benchmarks.shortcuts import ACQUISITION, EOSIN, HAEMATOXYLIN, HELD_OUT, SHORTCUTS, ShortcutDataset, stain_change
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.data.base import LabelledDataset
from gradskip_lightning.shortcuts.image_properties import PROPERTIES, PROPERTY_NAMES

MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
NORMALISED = Normalisation(MEAN, STD)


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
    dataset = ShortcutDataset(Images(), 1, dim, NORMALISED)
    assert torch.equal(dataset[0][0], torch.zeros(3, 8, 8))
    assert torch.allclose(dataset[1][0], torch.full((3, 8, 8), -0.15 / 0.25))  # 0.15 darker, in pixels
    everywhere = ShortcutDataset(Images(), 1, dim, NORMALISED, everywhere=True)
    assert torch.allclose(everywhere[0][0], everywhere[1][0]) and len(everywhere) == 4
    noisy = ShortcutDataset(Images(), 1, SHORTCUTS["noise"].change, NORMALISED)
    assert torch.equal(noisy[1][0], noisy[1][0]) and not torch.equal(noisy[1][0], noisy[3][0])  # seeded per item
    assert all(shortcut.property in PROPERTY_NAMES for shortcut in SHORTCUTS.values())


def test_the_cast_shifts_the_normalised_images_by_its_pixel_shift_over_the_std():
    cast = ShortcutDataset(Images(), 1, SHORTCUTS["cast"].change, NORMALISED)[1][0]
    assert torch.allclose(cast[:, 0, 0], torch.tensor([0.12, 0.0, -0.12]) / 0.25)  # as the first version added it
    weak, strong = (
        ShortcutDataset(Images(), 1, SHORTCUTS[n].change, NORMALISED)[1][0] for n in ("cast_weak", "cast_strong")
    )
    assert torch.allclose(3 * weak, cast) and torch.allclose(strong, 2 * cast)


def test_a_share_of_every_class_gets_the_change_the_same_items_every_time():
    control = ShortcutDataset(Images(400), 0, SHORTCUTS["dim"].change, NORMALISED, everywhere=True, share=0.5)
    changed = torch.tensor([bool(control[i][0].ne(0).any()) for i in range(400)])
    labels = control.labels
    assert 0.4 < changed[labels == 0].double().mean() < 0.6 and 0.4 < changed[labels == 1].double().mean() < 0.6
    again = ShortcutDataset(Images(400), 0, SHORTCUTS["dim"].change, NORMALISED, everywhere=True, share=0.5)
    assert torch.equal(again.picked, control.picked)


def _cell() -> Tensor:
    """(3, 28, 28) a dark purple cell on a pale field, with a little texture."""
    rows, cols = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
    cell = ((rows - 14) ** 2 + (cols - 14) ** 2 < 64).float()
    texture = 0.03 * torch.randn(3, 28, 28, generator=torch.Generator().manual_seed(0))
    return (torch.stack([0.85 - 0.35 * cell, 0.8 - 0.5 * cell, 0.9 - 0.2 * cell]) + texture).clamp(0, 1)


def test_every_acquisition_family_moves_its_property_is_repeatable_and_has_a_control_variant():
    pixels = _cell()
    for name in ACQUISITION:
        shortcut = SHORTCUTS[name]
        changed = shortcut.change(pixels, 3)
        assert changed.shape == pixels.shape and changed.dtype == pixels.dtype
        assert torch.equal(changed, shortcut.change(pixels, 3))  # the same item, the same change (noise seeded)
        statistic = PROPERTIES[shortcut.property].statistic
        moved = (statistic(changed[None].double()) - statistic(pixels[None].double())).abs().max().item()
        assert moved > 0.01, (name, moved)  # its own property's statistic moves
        assert GLOBAL[name] == GlobalVariant(name) and GLOBAL[f"{name}_control"] == GlobalVariant(name, control=True)
    opt_in = {v for v in GLOBAL if GLOBAL[v].shortcut in (*ACQUISITION, *HELD_OUT)}
    assert not set(GLOBAL) - set(DEFAULT_VARIANTS) - opt_in


def test_every_held_out_family_changes_the_image_repeatably_is_opt_in_and_has_a_control_variant():
    pixels = _cell()
    assert not set(HELD_OUT) & set(ACQUISITION)
    for name in HELD_OUT:
        changed = SHORTCUTS[name].change(pixels, 3)
        assert changed.shape == pixels.shape and changed.dtype == pixels.dtype
        assert torch.equal(changed, SHORTCUTS[name].change(pixels, 3))  # stuck pixels seeded per item
        assert (changed - pixels).abs().mean() > 0.003, name  # it changes the image (1 % stuck pixels: 0.005)
        assert name not in DEFAULT_VARIANTS and f"{name}_control" not in DEFAULT_VARIANTS
        assert GLOBAL[name] == GlobalVariant(name) and GLOBAL[f"{name}_control"] == GlobalVariant(name, control=True)


def test_the_stain_change_scales_the_stain_concentrations_in_optical_density():
    pixels = _cell()
    stains = torch.nn.functional.normalize(torch.tensor([HAEMATOXYLIN, EOSIN]), dim=1).T  # (3, 2)
    density = -pixels.clamp(min=1 / 255).log()
    changed = -stain_change((1.3, 0.8))(pixels, 0).log()
    unmix = torch.linalg.pinv(stains)
    before, after = (torch.einsum("sc,chw->shw", unmix, d) for d in (density, changed))
    assert torch.allclose(after[0], 1.3 * before[0], atol=1e-4) and torch.allclose(after[1], 0.8 * before[1], atol=1e-4)
    residual = density - torch.einsum("cs,shw->chw", stains, before)
    assert torch.allclose(changed - torch.einsum("cs,shw->chw", stains, after), residual, atol=1e-4)  # the rest kept
