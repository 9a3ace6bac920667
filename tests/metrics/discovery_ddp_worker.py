"""A 2-process gloo group on CPU (plain ``torch.distributed``, forked): each rank updates a
``ClassMapSummary`` with every other map of :func:`ddp_maps` (uneven shares: 8 and 7) at its probe
positions, then runs :func:`discover` on the same probes (:func:`ddp_images`, a stamp-reading rule
model), and rank 0 writes the synced summary and the discovery (:func:`summary_values`) to the JSON
path given.

Run from the repository root: ``python -m tests.metrics.discovery_ddp_worker OUT.json PORT``.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch import Tensor

from gradskip_lightning.metrics.discovery import ClassMaps, ClassMapSummary, Discovery, DiscoverySettings, discover

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


def ddp_images() -> Tensor:
    """Probe images (15, 1, 8, 8) of :func:`ddp_maps`' classes: texture, a 2 x 2 px stamp where class 1's maps are."""
    images = torch.rand(15, 1, 8, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    images[ddp_maps()[1] == 1, :, 6:, 6:] = 0.9
    return images


def stamp_model(images: Tensor) -> Tensor:
    """Logits (B, 4): class 1 iff the stamp is there, else class 0 (dark) or 2 (bright); never class 3."""
    stamped = (images[:, 0, 6:, 6:] == 0.9).flatten(1).all(dim=1)
    dark = images[:, 0].mean(dim=(1, 2)) < 0.5
    scores = torch.stack([~stamped & dark, stamped, ~stamped & ~dark, torch.zeros_like(dark)], dim=1)
    return torch.where(scores, 10.0, -10.0).to(images.dtype)


def discovery_values(found: Discovery) -> dict[str, list]:
    """The discovery's per-class values and every test's, as lists."""
    tests = [t for tests in found.tests for t in tests]
    return {
        "suspicion": found.suspicion.tolist(),
        "p_values": found.p_values.tolist(),
        "flagged": found.flagged.double().tolist(),
        "tests": [[t.group.label, -1 if t.group.strategy is None else t.group.strategy, t.suspicion] for t in tests],
        "members": [g.members.tolist() for groups in found.summary.groups for g in groups],
    }


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
    positions = torch.arange(len(maps))[rank::2]
    maps, classes = maps[rank::2], classes[rank::2]
    metric = ClassMapSummary(NUM_CLASSES, GRID, settings=SETTINGS)
    for start in range(0, len(maps), 3):
        metric.update(maps[start : start + 3], classes[start : start + 3], positions[start : start + 3])
    summary = metric.compute()  # every rank joins the sync
    found = discover(stamp_model, ddp_images(), ddp_maps()[1], summary, patch_size=2)
    values = {**summary_values(summary), **discovery_values(found)}
    if rank == 0:
        with open(out_path, "w") as handle:
            json.dump({**values, "world_size": dist.get_world_size(), "rank0_maps": len(maps)}, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.multiprocessing.start_processes(run, args=(sys.argv[1], int(sys.argv[2])), nprocs=2, start_method="fork")
