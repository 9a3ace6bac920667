"""Known answers of the image-wide properties: every transfer reaches its target statistics, a blur scales
the high frequencies by a known factor, noise of a known deviation is measured as such, the pixel space
maps inputs to [0, 1] and back."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.shortcuts import image_properties as ip
from gradskip_lightning.shortcuts.image_properties import (
    PROPERTIES,
    PROPERTY_NAMES,
    PixelSpace,
    brightness_transfer,
    channel_magnification,
    colour_statistic,
    colour_transfer,
    illumination_statistic,
    illumination_transfer,
    interlacing_statistic,
    interlacing_transfer,
    luminance,
    mosaic_statistic,
    mosaic_transfer,
    noise_statistic,
    noise_transfer,
    registration_statistic,
    registration_transfer,
    sharpness_statistic,
    sharpness_transfer,
    stripes_statistic,
    stripes_transfer,
)
from tests.shortcuts.test_discovery_properties import bayer_imbalance


def textured(count: int, channels: int = 3, side: int = 28, seed: int = 0) -> Tensor:
    """Pixels (count, channels, side, side) float64 in [0.25, 0.75]: smoothed noise of different tints and grain."""
    generator = torch.Generator().manual_seed(seed)
    raw = torch.rand(count, channels, side, side, generator=generator, dtype=torch.float64)
    smooth = F.avg_pool2d(F.pad(raw, (1, 1, 1, 1), mode="reflect"), 3, 1)
    grain = torch.linspace(0.2, 0.8, count, dtype=torch.float64)[:, None, None, None]
    tint = torch.rand(count, channels, 1, 1, generator=generator, dtype=torch.float64) * 0.2
    return 0.25 + 0.3 * (grain * raw + (1 - grain) * smooth) + tint


def test_the_registry_matches_the_literal_and_every_statistic_has_its_names():
    assert (
        tuple(PROPERTIES)
        == PROPERTY_NAMES
        == (
            "colour", "hue", "brightness", "sharpness", "noise", "compression", "tone", "registration", "stripes",
            "interlacing", "fixed_pattern", "illumination", "mosaic", "signature",
        )
    )  # fmt: skip
    pixels = textured(3)[..., :20]  # 28 x 20: a line property's size is the image's H + W
    for name, prop in PROPERTIES.items():
        size = 48 if name == "fixed_pattern" else len(prop.statistics)
        assert prop.name == name and prop.size(28, 20) == size and prop.statistic(pixels).shape == (3, size)


def in_register(count: int, side: int = 28, seed: int = 0) -> Tensor:
    """Pixels (count, 3, side, side): one smooth texture in every channel (a structure the channels share, as a
    camera's do), each channel scaled and tinted differently."""
    grey = textured(count, 1, side, seed)
    smooth = F.avg_pool2d(F.pad(grey, (2, 2, 2, 2), mode="reflect"), 5, 1)
    return smooth * torch.tensor([1.0, 0.9, 0.7], dtype=torch.float64)[:, None, None] + 0.1


#: The properties measured from edges that the channels or the rows share (meaningless on :func:`textured`'s
#: independent channels and pixels): tested on :func:`in_register` images instead.
_GEOMETRY = ("registration", "interlacing")
#: Their columns in the signature.
_GEOMETRY_COLUMNS = [
    PROPERTIES["signature"].statistics.index(statistic)
    for name in _GEOMETRY
    for statistic in PROPERTIES[name].statistics
]


@pytest.mark.parametrize(
    ("name", "channels"),
    [
        (n, c)
        for n in PROPERTY_NAMES
        for c in (3, 1)
        if PROPERTIES[n].applies(c) and n not in ("compression", *_GEOMETRY)
    ],
)
def test_every_transfer_gives_the_recipients_the_donors_statistics(name, channels):
    """Compression, one-sided and on a grid of qualities, and registration and interlacing, which need edges that
    channels or rows share, have their own tests."""
    prop = PROPERTIES[name]
    pixels = textured(6, channels)
    recipients, donors = pixels[:3], pixels[3:]
    targets = prop.statistic(donors)
    given = prop.transfer(recipients, targets, torch.Generator().manual_seed(0))
    assert given.shape == recipients.shape
    # the signature's parts move each other a little (its brightness, last, stays exact)
    kept = [k for k in range(targets.shape[1]) if name != "signature" or k not in _GEOMETRY_COLUMNS]
    reached, wanted = prop.statistic(given)[:, kept], targets[:, kept]
    assert torch.allclose(reached, wanted, atol=0.1 if name == "signature" else 1e-4, rtol=0)
    if name == "signature":
        assert torch.allclose(reached[:, :3], wanted[:, :3], atol=5e-3, rtol=0)
    assert given.min() > -0.1 and given.max() < 1.1  # in range, so no clamping interferes in practice
    assert not torch.allclose(prop.statistic(recipients), targets, atol=1e-3, rtol=0)  # they did differ


def test_registration_measures_how_far_the_outer_channels_are_moved_and_moves_them_there():
    images = in_register(4)
    assert registration_statistic(images).abs().max() < 0.02  # in register
    aberrated = images.clone()
    aberrated[:, 0, :, 1:], aberrated[:, 2, :, :-1] = images[:, 0, :, :-1], images[:, 2, :, 1:]  # red right, blue left
    torch.testing.assert_close(
        registration_statistic(aberrated),
        torch.tensor([[1.0, 0.0, -1.0, 0.0, 0.0, 0.0]] * 4, dtype=torch.float64),
        atol=0.05,
        rtol=0,
    )
    targets = torch.tensor(
        [[0.5, -0.25, -1.5, 1.0], [0.0, 0.0, 0.0, 0.0], [2.0, 1.0, 0.3, 0.0], [-1.0, 1.0, 1.0, -1.0]]
    )
    targets = torch.cat([targets, torch.zeros(4, 2)], dim=1)
    given = registration_transfer(images, targets.double())
    torch.testing.assert_close(
        registration_statistic(given), targets.double(), atol=0.15, rtol=0
    )  # to a tenth of a px or so
    torch.testing.assert_close(given[:, 1], images[:, 1])  # the middle channel stays
    back = registration_transfer(aberrated, torch.zeros(4, 6, dtype=torch.float64))
    assert (back - images)[:, :, 2:-2, 2:-2].abs().max() < 0.05  # undone, but at the repeated edges


def _magnified(images: Tensor, channel: int, factor: float) -> Tensor:
    """``images`` (B, 3, H, W) with one channel magnified by ``factor`` about the centre (bilinear, edges repeated),
    as a lens's radial (lateral) chromatic aberration does."""
    side = images.shape[-1]
    axis = torch.linspace(-1.0, 1.0, side, dtype=images.dtype)
    grid = torch.stack(torch.meshgrid(axis, axis, indexing="xy"), dim=-1)[None].expand(len(images), -1, -1, -1)
    moved = images.clone()
    moved[:, channel] = F.grid_sample(images[:, channel, None], grid / factor, padding_mode="border",
                                      align_corners=True)[:, 0]  # fmt: skip
    return moved


def test_registration_measures_how_much_larger_the_outer_channels_show_the_content_and_gives_it():
    images = in_register(4, side=32)
    assert registration_statistic(images)[:, 4:].abs().max() < 0.01  # the same size
    aberrated = _magnified(_magnified(images, 0, 1.12), 2, 0.88)  # red 12 % larger, blue 12 % smaller
    measured = registration_statistic(aberrated)
    torch.testing.assert_close(measured[:, 4:], torch.tensor([[0.12, -0.12]] * 4, dtype=torch.float64), atol=0.04,
                               rtol=0)  # fmt: skip
    shifted = images.roll(2, dims=-1)  # a displacement alone is no magnification
    assert channel_magnification(shifted[:, 0], images[:, 1]).abs().max() < 0.01
    given = registration_transfer(images, measured)
    reached = registration_statistic(given)
    torch.testing.assert_close(reached[:, 4:], measured[:, 4:], atol=0.03, rtol=0)
    torch.testing.assert_close(reached[:, :4], measured[:, :4], atol=0.15, rtol=0)  # as the displacement's test
    inner = (slice(None), slice(None), slice(6, -6), slice(6, -6))  # away from the repeated edges
    # about the aberration itself: a fifth of the difference is left (the magnification's and displacement's errors)
    assert (given - aberrated)[inner].abs().mean() < 0.25 * (images - aberrated)[inner].abs().mean()


def test_interlacing_measures_how_far_the_odd_rows_and_columns_are_moved_and_moves_them_there():
    images = in_register(4)
    assert interlacing_statistic(images).abs().max() < 0.1  # one pass: a tenth of a pixel at most
    interlaced = images.clone()
    interlaced[:, :, 1::2, 2:] = images[:, :, 1::2, :-2]  # the odd rows 2 px right (a video's second field)
    interlaced[:, :, 1::2, :2] = images[:, :, 1::2, :1]
    torch.testing.assert_close(
        interlacing_statistic(interlaced), torch.tensor([[2.0, 0.0]] * 4, dtype=torch.float64), atol=0.1, rtol=0
    )
    given = interlacing_transfer(images, interlacing_statistic(interlaced))
    assert (given - interlaced)[..., 3:].abs().max() < 0.02  # the same rows moved, but at the repeated edge
    targets = torch.tensor([[0.5, 0.0], [0.0, 0.0], [-2.0, 0.0], [0.0, 1.5]], dtype=torch.float64)  # one way each
    torch.testing.assert_close(interlacing_statistic(interlacing_transfer(images, targets)), targets, atol=0.15, rtol=0)
    torch.testing.assert_close(interlacing_transfer(images, targets)[:, :, 0::2, 0::2], images[:, :, 0::2, 0::2])


def test_illumination_is_the_slope_of_the_light_across_the_field_and_its_transfer_is_a_gain():
    pixels = textured(4)
    x = torch.linspace(-1.0, 1.0, 28, dtype=torch.float64)
    lit = pixels * (1 + 0.35 * x)  # 35 % more light at the right edge than in the middle, 35 % less at the left
    slopes = illumination_statistic(lit) - illumination_statistic(pixels)
    assert torch.allclose(slopes[:, 0], torch.full((4,), 0.35, dtype=torch.float64), atol=0.02)
    assert slopes[:, 1].abs().max() < 0.01  # nothing from top to bottom
    vignette = 1 - 0.15 * (x[:, None].square() + x.square())  # symmetric: no slope
    assert illumination_statistic(pixels * vignette).sub(illumination_statistic(pixels)).abs().max() < 0.01
    given = illumination_transfer(pixels, illumination_statistic(lit))
    assert torch.allclose(illumination_statistic(given), illumination_statistic(lit), atol=1e-6)
    assert torch.allclose(given / pixels, (given / pixels)[:, :1], atol=1e-12)  # one gain for every channel
    off_centre = torch.full((1, 3, 28, 28), 0.8, dtype=torch.float64)
    off_centre[..., 10:18, 2:10] = 0.3  # a dark object on the left: content reads as a slope too
    assert 0.08 < illumination_statistic(off_centre)[0, 0] < 0.1  # as 9 % more light at the right edge would


def test_mosaic_measures_each_channel_s_2_x_2_blocks_and_gives_a_bayer_filter_s_green_imbalance():
    images = textured(4, side=27)  # an odd side: the last column is left out of the means, given its block's gain
    assert mosaic_statistic(in_register(4)).abs().max() < 0.01  # a camera's image without a filter's trace
    imbalanced = bayer_imbalance(images, 0.15)  # the green pixels of the blue rows 15 % brighter, demosaiced
    greens = mosaic_statistic(imbalanced)[:, 4:8] - mosaic_statistic(images)[:, 4:8]
    assert torch.allclose(greens, torch.tensor([[0.0, -0.07, 0.07, 0.0]] * 4, dtype=torch.float64), atol=0.005)
    given = mosaic_transfer(images, mosaic_statistic(imbalanced))
    torch.testing.assert_close(mosaic_statistic(given), mosaic_statistic(imbalanced), atol=1e-12, rtol=0)
    ratio = given / imbalanced  # the pattern itself, up to the green channel's mean, which the statistic leaves out
    assert torch.allclose(ratio[:, 1], ratio[:, 1, :1, :1], atol=1e-6)
    assert torch.allclose(ratio[:, ::2], images.new_ones(1))  # red and blue as they were
    torch.testing.assert_close(mosaic_transfer(images, mosaic_statistic(images)), images)  # its own: unchanged


def test_stripes_measure_even_rows_against_odd_ones_and_finer_patterns_and_reach_them():
    images = in_register(3)
    banded = images * (1 - 0.08 * (torch.arange(28) % 2).double())[:, None]  # odd rows 8 % darker
    statistic = stripes_statistic(banded)
    torch.testing.assert_close(
        statistic[:, 0], torch.full((3,), 2 * 0.08 / 1.92, dtype=torch.float64), atol=5e-3, rtol=0
    )
    assert statistic[:, 1].abs().max() < 0.01 and (statistic[:, 2:] < 0.01).all()  # columns, finer: as before
    given = stripes_transfer(images, statistic)
    torch.testing.assert_close(stripes_statistic(given), statistic, atol=2e-3, rtol=0)


@pytest.mark.parametrize("channels", [3, 1])
def test_compression_is_jpegs_blockiness_and_its_transfer_compresses_up_to_a_donors(channels):
    pixels = textured(6, channels)
    statistic, transfer = PROPERTIES["compression"].statistic, PROPERTIES["compression"].transfer
    assert statistic(pixels).sub(0.5).abs().max() < 0.04  # never compressed: no edge at the blocks' boundaries
    compressed = ip.jpeg(pixels, 10)
    assert statistic(compressed).min() > 0.6  # quality 10: the blocks show
    targets = statistic(ip.jpeg(pixels[:3], 40))
    given = transfer(pixels[3:], targets, None)
    reached = statistic(given)
    # the highest quality that reaches each target, or the blockiest (a quality's blocks differ between images)
    assert (reached - targets).abs().max() < 0.03 and (reached - statistic(pixels[3:])).min() > 0.1
    assert torch.equal(transfer(compressed[:3], statistic(pixels[3:]), None), compressed[:3])  # never undone
    kept = torch.corrcoef(torch.stack([ip.jpeg(pixels, 90).flatten(), pixels.flatten()]))[0, 1]
    assert kept > 0.8  # the same picture, channels in place, its grain (and colour detail) smoothed


def test_a_transfer_to_its_own_statistics_changes_nothing():
    pixels = textured(4)
    for name in ("colour", "brightness", "sharpness", "compression", "tone"):
        prop = PROPERTIES[name]
        assert torch.allclose(prop.transfer(pixels, prop.statistic(pixels), None), pixels, atol=1e-10), name
    unchanged = noise_transfer(pixels, noise_statistic(pixels), torch.Generator().manual_seed(0))
    assert torch.allclose(unchanged, pixels, atol=1e-10)  # t = 0: no noise added


def test_tone_reads_the_background_not_the_cells_and_its_transfer_is_a_gamma():
    background = torch.tensor([0.95, 0.85, 0.75], dtype=torch.float64)[None, :, None, None]
    smear = background.expand(2, 3, 28, 28).clone()
    smear[0, :, 4:20, 4:20] = 0.3  # a dark cell on half the image
    smear[1, :, 2:26, 2:26] = textured(1)[0, :, 2:26, 2:26] - 0.2  # a larger textured one: other content
    density = -background.log10().mean()
    assert torch.allclose(ip.tone_statistic(smear), density.expand(2, 1))  # the same background, whatever the cells
    gamma = 0.7
    corrected = smear**gamma  # a gamma of 0.7 (torchvision's adjust_gamma, gain 1)
    assert torch.allclose(ip.tone_statistic(corrected), gamma * density.expand(2, 1))
    given = ip.tone_transfer(smear, ip.tone_statistic(corrected))
    assert torch.allclose(given, corrected)  # the transfer recovers the gamma itself
    assert torch.equal(ip.tone_transfer(torch.ones(1, 3, 4, 4), torch.tensor([[0.5]])), torch.ones(1, 3, 4, 4))


def test_colour_is_the_chromaticity_most_pixels_share_and_its_transfer_tints_a_grey_image_keeping_its_pattern():
    grey = textured(1, channels=1).expand(1, 3, 28, 28).clone()
    assert colour_statistic(grey).abs().max() < 2e-3  # grey: α and β near 0 (Reinhard's LMS rows sum to ~1)
    red = grey.clone()
    red[:, 0] += 0.15
    red[:, 2] -= 0.1
    alpha, beta = colour_statistic(red)[0].tolist()
    assert alpha > 0.05 and beta > 0.01  # α: yellow (+) to blue (-), β: red (+) to green (-)
    given = colour_transfer(grey, colour_statistic(red))
    tint = (given - grey).mean(dim=(0, 2, 3))
    assert torch.allclose(tint, torch.tensor([0.15, 0.0, -0.1], dtype=torch.float64), atol=0.03)  # lαβ is not RGB
    assert torch.corrcoef(torch.stack([luminance(given).flatten(), luminance(grey).flatten()]))[0, 1] > 0.99
    l_before, l_after = (_lightness(image) for image in (grey, given))
    assert torch.allclose(l_before, l_after, atol=1e-12)  # l untouched: brightness is its own property


def test_brightness_is_the_median_luminance_and_its_transfer_adds_the_change_to_every_channel():
    pixels = torch.tensor([0.2, 0.6, 0.3], dtype=torch.float64).expand(1, 3, 1, 3)  # grey: Y = the value
    assert torch.allclose(PROPERTIES["brightness"].statistic(pixels), torch.tensor([[0.3]], dtype=torch.float64))
    brighter = brightness_transfer(pixels, torch.tensor([[0.5]], dtype=torch.float64))
    assert torch.allclose(brighter, torch.tensor([0.4, 0.8, 0.5], dtype=torch.float64).expand(1, 3, 1, 3))
    tinted = pixels.clone()
    tinted[:, 0] += 0.1  # a colour difference between channels stays, and so does the contrast
    shifted = brightness_transfer(tinted, PROPERTIES["brightness"].statistic(tinted) + 0.1)
    assert torch.allclose(shifted - tinted, torch.full_like(tinted, 0.1))


def test_colour_and_brightness_follow_what_most_pixels_share_not_a_small_object():
    background = textured(1)
    square = background.clone()
    square[:, :, 10:18, 10:18] = torch.tensor([0.1, 0.2, 0.95], dtype=torch.float64)[:, None, None]  # 8 % of it, blue
    cast = background + torch.tensor([0.12, 0.0, -0.12], dtype=torch.float64)[:, None, None]
    moved = (colour_statistic(square) - colour_statistic(background)).abs().max().item()
    assert moved < 0.01 < (colour_statistic(cast) - colour_statistic(background)).abs().max().item() / 3
    white = background.clone()
    white[:, :, 10:18, 10:18] = 1.0
    brightness = PROPERTIES["brightness"].statistic
    assert (brightness(white) - brightness(background)).abs().item() < 0.01
    assert (brightness(background - 0.1) - brightness(background)).item() == pytest.approx(-0.1)


def _lightness(pixels: Tensor) -> Tensor:
    """(B, H, W) Reinhard's l of RGB pixels: (log10 L + log10 M + log10 S) / sqrt(3)."""
    lms = torch.einsum("ij,bjhw->bihw", ip._RGB_TO_LMS, pixels)
    return lms.log10().sum(dim=1) / math.sqrt(3)


def cosine_and_checkerboard(side: int = 32, fine: float = 0.1, wave: float = 0.2) -> Tensor:
    """Pixels (1, 1, side, side): 0.5 + ``wave`` cos(2 pi x / 16) (low frequency) + ``fine`` x a +-1 checkerboard
    (the Nyquist frequency)."""
    columns = torch.arange(side, dtype=torch.float64)
    cosine = wave * torch.cos(2 * math.pi * columns / 16).expand(side, side)
    checkerboard = 1 - 2 * ((columns[:, None] + columns[None, :]) % 2)
    return (0.5 + cosine + fine * checkerboard)[None, None]


def test_sharpness_is_the_high_frequency_share_a_defocus_lowers_it_and_a_gain_raises_it():
    image = cosine_and_checkerboard()
    # energies: the cosine's 0.2^2 / 2, the checkerboard's 0.1^2 per pixel: a third at high frequency
    assert sharpness_statistic(image).item() == pytest.approx(1 / 3, abs=1e-12)
    # a ninth: a Gaussian whose response h(f) = exp(-2 pi^2 s^2 f^2) keeps the checkerboard (f^2 = 1/2) at half the
    # cosine's (f^2 = 1/256) gain: 0.01 h_c^2 / (0.02 h_w^2 + 0.01 h_c^2) = 1/9 when h_c^2 / h_w^2 = 1/4
    width = math.sqrt(math.log(4) / (4 * math.pi**2 * (1 / 2 - 1 / 256)))
    gains = [math.exp(-2 * math.pi**2 * width**2 * f2) for f2 in (1 / 256, 1 / 2)]
    blurred = sharpness_transfer(image, torch.tensor([[1 / 9]], dtype=torch.float64))
    assert sharpness_statistic(blurred).item() == pytest.approx(1 / 9, abs=1e-8)
    assert torch.allclose(blurred, cosine_and_checkerboard(wave=0.2 * gains[0], fine=0.1 * gains[1]), atol=1e-9)
    sharpened = sharpness_transfer(image, torch.tensor([[2 / 3]], dtype=torch.float64))  # a^2 = 4: twice
    assert torch.allclose(sharpened, cosine_and_checkerboard(fine=0.2), atol=1e-12)
    capped = sharpness_transfer(image, torch.tensor([[1.0]], dtype=torch.float64))  # infinite gain, capped at 4
    assert torch.allclose(capped, cosine_and_checkerboard(fine=0.4), atol=1e-12)
    flat = torch.full((1, 3, 8, 8), 0.3, dtype=torch.float64)
    assert sharpness_statistic(flat).item() == 0.0
    assert torch.equal(sharpness_transfer(flat, torch.tensor([[0.5]], dtype=torch.float64)), flat)


def test_noise_measures_white_noise_and_ignores_planes():
    rows, cols = torch.meshgrid(*[torch.arange(64, dtype=torch.float64)] * 2, indexing="ij")
    plane = (0.3 + 0.004 * rows + 0.002 * cols)[None, None].expand(1, 3, 64, 64)
    assert noise_statistic(plane).item() == pytest.approx(0.0, abs=1e-12)
    noise = torch.randn(1, 1, 64, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert noise_statistic(plane + 0.05 * noise).item() == pytest.approx(0.05, rel=0.05)
    noisy = noise_transfer(plane, torch.tensor([[0.08]], dtype=torch.float64), torch.Generator().manual_seed(1))
    assert noise_statistic(noisy).item() == pytest.approx(0.08, abs=1e-9)
    added = noisy - plane
    assert abs(torch.corrcoef(added[0].flatten(1))[0, 1]) < 0.1  # independent per channel
    weights = torch.tensor([0.299, 0.587, 0.114], dtype=torch.float64)
    assert added.std().item() == pytest.approx(0.08 / weights.norm().item(), rel=0.05)  # the luminance's is 0.08


def test_lowering_the_noise_blends_towards_the_smoothed_image_and_stops_there():
    noise = torch.randn(1, 1, 32, 32, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    noisy = 0.5 + 0.1 * noise.expand(1, 3, 32, 32)
    before = noise_statistic(noisy).item()
    calmer = noise_transfer(noisy, torch.tensor([[before / 2]], dtype=torch.float64), None)
    assert noise_statistic(calmer).item() == pytest.approx(before / 2, abs=1e-9)
    floor = noise_transfer(noisy, torch.tensor([[0.0]], dtype=torch.float64), None)  # unreachable: u = 1 at most
    assert 0 < noise_statistic(floor).item() < before / 2
    assert torch.allclose(floor[:, :1], floor[:, 1:2])  # the smoothing is the same in every channel


def test_the_noise_transfer_is_seeded():
    pixels = textured(2)
    targets = torch.tensor([[0.2], [0.2]], dtype=torch.float64)
    first, again = (noise_transfer(pixels, targets, torch.Generator().manual_seed(3)) for _ in range(2))
    other = noise_transfer(pixels, targets, torch.Generator().manual_seed(4))
    assert torch.equal(first, again) and not torch.allclose(first, other)


def test_colour_needs_three_channels_and_the_others_take_any():
    assert not PROPERTIES["colour"].applies(1) and PROPERTIES["colour"].applies(3)
    assert all(PROPERTIES[name].applies(1) and PROPERTIES[name].applies(4) for name in PROPERTY_NAMES[2:5])
    assert not PROPERTIES["signature"].applies(1) and not PROPERTIES["hue"].applies(1)  # they hold the colour
    with pytest.raises(ValueError, match="colour needs RGB images"):
        colour_statistic(textured(1, channels=1))
    assert torch.equal(luminance(textured(1, channels=1)), textured(1, channels=1)[:, 0])


def test_the_pixel_space_undoes_the_normalisation_and_clamps_transfers_to_the_pixels_range():
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.5)
    pixels = textured(2)
    images = ((pixels - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]).float()
    space = PixelSpace.of(images, Normalisation(mean, std))
    assert torch.allclose(space.pixels(images), pixels, atol=1e-6)
    assert torch.allclose(space.inputs(space.pixels(images), torch.float32), images, atol=1e-6)
    assert space.low.tolist() == [0.0] * 3 and space.high.tolist() == [1.0] * 3
    out = space.inputs(torch.full((1, 3, 1, 1), 2.0, dtype=torch.float64), torch.float32)
    assert torch.allclose(space.pixels(out), torch.ones(1, 3, 1, 1, dtype=torch.float64))  # clamped to 1
    cast = images.clone()
    cast[:, 0] = (1.1 - mean[0]) / std[0]  # a cast past white stays reachable
    assert PixelSpace.of(cast, Normalisation(mean, std)).high[0].item() == pytest.approx(1.1)


def test_without_a_normalisation_each_channels_range_becomes_zero_to_one():
    images = torch.tensor([[[[-2.0, 2.0]], [[1.0, 3.0]]]])
    space = PixelSpace.of(images, None)
    assert space.pixels(images).tolist() == [[[[0.0, 1.0]], [[0.0, 1.0]]]]
    with pytest.raises(ValueError, match="3 values of mean and std, but the images have 2 channels"):
        PixelSpace.of(images, Normalisation((0.5,) * 3, (0.5,) * 3))


def test_a_hue_summary_is_the_circular_mean_of_the_angles():
    hues = torch.tensor([[0.49], [-0.49], [0.47]], dtype=torch.float64)  # around the cut at 0.5 turn
    summary = PROPERTIES["hue"].summary(hues)["angle"]
    assert summary == pytest.approx(0.49)  # 0.49, 0.51 and 0.47 on the circle; not 0.157, the linear mean
    assert PROPERTIES["brightness"].summary(hues)["luminance"] == pytest.approx(hues.mean().item())
