"""Turn images, relevance maps and head statistics into uint8 RGB arrays for logging.

Everything here returns ``numpy.uint8`` arrays shaped (..., H, W, 3), because W&B casts float
images straight to uint8 (a [0, 1] heatmap would come out black). Colour maps are matplotlib
lookup tables sampled once into a (256, 3) uint8 LUT, so no pyplot figure is made in the hot path.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from PIL import Image, ImageDraw

from gradskip_lightning.core.normalisation import Normalisation

__all__ = [
    "colormap_lut",
    "apply_colormap",
    "normalize_maps",
    "to_display",
    "overlay",
    "upscale",
    "image_grid",
    "screen_grid",
    "GRID_SIDE",
    "matrix_image",
    "histogram_image",
    "caption",
    "annotate",
    "titled",
]


@lru_cache(maxsize=8)
def colormap_lut(name: str = "inferno") -> np.ndarray:
    """A (256, 3) uint8 lookup table of a matplotlib colour map."""
    import matplotlib

    try:
        cmap = matplotlib.colormaps[name]
    except KeyError as err:
        raise ValueError(f"unknown matplotlib colour map {name!r}") from err
    lut = cmap(np.linspace(0.0, 1.0, 256))[:, :3]
    return np.round(lut * 255.0).astype(np.uint8)


def _numpy(x: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float32).numpy()
    return np.asarray(x)


def normalize_maps(maps: torch.Tensor | np.ndarray) -> np.ndarray:
    """Min-max normalise each map of (B, H, W) to [0, 1]; a constant map becomes zeros."""
    values = _numpy(maps).astype(np.float32)
    if values.ndim != 3:
        raise ValueError(f"maps must be (B, H, W), got shape {values.shape}")
    values = np.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0)
    low = values.min(axis=(1, 2), keepdims=True)
    span = values.max(axis=(1, 2), keepdims=True) - low
    return np.where(span > 0, (values - low) / np.where(span > 0, span, 1.0), 0.0).astype(np.float32)


def apply_colormap(values: np.ndarray, cmap: str = "inferno") -> np.ndarray:
    """Colour values in [0, 1] of any shape (...) into uint8 RGB (..., 3)."""
    index = np.clip(np.round(np.asarray(values, dtype=np.float32) * 255.0), 0, 255).astype(np.intp)
    return colormap_lut(cmap)[index]


def to_display(images: torch.Tensor | np.ndarray, normalisation: Normalisation | None = None) -> np.ndarray:
    """Normalised images (B, C, H, W) to uint8 RGB (B, H, W, 3).

    With their ``normalisation`` (1 or C values) the images are taken to pixels and clipped to [0, 1];
    without it each image is min-max scaled. One channel is repeated to three; more than three
    channels keep the first three.
    """
    pixels = _numpy(images).astype(np.float32)
    if pixels.ndim != 4:
        raise ValueError(f"images must be (B, C, H, W), got shape {pixels.shape}")
    channels = pixels.shape[1]
    if normalisation is not None:
        normalisation.check_channels(channels)
        pixels = np.clip(normalisation.to_pixels(torch.from_numpy(pixels)).numpy(), 0.0, 1.0)
    else:
        low = pixels.min(axis=(1, 2, 3), keepdims=True)
        span = pixels.max(axis=(1, 2, 3), keepdims=True) - low
        pixels = np.where(span > 0, (pixels - low) / np.where(span > 0, span, 1.0), 0.0)
    if channels == 1:
        pixels = np.repeat(pixels, 3, axis=1)
    return np.round(pixels[:, :3].transpose(0, 2, 3, 1) * 255.0).astype(np.uint8)


def overlay(
    display: np.ndarray,
    maps: torch.Tensor | np.ndarray,
    alpha: float = 0.5,
    cmap: str = "inferno",
) -> np.ndarray:
    """Blend colour-mapped relevance (B, H, W) over uint8 images (B, H, W, 3).

    Each map is min-max normalised for display; ``alpha`` is the weight of the heat map.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    heat = apply_colormap(normalize_maps(maps), cmap).astype(np.float32)
    if heat.shape != display.shape:
        raise ValueError(f"maps {heat.shape[:3]} do not match images {display.shape[:3]}")
    mixed = (1.0 - alpha) * display.astype(np.float32) + alpha * heat
    return np.clip(np.round(mixed), 0, 255).astype(np.uint8)


def upscale(images: np.ndarray, min_size: int = 128) -> np.ndarray:
    """Nearest-neighbour upscale (..., H, W, 3) by the smallest integer factor reaching min_size."""
    height, width = images.shape[-3:-1]
    factor = max(1, -(-min_size // max(1, min(height, width))))
    if factor == 1:
        return images
    return np.repeat(np.repeat(images, factor, axis=-3), factor, axis=-2)


#: The largest side in pixels of a logged grid: a dashboard panel's width, not more (PNG encoding
#: time grows with the pixels: 32 probes of 28 px at 5x made 854 px grids).
GRID_SIDE = 640


def screen_grid(images: np.ndarray, max_side: int = GRID_SIDE, pad: int = 2) -> np.ndarray:
    """Tile (B, H, W, 3) uint8 images at their own size, upscaled by the largest integer factor (at
    least 1) that keeps the grid's sides at or under ``max_side`` pixels."""
    count, height, width = images.shape[:3]
    ncols = int(np.ceil(np.sqrt(count)))
    nrows = int(np.ceil(count / ncols))
    factor = max(1, min(((max_side - pad) // ncols - pad) // width, ((max_side - pad) // nrows - pad) // height))
    scaled = np.repeat(np.repeat(images, factor, axis=-3), factor, axis=-2) if factor > 1 else images
    return image_grid(scaled, ncols=ncols, pad=pad)


def image_grid(images: np.ndarray, ncols: int | None = None, pad: int = 2, fill: int = 255) -> np.ndarray:
    """Tile (B, H, W, 3) uint8 images into one (rows*(H+pad)+pad, cols*(W+pad)+pad, 3) image."""
    if images.ndim != 4:
        raise ValueError(f"images must be (B, H, W, 3), got shape {images.shape}")
    count, height, width, depth = images.shape
    ncols = ncols or int(np.ceil(np.sqrt(count)))
    nrows = int(np.ceil(count / ncols))
    grid = np.full((nrows * (height + pad) + pad, ncols * (width + pad) + pad, depth), fill, np.uint8)
    for i, image in enumerate(images):
        top = pad + (i // ncols) * (height + pad)
        left = pad + (i % ncols) * (width + pad)
        grid[top : top + height, left : left + width] = image
    return grid


def matrix_image(values: torch.Tensor | np.ndarray, cell: int = 16, cmap: str = "viridis") -> np.ndarray:
    """A (rows, cols) matrix, e.g. layer x head mean omega, as a uint8 image of cell-px squares.

    Colours span [0, max] of the matrix (head weights are non-negative); rows are layers from
    the top of the image down.
    """
    values = np.nan_to_num(_numpy(values).astype(np.float32))
    if values.ndim != 2:
        raise ValueError(f"values must be (rows, cols), got shape {values.shape}")
    top = values.max()
    scaled = values / top if top > 0 else np.zeros_like(values)
    image = apply_colormap(np.clip(scaled, 0.0, 1.0), cmap)
    return np.repeat(np.repeat(image, cell, axis=0), cell, axis=1)


#: Bar colour of :func:`histogram_image` (matplotlib's first default colour).
HISTOGRAM_RGB = (31, 119, 180)


def histogram_image(values: np.ndarray, bins: int, width: int = 256, height: int = 96) -> np.ndarray:
    """A histogram of 1-D ``values`` as a (height + 12, width, 3) uint8 image, for loggers without a
    histogram chart (MLflow).

    ``bins`` equal-width bins span [min, max] of the finite values; the fullest bin is ``height``
    pixels tall and each bin gets ``width / bins`` pixel columns. The strip below names the range
    and the count (:func:`annotate`).
    """
    values = np.asarray(values, dtype=np.float64).ravel()
    values = values[np.isfinite(values)]
    image = np.full((height, width, 3), 255, np.uint8)
    if not values.size:
        return annotate(image, "no finite values")
    counts, edges = np.histogram(values, bins=bins)
    tops = height - np.round(counts / counts.max() * height).astype(np.int64)  # (bins,) first bar row
    column_bins = np.minimum(np.arange(width) * bins // width, bins - 1)  # (width,) the bin of each column
    image[np.arange(height)[:, None] >= tops[column_bins][None, :]] = HISTOGRAM_RGB
    return annotate(image, f"{edges[0]:.3g} to {edges[-1]:.3g}, n={values.size}")


def caption(label: str, prediction: str, probability: float) -> str:
    """The caption of one probe's overlay: ``label=X pred=Y p=0.93``."""
    return f"label={label} pred={prediction} p={probability:.2f}"


def annotate(image: np.ndarray, text: str, height: int = 12) -> np.ndarray:
    """Add a white strip with ``text`` (PIL's default font) under a (H, W, 3) uint8 image."""
    canvas = Image.new("RGB", (image.shape[1], image.shape[0] + height), (255, 255, 255))
    canvas.paste(Image.fromarray(image), (0, 0))
    ImageDraw.Draw(canvas).text((1, image.shape[0]), text, fill=(0, 0, 0))
    return np.asarray(canvas)


def captioned_tile(image: np.ndarray, text: str, size: int) -> np.ndarray:
    """A (H, W, 3) uint8 image enlarged by the smallest whole factor that makes it at least ``size``
    pixels high (nearest neighbour, so a pixel stays a square), with ``text`` under it.

    >>> captioned_tile(np.zeros((8, 8, 3), dtype=np.uint8), "x", 20).shape
    (36, 24, 3)
    """
    scale = max(1, -(-size // image.shape[0]))
    return annotate(np.kron(image, np.ones((scale, scale, 1), dtype=np.uint8)), text)


def _wrapped(text: str, font, width: int) -> list[str]:
    """``text``'s lines broken at spaces so that each is at most ``width`` pixels wide in ``font``
    (a word longer than that stays whole)."""
    lines: list[str] = []
    for paragraph in text.splitlines():
        line = ""
        for word in paragraph.split(" "):
            trial = f"{line} {word}" if line else word
            if line and font.getlength(trial) > width:
                lines.append(line)
                line = word
            else:
                line = trial
        lines.append(line)
    return lines


def titled(image: np.ndarray, text: str, min_width: int = 384, size: int = 14) -> np.ndarray:
    """A (H, W, 3) uint8 image enlarged (nearest, by a whole factor) to at least ``min_width`` pixels wide,
    under a white strip with ``text`` in a ``size``-pixel font, wrapped to the width: a picture that says
    what it is where a viewer shows no caption of ours (MLflow's image cards).

    >>> titled(np.zeros((32, 64, 3), np.uint8), "head importance, epoch 3").shape
    (216, 384, 3)
    """
    from PIL import ImageFont

    scale = max(1, -(-min_width // image.shape[1]))
    big = np.kron(image, np.ones((scale, scale, 1), dtype=np.uint8)) if scale > 1 else image
    font = ImageFont.load_default(size=size)
    lines = _wrapped(text, font, big.shape[1] - 8)
    line_height = round(size * 1.3)
    strip = line_height * len(lines) + 6
    canvas = Image.new("RGB", (big.shape[1], big.shape[0] + strip), (255, 255, 255))
    canvas.paste(Image.fromarray(big), (0, strip))
    draw = ImageDraw.Draw(canvas)
    for index, line in enumerate(lines):
        draw.text((4, 3 + index * line_height), line, fill=(0, 0, 0), font=font)
    return np.asarray(canvas)
