"""Shared test material: a model that looks at one patch only, numpy references, seeded data."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

IMG = 32
PATCH = 8
GRID = IMG // PATCH


def checkerboard(size: int = PATCH) -> Tensor:
    """A ±1 checkerboard (size, size): high frequency, so a blur wipes it out."""
    index = torch.arange(size)
    return ((index[:, None] + index[None, :]) % 2 * 2 - 1).double()


class OnePatchModel(nn.Module):
    """Two-class classifier whose logit of class 0 is 10 * m - 5, where m is the correlation of
    channel 0 of one patch with a checkerboard (m = 1 on the planted pattern, 0 on zeros, ~0.02
    after the default blur). Everything else in the image is ignored."""

    def __init__(self, row: int, col: int) -> None:
        super().__init__()
        self.rows = slice(row * PATCH, (row + 1) * PATCH)
        self.cols = slice(col * PATCH, (col + 1) * PATCH)
        self.register_buffer("pattern", checkerboard())

    def forward(self, images: Tensor) -> Tensor:
        m = (images[:, 0, self.rows, self.cols] * self.pattern.to(images)).mean(dim=(1, 2))
        return torch.stack([10 * m - 5, torch.zeros_like(m)], dim=1)


def one_patch_case(
    batch: int = 2, row: int = 1, col: int = 2, seed: int = 0
) -> tuple[OnePatchModel, Tensor, Tensor, Tensor]:
    """Model, images (B, 3, 32, 32) with the pattern planted in the watched patch, targets 0, and maps
    that rank the watched patch first (noise below 1 elsewhere, 10 on the patch)."""
    generator = torch.Generator().manual_seed(seed)
    model = OnePatchModel(row, col).double().eval()
    images = torch.randn(batch, 3, IMG, IMG, generator=generator, dtype=torch.float64)
    images[:, 0, model.rows, model.cols] = checkerboard()
    maps = torch.rand(batch, IMG, IMG, generator=generator, dtype=torch.float64)
    maps[:, model.rows, model.cols] = 10.0
    return model, images, torch.zeros(batch, dtype=torch.long), maps


SEG_STRIDE = 4


def mean_cell_segmenter() -> nn.Conv2d:
    """A "segmentation model" nn.Conv2d(3, 2, 4, stride=4): at each 4 x 4 cell, the logit of class 0 is
    the mean of channel 0 there and the logit of class 1 its negative (logits (n, 2, H / 4, W / 4))."""
    model = nn.Conv2d(3, 2, SEG_STRIDE, stride=SEG_STRIDE, bias=False).double().eval()
    with torch.no_grad():
        model.weight.zero_()
        model.weight[0, 0] = 1 / SEG_STRIDE**2
        model.weight[1, 0] = -1 / SEG_STRIDE**2
    return model


def np_region_score(image: np.ndarray, target: int, region: np.ndarray) -> float:
    """The mean over a region (h, w) on the logits grid of :func:`mean_cell_segmenter`'s target logit:
    the mean of channel 0 over the region's pixels, negated for class 1."""
    pixels = np.kron(region, np.ones((SEG_STRIDE, SEG_STRIDE))).astype(bool)
    return float(image[0][pixels].mean()) * (1 if target == 0 else -1)


# ---------------------------------------------------------------- numpy references (plain loops)


def np_softmax_probs(model: nn.Module, images: list[np.ndarray], targets: list[int]) -> np.ndarray:
    """p(target | image) for each image (the model run once on the stack), softmax in float64 numpy."""
    with torch.no_grad():
        logits = model(torch.from_numpy(np.stack(images))).double().numpy()
    probs = []
    for row, target in zip(logits, targets):
        e = np.exp(row - row.max())
        probs.append(e[target] / e.sum())
    return np.array(probs)


def np_patch_relevance(m: np.ndarray, patch: int) -> np.ndarray:
    """(P,) sums over patches in row-major order."""
    h, w = m.shape[0] // patch, m.shape[1] // patch
    return np.array(
        [m[i * patch : (i + 1) * patch, j * patch : (j + 1) * patch].sum() for i in range(h) for j in range(w)]
    )


def np_paste(image: np.ndarray, source: np.ndarray, patches, patch: int) -> np.ndarray:
    """Copy of image (C, H, W) with the listed patches taken from source."""
    out = image.copy()
    w = image.shape[2] // patch
    for p in patches:
        i, j = divmod(int(p), w)
        rows, cols = slice(i * patch, (i + 1) * patch), slice(j * patch, (j + 1) * patch)
        out[:, rows, cols] = source[:, rows, cols]
    return out


def np_gaussian_blur(image: np.ndarray, kernel: int, sigma: float) -> np.ndarray:
    """Separable Gaussian blur of (C, H, W) with reflect padding (d c b | a b c d | c b a)."""
    x = np.arange(kernel) - (kernel - 1) / 2
    weights = np.exp(-0.5 * (x / sigma) ** 2)
    weights /= weights.sum()
    half = kernel // 2
    padded = np.pad(image, ((0, 0), (half, half), (half, half)), mode="reflect")
    rows = sum(weights[k] * padded[:, k : k + image.shape[1], :] for k in range(kernel))
    return sum(weights[k] * rows[:, :, k : k + image.shape[2]] for k in range(kernel))


def np_default_blur(image: np.ndarray) -> np.ndarray:
    """Petsiuk's blur (kernel 11, sigma 5 at 224 px) scaled to a square image."""
    sigma = 5 * image.shape[1] / 224
    return np_gaussian_blur(image, max(3, 2 * round(sigma) + 1), sigma)


def np_strong_blur(image: np.ndarray) -> np.ndarray:
    """The default insertion start: sigma = side / 4, kernel 3 sigma each way (capped below the side)."""
    sigma = image.shape[1] / 4
    kernel = min(2 * int(np.ceil(3 * sigma)) + 1, 2 * ((image.shape[1] - 1) // 2) + 1)
    return np_gaussian_blur(image, kernel, sigma)


def np_insertion_start(image: np.ndarray, start: str) -> np.ndarray:
    """The named insertion start of (C, H, W): "blur", "rise", "mean" or "zeros"."""
    if start == "blur":
        return np_strong_blur(image)
    if start == "rise":
        return np_default_blur(image)
    if start == "mean":
        return np.broadcast_to(image.mean(axis=(1, 2), keepdims=True), image.shape).copy()
    return np.zeros_like(image)


def np_trapezoid(values: list[float]) -> float:
    steps = len(values) - 1
    return sum((values[k] + values[k + 1]) / 2 for k in range(steps)) / steps


# ---------------------------------------------------------------- seeded data for the DDP test


def ddp_dataset(n: int = 8, num_classes: int = 4, seed: int = 0) -> dict[str, Tensor]:
    """images (n, 3, 32, 32), targets (n,), maps and maps_b (n, 32, 32), masks (n, 32, 32) bool (a block each),
    regions (n, 32, 32) bool: the masks with image 3's emptied (a region metric leaves that image out)."""
    generator = torch.Generator().manual_seed(seed)
    masks = torch.zeros(n, IMG, IMG, dtype=torch.bool)
    for i in range(n):
        r, c = torch.randint(0, IMG - 10, (2,), generator=generator).tolist()
        masks[i, r : r + 10, c : c + 10] = True
    maps = torch.rand(n, IMG, IMG, generator=generator)
    regions = masks.clone()
    regions[3] = False
    return {
        "images": torch.randn(n, 3, IMG, IMG, generator=generator),
        "targets": torch.arange(n) % num_classes,
        "maps": maps,
        "maps_b": maps + 0.5 * torch.rand(n, IMG, IMG, generator=generator),
        "masks": masks,
        "regions": regions,
    }


def ceil_count(fraction: float, n: int) -> int:
    return math.ceil(round(fraction * n, 6))


class Wrapper(nn.Module):
    """A LightningModule-like wrapper: the ViT is a child, not the module itself."""

    def __init__(self, vit: nn.Module) -> None:
        super().__init__()
        self.model = vit

    def forward(self, images):
        return self.model(images)
