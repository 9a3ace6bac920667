"""The worked example of docs/adapters.md, *Adding a global property*, run: a ``contrast`` property (the
spread of luminance) registered for the test only, tested by the discovery stage's transfer test, logged
under its own keys, and given back by a correction. The guide shows the marked parts of this file."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from gradskip_lightning import Normalisation
from gradskip_lightning.engine.discovery.properties import property_scalars
from gradskip_lightning.shortcuts import artifacts, discovery_properties, image_properties
from gradskip_lightning.shortcuts.artifacts import PropertyPaste
from gradskip_lightning.shortcuts.discovery_properties import discover_properties
from gradskip_lightning.shortcuts.image_properties import GlobalProperty, PixelSpace, luminance


# --8<-- [start:property]
def contrast_statistic(pixels: Tensor) -> Tensor:
    """(B, 1): the standard deviation of the luminance of pixels (B, C, H, W).

    Example:
        >>> contrast_statistic(torch.tensor([[[[0.25, 0.75]]]], dtype=torch.float64)).tolist()
        [[0.25]]
    """
    return luminance(pixels).flatten(1).std(dim=1, correction=0)[:, None]


def contrast_transfer(pixels: Tensor, targets: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Pixels (B, C, H, W) whose luminance spread is ``targets`` (B, 1): every channel scaled about the
    image's mean luminance (which stays) by target / spread (exact; a flat image stays flat)."""
    mean = luminance(pixels).flatten(1).mean(dim=1)[:, None, None, None]
    gain = targets[:, 0] / contrast_statistic(pixels)[:, 0].clamp_min(1e-12)
    return mean + (pixels - mean) * gain[:, None, None, None]


CONTRAST = GlobalProperty(
    "contrast",  # in the package, a name of the PropertyName Literal
    "contrast (luminance spread)",
    ("luminance_std",),
    None,  # any channel count
    contrast_statistic,
    contrast_transfer,
)
# --8<-- [end:property]


@pytest.fixture
def contrast_registered(monkeypatch):
    """``contrast`` in :data:`PROPERTIES` and in the name tuples that validate names, for one test."""
    monkeypatch.setitem(image_properties.PROPERTIES, "contrast", CONTRAST)
    names = (*image_properties.PROPERTY_NAMES, "contrast")
    for module in (image_properties, discovery_properties, artifacts):
        monkeypatch.setattr(module, "PROPERTY_NAMES", names)


def test_the_transfer_reaches_its_targets():
    pixels = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    targets = torch.tensor([[0.05], [0.1], [0.2], [0.3]], dtype=torch.float64)
    given = contrast_transfer(pixels, targets)
    torch.testing.assert_close(contrast_statistic(given), targets)
    torch.testing.assert_close(luminance(given).mean(dim=(1, 2)), luminance(pixels).mean(dim=(1, 2)))


# --8<-- [start:discovery]
def contrast_model(images: Tensor) -> Tensor:
    """Three classes (pixels = inputs): 1 if the luminance spread exceeds 0.15, else 0 (dark) or 2 (bright)."""
    spread = contrast_statistic(images.double())[:, 0] - 0.15
    bright = luminance(images.double()).flatten(1).mean(dim=1) - 0.5
    return torch.stack([-10 * bright, 100 * spread, 10 * bright], dim=1).float()


def probes(count: int = 8) -> tuple[Tensor, Tensor]:
    """``count`` grey probes per class: flat dark (0), contrasted (1), flat bright (2); (3 count, 3, 8, 8)."""
    noise = torch.rand(3 * count, 1, 8, 8, generator=torch.Generator().manual_seed(0)).expand(-1, 3, -1, -1) - 0.5
    level = torch.tensor([0.35, 0.5, 0.65]).repeat_interleave(count)[:, None, None, None]
    spread = torch.tensor([0.1, 0.8, 0.1]).repeat_interleave(count)[:, None, None, None]
    return level + spread * noise, torch.arange(3).repeat_interleave(count)


def test_discovery_flags_the_class_a_model_reads_from_contrast(contrast_registered):
    images, classes = probes()
    space = PixelSpace.of(images, Normalisation((0.0,), (1.0,)))  # the probes are pixels already
    found = discover_properties(
        contrast_model, images, classes, 3, ["contrast", "brightness"], space=space, alert_threshold=0.4
    )
    assert found.transfers["contrast"][1].flip_rate == 1.0  # every other probe, given class 1's spread
    assert found.transfers["contrast"][1].control_flip_rate == 0.0  # a third class's spread flips none
    assert found.flagged["contrast"].tolist() == [False, True, False]
    scalars = property_scalars(found, prefix="gradskip/")  # the callback's default log_prefix
    assert scalars["discovery/gradskip/contrast/suspicion/class_1"] == 1.0
    assert scalars["discovery/gradskip/contrast/flagged"] == 1.0  # one class flagged for contrast
    # --8<-- [end:discovery]
    assert "discovery/gradskip/contrast/p_value/class_1" in scalars


def test_a_correction_gives_other_images_the_flagged_class_contrast(contrast_registered):
    # --8<-- [start:correction]
    images, classes = probes()
    space = PixelSpace.of(images, Normalisation((0.0,), (1.0,)))
    paste = PropertyPaste.from_probes(1, "contrast", images[classes == 1], space)
    others = images[classes != 1]
    given = paste.apply(others, torch.Generator().manual_seed(0))
    assert (contrast_model(given).argmax(dim=1) == 1).all()  # the shortcut, now on every class
    assert paste.describe() == "contrast shortcut" and paste.scalars().keys() == {"luminance_std"}
    # --8<-- [end:correction]
    erased = paste.erase(images[classes == 1], others, torch.Generator().manual_seed(0))
    assert (contrast_model(erased).argmax(dim=1) != 1).all()  # and taken off the class
