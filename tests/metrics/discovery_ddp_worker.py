"""A 2-process gloo group on CPU (plain ``torch.distributed``, forked): each rank updates a
``ClassMapSummary`` with every other map of :func:`ddp_maps` (uneven shares: 8 and 7) and rank 0
writes the synced summary (:func:`summary_values`) to the JSON path given.

Run from the repository root: ``python -m tests.metrics.discovery_ddp_worker OUT.json PORT``.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch import Tensor

from gradskip_lightning.metrics.discovery import ClassMaps, ClassMapSummary, DiscoverySettings

NUM_CLASSES = 4  # class 3 has no maps
GRID = (4, 4)
SETTINGS = DiscoverySettings(neighbours=2)


def ddp_maps() -> tuple[Tensor, Tensor]:
    """Maps (15, 4, 4) and classes (15,): class 0 in two strategies (4 top, 3 bottom), 1 stamped, 2 diffuse."""
    generator = torch.Generator().manual_seed(0)
    classes = torch.tensor([0, 1, 2, 0, 1, 0, 2, 0, 1, 0, 2, 1, 0, 1, 0])
    maps = torch.rand(15, *GRID, generator=generator, dtype=torch.float64) * 0.05
    class0 = (classes == 0).nonzero()[:, 0]
    maps[class0[:4], :2] += 1.0
    maps[class0[4:], 2:] += 1.0
    maps[classes == 1, 3, 3] += 2.0
    maps[classes == 2] += torch.rand(3, *GRID, generator=generator, dtype=torch.float64)
    return maps, classes


def summary_values(summary: ClassMaps) -> dict[str, list]:
    """Every field of the summary as nested lists, strategies per class (``strategy_sizes_0``, ...)."""
    values = {
        name: getattr(summary, name).double().tolist()
        for name in ("counts", "mean_maps", "hotspots", "boxes", "concentration", "consistency")
    }
    for label, found in enumerate(summary.strategies):
        values[f"strategy_sizes_{label}"] = found.sizes.tolist()
        values[f"strategy_maps_{label}"] = found.mean_maps.tolist()
        values[f"eigenvalues_{label}"] = found.eigenvalues.tolist()
    return values


def run(rank: int, out_path: str, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    maps, classes = ddp_maps()
    maps, classes = maps[rank::2], classes[rank::2]
    metric = ClassMapSummary(NUM_CLASSES, GRID, settings=SETTINGS)
    for start in range(0, len(maps), 3):
        metric.update(maps[start : start + 3], classes[start : start + 3])
    values = summary_values(metric.compute())  # every rank joins the sync
    if rank == 0:
        with open(out_path, "w") as handle:
            json.dump({**values, "world_size": dist.get_world_size(), "rank0_maps": len(maps)}, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.multiprocessing.start_processes(run, args=(sys.argv[1], int(sys.argv[2])), nprocs=2, start_method="fork")
