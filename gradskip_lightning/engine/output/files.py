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
and the MLflow run's ``<folder>/maps`` artifacts hold the same files; the epoch arrays are the
:func:`~.record.npz_fields` of the record); the timeline command reads them back.

Every file is written atomically: into a hidden temporary file in the same folder, flushed to
disk, then renamed over the final name, so a kill or a full disk leaves either the previous file
or the new one, never a truncated one (and no temporary file: a failed write removes it).
:func:`read_maps` skips an epoch file that cannot be read all the same (copied by hand, written by
an older version, or holding maps of another probe set's shape) and names it in :attr:`MapsRecord.skipped`.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
from PIL import Image

__all__ = ["write_probes", "write_epoch", "read_maps", "MapsRecord", "write_png", "write_atomically"]

PROBES_FILE = "probes.npz"
#: Arrays every epoch file holds; a file without one of them is damaged.
EPOCH_KEYS = ("epoch", "step", "method", "probe_ids", "maps")


def write_atomically(path: Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Write ``path`` through ``write(file)`` into ``.<name>.<pid>.tmp`` beside it, fsync, then
    rename over ``path``; on any failure the temporary file is removed and ``path`` left as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def write_png(path: Path, image: np.ndarray) -> Path:
    """Save a (H, W, 3) uint8 image as PNG (atomically), creating parent folders."""
    return write_atomically(path, lambda file: Image.fromarray(image).save(file, format="PNG"))


def write_probes(
    folder: Path, probe_ids: np.ndarray, labels: np.ndarray, images: np.ndarray, class_names: Sequence[str]
) -> Path:
    """Write ``probes.npz`` (see the module docstring), atomically."""
    names = np.asarray(class_names, dtype=str)
    return write_atomically(
        folder / PROBES_FILE,
        lambda file: np.savez_compressed(file, probe_ids=probe_ids, labels=labels, images=images, class_names=names),
    )


def _epoch_arrays(epoch: int, step: int, method: str, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    return {"epoch": np.asarray(epoch), "step": np.asarray(step), "method": np.asarray(method), **arrays}


def write_epoch(folder: Path, epoch: int, step: int, method: str, arrays: dict[str, np.ndarray]) -> Path:
    """Write ``epoch_<epoch>.npz`` with the scalars and the per-probe ``arrays``, atomically."""
    return write_atomically(
        folder / f"epoch_{epoch:04d}.npz",
        lambda file: np.savez_compressed(file, **_epoch_arrays(epoch, step, method, arrays)),
    )


@dataclass
class MapsRecord:
    """A maps folder read back: the probes and, per readable epoch file (sorted by epoch), its
    arrays; ``skipped`` names each epoch file that could not be read, with the reason."""

    probe_ids: np.ndarray  # (P,)
    labels: np.ndarray  # (P,)
    images: np.ndarray  # (P, H, W, 3) uint8
    class_names: list[str]
    epochs: list[dict[str, np.ndarray]]
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def _read_epoch(path: Path) -> dict[str, np.ndarray]:
    """The arrays of one epoch file; ValueError naming what is wrong with a damaged one."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(f"unreadable ({type(error).__name__}: {error})") from None
    missing = [key for key in EPOCH_KEYS if key not in arrays]
    if missing:
        raise ValueError(f"incomplete: no {', '.join(missing)}")
    return arrays


def _check_shape(arrays: dict[str, np.ndarray], images: np.ndarray) -> None:
    """Require an epoch's ``maps`` (P, H / f, W / f) of the probes' ``images`` (P, H, W, 3), for an integer
    f >= 1, and one probe id per probe; ValueError naming both shapes."""
    maps, probes, (height, width) = arrays["maps"], len(images), images.shape[1:3]
    factor = height // maps.shape[1] if maps.ndim == 3 and 0 < maps.shape[1] <= height else 0
    fits = factor > 0 and maps.shape[0] == probes and maps.shape[1:] == (height // factor, width // factor)
    if not fits or height % factor or width % factor or arrays["probe_ids"].shape != (probes,):
        raise ValueError(
            f"wrong shape: maps {maps.shape} and {arrays['probe_ids'].size} probe ids do not fit the probes' images "
            f"{images.shape[:3]} (maps (P, H / f, W / f) for an integer f)"
        )


def read_maps(folder: Path) -> MapsRecord:
    """Read a folder written by :func:`write_probes` and :func:`write_epoch`; a damaged epoch
    file, or one whose maps do not fit the probes' images, is skipped and named in ``skipped``.

    Raises:
        FileNotFoundError: no ``probes.npz`` or no readable epoch file in ``folder``.
        ValueError: ``probes.npz`` cannot be read.
    """
    folder = Path(folder)
    if not (folder / PROBES_FILE).is_file():
        raise FileNotFoundError(f"no {PROBES_FILE} in {folder}: not a GradSkip maps folder")
    paths = sorted(folder.glob("epoch_*.npz"))
    if not paths:
        raise FileNotFoundError(f"no epoch_*.npz in {folder}")
    try:
        with np.load(folder / PROBES_FILE, allow_pickle=False) as probes:
            record = MapsRecord(
                probes["probe_ids"], probes["labels"], probes["images"], [str(c) for c in probes["class_names"]], []
            )
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(f"{folder / PROBES_FILE} cannot be read ({type(error).__name__}: {error})") from None
    for path in paths:
        try:
            arrays = _read_epoch(path)
            _check_shape(arrays, record.images)
            record.epochs.append(arrays)
        except ValueError as error:
            record.skipped.append((path, str(error)))
    if not record.epochs:
        raise FileNotFoundError(
            f"no readable epoch_*.npz in {folder}: " + "; ".join(f"{p.name} {why}" for p, why in record.skipped)
        )
    record.epochs.sort(key=lambda arrays: int(arrays["epoch"]))
    return record
