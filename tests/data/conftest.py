"""MedMNIST files in MedMNIST's format with the official split sizes, generated once per session.

medmnist asserts the official split sizes in ``len()``, so the files have them; their content is
tiny (an image encodes its label) and compresses to a few MB.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from medmnist import INFO

from gradskip_lightning.data.medmnist2d import medmnist_filename

SPLIT_SIZES = INFO["bloodmnist"]["n_samples"]  # {"train": 11959, "val": 1712, "test": 3421}
NUM_CLASSES = len(INFO["bloodmnist"]["label"])
CHEST_LABELS = len(INFO["chestmnist"]["label"])  # 14 findings, multi-label


def synthetic_bloodmnist_images(labels: np.ndarray, size: int = 28) -> np.ndarray:
    """(N,) labels -> (N, size, size, 3) uint8 images that encode their label.

    Red = 30 * label everywhere; green rises left to right (8 per column); blue rises top to bottom.
    """
    ramp = (np.arange(size) * 8 % 256).astype(np.uint8)
    images = np.empty((len(labels), size, size, 3), dtype=np.uint8)
    images[..., 0] = (30 * labels).astype(np.uint8)[:, None, None]
    images[..., 1] = ramp[None, None, :]
    images[..., 2] = ramp[None, :, None]
    return images


def synthetic_gray_images(codes: np.ndarray, size: int = 28) -> np.ndarray:
    """(N,) ints -> (N, size, size) uint8 grayscale images (no channel axis, as MedMNIST stores
    them): 20 * code in the left half, 255 in the right half."""
    images = np.full((len(codes), size, size), 255, dtype=np.uint8)
    images[:, :, : size // 2] = (20 * codes % 256).astype(np.uint8)[:, None, None]
    return images


def chest_labels(n: int) -> np.ndarray:
    """(n, 14) uint8 multi-hot labels: item i has finding c when bit c of i is set."""
    return ((np.arange(n)[:, None] >> np.arange(CHEST_LABELS)) & 1).astype(np.uint8)


def write_medmnist_file(root: Path, flag: str, size: int = 28) -> Path:
    """Write ``<root>/<flag>[_<size>].npz`` with the official split sizes; returns its path.

    Multi-class flags: labels cycle 0..K-1 and images encode them; ``chestmnist``: labels from
    :func:`chest_labels` and images encode the number of findings.
    """
    info = INFO[flag]
    arrays = {}
    for split, n in info["n_samples"].items():
        if flag == "chestmnist":
            labels = chest_labels(n)
            codes = labels.sum(axis=1)
        else:
            codes = np.arange(n) % len(info["label"])
            labels = codes.astype(np.uint8)[:, None]  # (N, 1) as in MedMNIST
        rgb = info["n_channels"] == 3
        make_images = synthetic_bloodmnist_images if rgb else synthetic_gray_images
        arrays[f"{split}_images"] = make_images(codes, size)
        arrays[f"{split}_labels"] = labels
    path = root / medmnist_filename(flag, size)
    np.savez_compressed(path, **arrays)
    return path


@pytest.fixture(scope="session")
def bloodmnist_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``bloodmnist.npz`` (28 px) of the official split sizes, labels cycling 0..7."""
    root = tmp_path_factory.mktemp("medmnist")
    write_medmnist_file(root, "bloodmnist")
    return root


@pytest.fixture(scope="session")
def gray_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``breastmnist.npz`` and ``breastmnist_64.npz`` (grayscale, 2 classes)."""
    root = tmp_path_factory.mktemp("medmnist_gray")
    write_medmnist_file(root, "breastmnist")
    write_medmnist_file(root, "breastmnist", size=64)
    return root


@pytest.fixture(scope="session")
def chestmnist_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``chestmnist.npz`` (28 px, grayscale, 14 multi-hot labels)."""
    root = tmp_path_factory.mktemp("medmnist_chest")
    write_medmnist_file(root, "chestmnist")
    return root
