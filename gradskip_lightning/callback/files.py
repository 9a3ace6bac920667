"""The on-disk format of the maps: one npz for the probes, one npz per logged epoch.

Layout of a maps folder::

    probes.npz         probe_ids (P,) int64, labels (P,) int64 (the explained class; for
                       multi-label probes the chosen positive label), images (P, H, W, 3) uint8
                       for display, class_names (n,) str
    epoch_0003.npz     epoch, step (scalars), method (str), probe_ids, labels, targets,
                       predictions (P,) int64, probabilities, insertion, deletion (P,) float32,
                       maps (P, H, W) float32, token_maps (P, h, w) float32; with regions
                       pointing_hit (P,) (an "object" region), region_mass, region_rank (P, R)
                       float32 and region_names (R,) str; with the transplant test
                       transplant_flip, transplant_mass (P,) float32 (NaN: not scored)

The callback's :class:`~.sinks.MapsFileSink` writes these for trained epochs (the W&B artifact
holds the same files; the epoch arrays are the :func:`~.record.npz_fields` of the record); the
timeline command reads them back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["write_probes", "write_epoch", "read_maps", "MapsRecord", "write_png"]

PROBES_FILE = "probes.npz"


def write_png(path: Path, image: np.ndarray) -> Path:
    """Save a (H, W, 3) uint8 image as PNG, creating parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image).save(path)
    return path


def write_probes(
    folder: Path, probe_ids: np.ndarray, labels: np.ndarray, images: np.ndarray, class_names: Sequence[str]
) -> Path:
    """Write ``probes.npz`` (see the module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / PROBES_FILE
    np.savez_compressed(
        path, probe_ids=probe_ids, labels=labels, images=images, class_names=np.asarray(class_names, dtype=str)
    )
    return path


def write_epoch(folder: Path, epoch: int, step: int, method: str, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``epoch_<epoch>.npz`` with the scalars and the per-probe ``arrays``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"epoch_{epoch:04d}.npz"
    np.savez_compressed(path, epoch=epoch, step=step, method=method, **arrays)
    return path


@dataclass
class MapsRecord:
    """A maps folder read back: the probes and, per logged epoch (sorted), its arrays."""

    probe_ids: np.ndarray  # (P,)
    labels: np.ndarray  # (P,)
    images: np.ndarray  # (P, H, W, 3) uint8
    class_names: list[str]
    epochs: list[dict[str, np.ndarray]]


def read_maps(folder: Path) -> MapsRecord:
    """Read a folder written by :func:`write_probes` and :func:`write_epoch`.

    Raises:
        FileNotFoundError: no ``probes.npz`` or no epoch file in ``folder``.
    """
    folder = Path(folder)
    if not (folder / PROBES_FILE).is_file():
        raise FileNotFoundError(f"no {PROBES_FILE} in {folder}: not a GradSkip maps folder")
    paths = sorted(folder.glob("epoch_*.npz"))
    if not paths:
        raise FileNotFoundError(f"no epoch_*.npz in {folder}")
    with np.load(folder / PROBES_FILE) as probes:
        record = MapsRecord(
            probes["probe_ids"], probes["labels"], probes["images"], [str(c) for c in probes["class_names"]], []
        )
    for path in paths:
        with np.load(path) as data:
            record.epochs.append({key: data[key] for key in data.files})
    record.epochs.sort(key=lambda arrays: int(arrays["epoch"]))
    return record
