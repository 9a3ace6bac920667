"""Split the probes over processes and put the per-probe records back together.

Work split: rank r explains the probes at positions r, r + W, r + 2W, ... (W processes), in
chunks of the explain batch size, so the callback's time per epoch falls as 1/W. Every rank
explains the same number of probes: a shorter shard is padded with a repeat of one of its
probes (its result is dropped), so every rank runs the same number of forward passes. Sharded
strategies (FSDP, DeepSpeed ZeRO-3) need this: there every forward is a collective. The results
come back in two collectives that every rank enters, whatever happened locally (a rank whose
explanation failed sends its error, so no rank waits for another forever):

1. ``all_gather_object`` of the small per-probe values every rank needs (the record fields of
   scope ``shared``: patch-level maps that drift compares and the checkpoint keeps, scores) and
   the error, if any.
2. ``gather_object`` to rank zero only of the large values only the logger needs (scope
   ``rank_zero``: maps at input resolution, head statistics). Rank zero's memory grows with the
   probe set; the others' does not.

What each epoch end computes is rank zero's plan (:func:`from_rank_zero`): the time budget measures each
process's own seconds, and ranks that planned apart would enter different collectives.

A failure that one rank detects between forwards (non-finite maps or logits of a probe in its
shard) is agreed at once with :func:`any_rank`, so every rank stops at the same point: under
sharded strategies a rank that went on to the next forward would wait for the others forever (or
fail with a collective mismatch).

Values are put back in probe order by position, so the logged figures equal a single-process
run on the same probes (up to float rounding of different batch compositions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

from gradskip_lightning.engine.scoring.record import ProbeRecord

__all__ = ["Shard", "shard_positions", "gather_records", "any_rank", "from_rank_zero"]

T = TypeVar("T")


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def any_rank(flag: bool, device: torch.device) -> bool:
    """Whether ``flag`` is True on any process (one all-reduce on ``device``; ``flag`` itself in one process).

    Every rank must call it at the same point."""
    if _world()[1] == 1:
        return flag
    value = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item() > 0)


def from_rank_zero(value: T) -> T:
    """Rank zero's ``value`` on every process (one object broadcast; ``value`` itself in one process).

    Every rank must call it at the same point."""
    if _world()[1] == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@dataclass(frozen=True)
class Shard:
    """The probes one process explains.

    Attributes:
        positions: (n,) probe positions to explain, n = ceil(P / W) on every rank (padded).
        count: how many of them are this rank's own (the rest are padding, dropped after).
    """

    positions: Tensor
    count: int


def shard_positions(num_probes: int) -> Shard:
    """This process's probes: rank::world_size, padded to ceil(P / W) with a repeat of one probe."""
    rank, world = _world()
    own = torch.arange(rank, num_probes, world)
    size = -(-num_probes // world)
    filler = own[-1:] if len(own) else torch.zeros(1, dtype=torch.long)
    return Shard(torch.cat([own, filler.repeat(size - len(own))]), len(own))


def _merge(parts: list[dict[str, Any]], num_probes: int) -> dict[str, dict[str, Tensor]]:
    """Scatter each part's per-method values (n_r, ...) back to probe positions (P, ...)."""
    merged: dict[str, dict[str, Tensor]] = {}
    for part in parts:
        positions = part["positions"]
        for method, values in part["values"].items():
            into = merged.setdefault(method, {})
            for name, value in values.items():
                if name not in into:
                    into[name] = value.new_zeros((num_probes, *value.shape[1:]))
                into[name][positions] = value
    return merged


def gather_records(
    records: dict[str, ProbeRecord], shard: Shard, num_probes: int, error: str | None
) -> tuple[dict[str, ProbeRecord], str | None]:
    """Collect every rank's per-method records of its ``shard`` into records of all P probes.

    Every rank must call this, in the same order. Returns ``(records, error)``: ``error`` is the
    ranks' distinct error messages if any rank failed (then ``records`` is empty on every rank); on
    ranks other than zero the records hold only the fields of scope ``shared``.
    """
    rank, world = _world()
    positions = shard.positions[: shard.count]
    own = {method: record.select(slice(0, shard.count)) for method, record in records.items()}
    shared: dict[str, Any] = {
        "positions": positions,
        "error": error,
        "values": {m: r.values("shared") for m, r in own.items()},
    }
    large: dict[str, Any] = {"positions": positions, "values": {m: r.values("rank_zero") for m, r in own.items()}}
    shared_parts: list[Any] = [shared]
    large_parts: list[Any] | None = [large]
    if world > 1:
        shared_parts = [None] * world
        dist.all_gather_object(shared_parts, shared)
        large_parts = [None] * world if rank == 0 else None
        dist.gather_object(large, large_parts, dst=0)
    errors: list[str] = [part["error"] for part in shared_parts if part["error"] is not None]
    if errors:
        return {}, "; ".join(dict.fromkeys(errors))  # each rank's own message (ranks failing alike: once)
    merged = _merge(shared_parts, num_probes)
    if large_parts is not None:  # rank zero
        for method, values in _merge(large_parts, num_probes).items():
            merged[method].update(values)
    return {method: ProbeRecord(**values) for method, values in merged.items()}, None
