"""Offline W&B for tests, and reading back what a run wrote: history rows, artifacts and media files.

The run file ``run-<id>.wandb`` is a 7-byte W&B header followed by LevelDB-log framed records
(32 KiB blocks; each chunk: crc32 (4), length (2, little endian), type (1: full, 2: first,
3: middle, 4: last)); each record is a ``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from wandb.proto import wandb_internal_pb2

#: The folders W&B writes to, each pointed into a test's own temporary folder.
WANDB_DIRS = ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR")


def use_offline_wandb(mp: pytest.MonkeyPatch, root: Path) -> None:
    """W&B offline and silent, with every folder it writes under ``root``."""
    mp.setenv("WANDB_MODE", "offline")
    mp.setenv("WANDB_SILENT", "true")
    for var in WANDB_DIRS:
        path = root / var.lower()
        path.mkdir(parents=True, exist_ok=True)
        mp.setenv(var, str(path))


_HEADER = 7
_BLOCK = 32768
_CHUNK_HEADER = 7


def read_records(path: Path, wait_s: float = 10.0) -> list[wandb_internal_pb2.Record]:
    """All records of one ``.wandb`` file, in write order. W&B's service may still be writing the file's
    last records when ``wandb.finish()`` returns (seen on a loaded machine): a file that ends inside a
    record is read again, for up to ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return _parse_records(Path(path).read_bytes(), path)
        except (DecodeError, _Truncated):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class _Truncated(ValueError):
    """The file ends inside a record."""


def _parse_records(data: bytes, path: Path) -> list[wandb_internal_pb2.Record]:
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run file")
    records, pending, pos = [], b"", _HEADER
    while pos + _CHUNK_HEADER <= len(data):
        left_in_block = _BLOCK - pos % _BLOCK
        if left_in_block < _CHUNK_HEADER:  # block trailer padding
            pos += left_in_block
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        if pos + _CHUNK_HEADER + length > len(data):
            raise _Truncated(f"{path} ends inside a record")
        chunk = data[pos + 7 : pos + 7 + length]
        pos += _CHUNK_HEADER + length
        if kind == 0 and length == 0:
            continue
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


@dataclass
class OfflineRun:
    """One offline run folder: its history rows and artifact records.

    A history row maps each logged key to its decoded JSON value; media (images, tables,
    histograms) come back as dicts of their fields (``_type``, ``path``, ``caption``, ...).
    """

    root: Path
    history: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[wandb_internal_pb2.ArtifactRecord] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)  # the keys set in ``run.summary``, last value each

    @classmethod
    def load(cls, root: Path, timeout: float = 30.0) -> "OfflineRun":
        """Read a run, waiting (up to ``timeout`` s) until W&B has written its exit record.

        ``wandb.finish()`` can return while the W&B service is still writing the last records
        on a busy machine.
        """
        (run_file,) = Path(root).glob("run-*.wandb")
        deadline = time.monotonic() + timeout
        records = read_records(run_file)
        while not any(r.WhichOneof("record_type") == "exit" for r in records) and time.monotonic() < deadline:
            time.sleep(0.5)
            records = read_records(run_file)
        run = cls(Path(root))
        for record in records:
            kind = record.WhichOneof("record_type")
            if kind == "history":
                row: dict[str, Any] = {}
                for item in record.history.item:
                    path = list(item.nested_key) or [item.key]
                    target = row
                    for part in path[:-1]:  # media are split into one item per field
                        target = target.setdefault(part, {})
                    target[path[-1]] = json.loads(item.value_json)
                run.history.append(row)
            elif kind == "artifact":
                run.artifacts.append(record.artifact)
            elif kind == "summary":
                for item in record.summary.update:
                    run.summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        return run

    @property
    def media(self) -> Path:
        return self.root / "files" / "media"

    def rows_with(self, key: str) -> list[dict[str, Any]]:
        return [row for row in self.history if key in row]


def find_runs(folder: Path) -> list[OfflineRun]:
    """Every offline run under ``folder`` (searched recursively), oldest first."""
    return [OfflineRun.load(p) for p in sorted(Path(folder).rglob("offline-run-*")) if p.is_dir()]
