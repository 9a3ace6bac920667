"""render: uint8 colour maps, de-normalisation, overlays, grids and layer x head images."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradskip_lightning import render
from gradskip_lightning.core.normalisation import Normalisation


def test_colormap_lut_matches_matplotlib():
    import matplotlib

    lut = render.colormap_lut("inferno")
    assert lut.shape == (256, 3) and lut.dtype == np.uint8
    expected = np.round(np.array(matplotlib.colormaps["inferno"](1.0)[:3]) * 255)
    np.testing.assert_array_equal(lut[-1], expected)
    with pytest.raises(ValueError, match="colour map"):
        render.colormap_lut("no-such-map")


def test_to_display_inverts_normalisation():
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.5)
    pixels = torch.rand(2, 3, 8, 8)
    normalised = (pixels - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]
    shown = render.to_display(normalised, Normalisation(mean, std))
    assert shown.shape == (2, 8, 8, 3) and shown.dtype == np.uint8
    np.testing.assert_allclose(shown, np.round(pixels.permute(0, 2, 3, 1).numpy() * 255), atol=1)
    # Without statistics each image is min-max scaled; one channel becomes grey RGB.
    grey = render.to_display(torch.arange(16.0).reshape(1, 1, 4, 4) - 100)
    assert grey[0, 0, 0].tolist() == [0, 0, 0] and grey[0, -1, -1].tolist() == [255, 255, 255]


def test_overlay_puts_the_hottest_colour_on_the_peak():
    display = np.zeros((1, 4, 4, 3), np.uint8)
    maps = torch.zeros(1, 4, 4)
    maps[0, 1, 2] = 5.0
    out = render.overlay(display, maps, alpha=1.0, cmap="inferno")
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out[0, 1, 2], render.colormap_lut("inferno")[255])
    np.testing.assert_array_equal(out[0, 0, 0], render.colormap_lut("inferno")[0])
    half = render.overlay(np.full((1, 4, 4, 3), 200, np.uint8), maps, alpha=0.5)
    np.testing.assert_array_equal(
        half[0, 0, 0], np.round(0.5 * 200 + 0.5 * render.colormap_lut("inferno")[0].astype(float))
    )
    # A constant (or non-finite) map shows as the coldest colour instead of failing.
    flat = render.overlay(display, torch.full((1, 4, 4), float("nan")), alpha=1.0)
    assert (flat == render.colormap_lut("inferno")[0]).all()


def test_upscale_grid_and_matrix_shapes():
    images = np.random.default_rng(0).integers(0, 255, (5, 28, 28, 3), dtype=np.uint8)
    big = render.upscale(images, 128)
    assert big.shape == (5, 140, 140, 3)  # factor 5: the smallest integer reaching 128 px
    np.testing.assert_array_equal(big[:, ::5, ::5], images)
    grid = render.image_grid(big, ncols=3, pad=2)
    assert grid.shape == (2 * 142 + 2, 3 * 142 + 2, 3)
    np.testing.assert_array_equal(grid[2:142, 144:284], big[1])
    matrix = render.matrix_image(torch.tensor([[0.0, 1.0], [0.5, 0.25]]), cell=4, cmap="viridis")
    assert matrix.shape == (8, 8, 3)
    np.testing.assert_array_equal(matrix[0, 4], render.colormap_lut("viridis")[255])
    np.testing.assert_array_equal(matrix[0, 0], render.colormap_lut("viridis")[0])


def test_caption_and_annotate():
    assert render.caption("cat", "dog", 0.934) == "label=cat pred=dog p=0.93"
    out = render.annotate(np.zeros((20, 30, 3), np.uint8), "x", height=10)
    assert out.shape == (30, 30, 3) and (out[20:] < 255).any()


def test_histogram_image_bars_are_the_bin_counts():
    # 3 values in the left bin, 1 in the right: full-height bar on the left half, a third on the right.
    image = render.histogram_image(np.array([0.0, 0.1, 0.2, 1.0, np.nan]), bins=2, width=8, height=30)
    assert image.shape == (30 + 12, 8, 3) and image.dtype == np.uint8
    bars = (image[:30] == render.HISTOGRAM_RGB).all(axis=-1)  # (30, 8) pixels of a bar
    assert bars[:, :4].sum(axis=0).tolist() == [30] * 4
    assert bars[:, 4:].sum(axis=0).tolist() == [10] * 4
    assert bars[-10:, 4:].all()  # the bars stand on the bottom
    empty = render.histogram_image(np.array([np.nan]), bins=4, width=8, height=30)
    assert empty.shape == (42, 8, 3) and not (empty[:30] == render.HISTOGRAM_RGB).all(axis=-1).any()


def test_screen_grid_fits_the_side_and_upscales_by_an_integer():
    images = np.random.default_rng(0).integers(0, 255, (32, 28, 28, 3), dtype=np.uint8)
    grid = render.screen_grid(images)
    assert max(grid.shape[:2]) <= render.GRID_SIDE
    assert grid.shape[:2] == (6 * (3 * 28 + 2) + 2, 6 * (3 * 28 + 2) + 2)  # factor 3: 518 px, was 854
    np.testing.assert_array_equal(grid[2 : 2 + 84 : 3, 2 : 2 + 84 : 3], images[0])
    big = np.zeros((4, 400, 400, 3), dtype=np.uint8)
    assert render.screen_grid(big).shape[:2] == (2 * 402 + 2, 2 * 402 + 2)  # never below the images' own size


def test_overlay_at_the_image_size_then_upscaled_equals_the_overlay_at_display_size():
    from gradskip_lightning.engine.output.report import _overlays, _upscaled
    from gradskip_lightning.engine.output.sinks import ProbeSheet
    from gradskip_lightning.engine.settings import RenderSettings

    rng = np.random.default_rng(1)
    native = rng.integers(0, 255, (3, 28, 28, 3), dtype=np.uint8)
    display = render.upscale(native, 128)  # factor 5, as the probe sheet does
    maps = torch.rand(3, 28, 28)
    sheet = ProbeSheet([0, 1, 2], ["a"] * 3, np.zeros(3, dtype=np.int64), ["a"], display)
    settings = RenderSettings()
    fast = _upscaled(_overlays(sheet, maps, settings), 5)
    big_maps = maps.repeat_interleave(5, dim=1).repeat_interleave(5, dim=2)
    slow = render.overlay(display, big_maps, alpha=settings.overlay_alpha, cmap=settings.colormap)  # today's path
    np.testing.assert_array_equal(fast, slow)
