"""How a correction gives images a class's image-wide property: the discovery stage's transfers, but for colour.

The stage tests ``colour`` by Reinhard's shift of the α and β medians (log cone space): a gain on each cone, as a
white balance or a change of stain concentrations makes. An acquisition change can also add to the pixels (a
colour cast, an offset). Matched on the medians (in microscopy, the bright background), a log-space shift gives
the darker pixels (the cells) about half of such an offset: on BloodMNIST a correction by it left a model its cast
on the cells (spurious score 0.39-0.58 after 3 corrected epochs), and an additive correction left a white
balance the same way (0.24-0.34), each unlearning its own kind only (docs/results/correction.md). A flag does not
say which kind made the shortcut, so a correction gives each image one of the two, drawn half and half:

- the stage's multiplicative transfer (``colour``: the α and β medians; ``signature``: those and the luminance
  median, after the registration, interlacing, noise, sharpness and stripes);
- an additive one: each channel shifted by the difference of its median from the donor's (``colour``: that
  difference without its luminance, Rec. 601; ``signature``: all of it, which carries the colour and the
  brightness at once, after the registration, interlacing, noise, sharpness and stripes).

The statistics of ``colour`` are then ``alpha, beta, red, green, blue`` (red, green, blue: the channels'
medians), of ``signature`` the stage's seventeen (α, β, luminance, high-frequency share, noise, the two channels'
displacements and magnifications, the row and column patterns, the fields' displacements) and the three medians.
Every other property is the stage's own (:data:`~.image_properties.PROPERTIES`), one added there included.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .image_properties import (
    PROPERTIES,
    RGB_CHANNELS,
    SIGNATURE_PARTS,
    Draws,
    GlobalProperty,
    PropertyName,
    brightness_transfer,
    colour_statistic,
    colour_transfer,
    draw,
    luminance,
    signature_parts,
    signature_statistic,
)

__all__ = ["CORRECTION_TRANSFERS", "channel_medians", "correction_property", "median_offset"]


def channel_medians(pixels: Tensor) -> Tensor:
    """(B, C): each channel's median of pixels (B, C, H, W) (the lower middle value of an even count).

    Example:
        >>> channel_medians(torch.tensor([[[[0.25, 0.5, 1.0]], [[0.5, 0.5, 0.0]]]])).tolist()
        [[0.5, 0.5]]
    """
    return pixels.flatten(2).median(dim=2).values


def median_offset(pixels: Tensor, targets: Tensor, keep_luminance: bool) -> Tensor:
    """Pixels (B, C, H, W) each channel shifted by ``targets`` (B, C) minus its median; with ``keep_luminance``, by
    that shift less its luminance (the same on every channel), so that the image's brightness stays.

    Example:
        >>> grey = torch.full((1, 3, 1, 2), 0.5, dtype=torch.float64)
        >>> median_offset(grey, torch.tensor([[0.6, 0.5, 0.4]], dtype=torch.float64), False)[0, :, 0, 0].tolist()
        [0.6, 0.5, 0.4]
    """
    shift = targets - channel_medians(pixels)
    if keep_luminance:
        shift = shift - luminance(shift[:, :, None, None])[:, 0, :1]
    return pixels + shift[:, :, None, None]


def _either(multiplicative: Tensor, additive: Tensor, draws: Draws) -> Tensor:
    """Per image of (B, C, H, W), ``additive`` or ``multiplicative``, drawn half and half from ``draws``."""
    drawn = draw((len(additive),), draws, torch.rand, torch.float32) < 0.5
    return torch.where(drawn.to(additive.device)[:, None, None, None], additive, multiplicative)


def corrected_colour_statistic(pixels: Tensor) -> Tensor:
    """(B, 5): the α and β medians (the stage's colour) and the three channels' medians of RGB pixels (B, 3, H, W)."""
    return torch.cat([colour_statistic(pixels), channel_medians(pixels)], dim=1)


def corrected_colour_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """RGB pixels (B, 3, H, W) given ``targets`` (B, 5) of :func:`corrected_colour_statistic`: each image the stage's
    shift of α and β, or the channels' median offset without its luminance, drawn half and half."""
    return _either(colour_transfer(pixels, targets[:, :2]), median_offset(pixels, targets[:, 2:], True), draws)


def corrected_signature_statistic(pixels: Tensor) -> Tensor:
    """(B, 32): the stage's signature (:func:`~.image_properties.signature_statistic`, 29) and the
    channels' medians of RGB pixels (B, 3, H, W)."""
    return torch.cat([signature_statistic(pixels), channel_medians(pixels)], dim=1)


def corrected_signature_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """RGB pixels (B, 3, H, W) given ``targets`` (B, 32) of :func:`corrected_signature_statistic`: the registration,
    interlacing, noise, sharpness, stripes and mosaic, then each image the stage's colour and brightness or the
    channels' whole median offset, half and half (the noise's draws and the choice from ``draws``)."""
    stage = len(PROPERTIES["signature"].statistics)
    parts, medians = signature_parts(targets[:, :stage]), targets[:, stage:]
    for name in SIGNATURE_PARTS:
        if name not in ("colour", "brightness"):
            pixels = PROPERTIES[name].transfer(pixels, parts[name], draws)
    multiplicative = brightness_transfer(colour_transfer(pixels, parts["colour"]), parts["brightness"])
    return _either(multiplicative, median_offset(pixels, medians, False), draws)


#: The properties whose correction differs from the stage's transfer (module docstring), by name.
CORRECTION_TRANSFERS: dict[PropertyName, GlobalProperty] = {
    "colour": GlobalProperty(
        "colour", PROPERTIES["colour"].what, (*PROPERTIES["colour"].statistics, *RGB_CHANNELS), 3,
        corrected_colour_statistic, corrected_colour_transfer,
    ),
    "signature": GlobalProperty(
        "signature", PROPERTIES["signature"].what, (*PROPERTIES["signature"].statistics, *RGB_CHANNELS), 3,
        corrected_signature_statistic, corrected_signature_transfer,
    ),
}  # fmt: skip


def correction_property(name: PropertyName) -> GlobalProperty:
    """How a correction gives property ``name``: its :data:`CORRECTION_TRANSFERS` row, else the stage's.

    Example:
        >>> correction_property("colour").statistics, correction_property("noise") is PROPERTIES["noise"]
        (('alpha', 'beta', 'red', 'green', 'blue'), True)
    """
    return CORRECTION_TRANSFERS.get(name, PROPERTIES[name])
