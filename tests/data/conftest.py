"""A BloodMNIST file in MedMNIST's format with the official split sizes, generated once per session."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from medmnist import INFO

SPLIT_SIZES = INFO["bloodmnist"]["n_samples"]  # {"train": 11959, "val": 1712, "test": 3421}
NUM_CLASSES = len(INFO["bloodmnist"]["label"])


def synthetic_bloodmnist_images(labels: np.ndarray, size: int = 28) -> np.ndarray:
    """(N,) labels -> (N, size, size, 3) uint8 images that encode their label.

    Red = 30 * label everywhere; green rises left to right (8 per column); blue rises top to bottom.
    """
    ramp = (np.arange(size) * 8).astype(np.uint8)
    images = np.empty((len(labels), size, size, 3), dtype=np.uint8)
    images[..., 0] = (30 * labels).astype(np.uint8)[:, None, None]
    images[..., 1] = ramp[None, None, :]
    images[..., 2] = ramp[None, :, None]
    return images


@pytest.fixture(scope="session")
def bloodmnist_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``bloodmnist.npz`` (28 px) of the official split sizes, labels cycling 0..7."""
    root = tmp_path_factory.mktemp("medmnist")
    arrays = {}
    for split, n in SPLIT_SIZES.items():
        labels = np.arange(n) % NUM_CLASSES
        arrays[f"{split}_images"] = synthetic_bloodmnist_images(labels)
        arrays[f"{split}_labels"] = labels.astype(np.uint8)[:, None]  # (N, 1) as in MedMNIST
    np.savez_compressed(root / "bloodmnist.npz", **arrays)
    return root
