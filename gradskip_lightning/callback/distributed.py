"""Split the probes over processes and put the per-probe results back together.

Work split: rank r explains the probes at positions r, r + W, r + 2W, ... (W processes), in
chunks of the explain batch size, so the callback's time per epoch falls as 1/W and a larger probe
set on many GPUs costs each one only its share. The results come back in two collectives that
every rank enters, whatever happened locally (a rank whose explanation failed sends its error, so
no rank waits for another forever):

1. ``all_gather_object`` of the small per-probe values every rank needs: the error (if any) and the
   patch-level maps (P, h, w) that drift compares and the checkpoint keeps, plus the scalars.
2. ``gather_object`` to rank zero only of the large values only the logger needs: maps at input
   resolution (P, H, W) and head statistics. Rank zero's memory grows with the probe set; the
   others' does not.

Values are put back in probe order by position, so the logged figures equal a single-process
run on the same probes (up to float rounding of different batch compositions).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["shard_positions", "gather_results", "SHARED_KEYS"]

#: Per-probe values every rank receives (small); the rest go to rank zero only.
SHARED_KEYS = (
    "token_maps",
    "targets",
    "predictions",
    "probabilities",
    "target_probabilities",
    "insertion",
    "deletion",
    "fvt_violation",
    "pointing_hit",
)


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard_positions(num_probes: int) -> Tensor:
    """Positions (n,) of the probes this process explains: rank::world_size."""
    rank, world = _world()
    return torch.arange(rank, num_probes, world)


def _merge(parts: list[dict[str, Any]], num_probes: int) -> dict[str, Tensor]:
    """Scatter each part's values (n_r, ...) back to probe positions (P, ...)."""
    merged: dict[str, Tensor] = {}
    for part in parts:
        positions = part["positions"]
        for key, value in part["values"].items():
            if key not in merged:
                merged[key] = value.new_zeros((num_probes, *value.shape[1:]))
            merged[key][positions] = value
    return merged


def gather_results(
    values: dict[str, Tensor], positions: Tensor, num_probes: int, error: str | None
) -> tuple[dict[str, Tensor], str | None]:
    """Collect every rank's per-probe ``values`` (n_r, ...) at ``positions`` into (P, ...) tensors.

    Every rank must call this, in the same order. Returns ``(merged, error)``: ``error`` is the
    first rank's error message if any rank failed (then ``merged`` is empty on every rank); on
    ranks other than zero ``merged`` holds only :data:`SHARED_KEYS`.
    """
    rank, world = _world()
    shared = {"positions": positions, "error": error, "values": {k: v for k, v in values.items() if k in SHARED_KEYS}}
    large = {"positions": positions, "values": {k: v for k, v in values.items() if k not in SHARED_KEYS}}
    if world == 1:
        shared_parts, large_parts = [shared], [large]
    else:
        shared_parts = [None] * world
        dist.all_gather_object(shared_parts, shared)
        large_parts = [None] * world if rank == 0 else None
        dist.gather_object(large, large_parts, dst=0)
    errors = [part["error"] for part in shared_parts if part["error"] is not None]
    if errors:
        return {}, errors[0]
    merged = _merge(shared_parts, num_probes)
    if rank == 0:
        merged.update(_merge(large_parts, num_probes))
    return merged, None
