"""A 2-process gloo group on CPU (plain ``torch.distributed``, forked): each rank updates a
``ClassMapSummary`` with every other map of :func:`ddp_maps` (uneven shares: 8 and 7) at its probe
positions, then runs :func:`discover` on the same probes (:func:`ddp_images`, a stamp-reading rule
model) and the global property transplants on the same probes (:func:`property_values`, as the
discovery stage does); rank 0 writes the synced summary, the discovery (:func:`summary_values`) and
each rank's property figures to the JSON path given.

Run from the repository root: ``python -m tests.shortcuts.discovery_ddp_worker OUT.json PORT``.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch import Tensor

from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.shortcuts.discovery import ClassMaps, ClassMapSummary, Discovery, DiscoverySettings, discover
from gradskip_lightning.shortcuts.discovery_properties import discover_properties
from gradskip_lightning.shortcuts.image_properties import PixelSpace

NUM_CLASSES = 4  # class 3 has no maps
GRID = (4, 4)
SETTINGS = DiscoverySettings(neighbours=2)
PIXELS = Normalisation(mean=(0.0,), std=(1.0,))  # the property probes are pixels


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


def property_probes() -> tuple[Tensor, Tensor]:
    """Pixel probes (12, 3, 8, 8) of 3 classes (textured grey; class 2 reddish, class 1 brighter) and classes."""
    generator = torch.Generator().manual_seed(1)
    classes = torch.arange(3).repeat_interleave(4)
    images = 0.3 + 0.3 * torch.rand(12, 3, 8, 8, generator=generator)
    images[classes == 1] += 0.2
    images[classes == 2, 0] += 0.15
    return images, classes


def property_model(images: Tensor) -> Tensor:
    """Class 2 iff red exceeds blue by 0.1, else class 1 iff the luminance is above 0.6, else class 0."""
    red = (images[:, 0] - images[:, 2]).mean(dim=(1, 2)) > 0.1
    bright = images.mean(dim=(1, 2, 3)) > 0.6
    return torch.stack([~red & ~bright, ~red & bright, red], dim=1).double()


def property_values() -> dict[str, list]:
    """Every property's flip rates, controls, separabilities, p-values and suspicions on :func:`property_probes`."""
    images, classes = property_probes()
    found = discover_properties(
        property_model, images, classes, 3, space=PixelSpace.of(images, PIXELS), alert_threshold=0.5, seed=3
    )
    return {
        name: [[t.flip_rate, t.control_flip_rate, t.separability, t.p_value] for t in transfers]
        + [found.suspicion[name].tolist(), found.p_value[name].tolist()]
        for name, transfers in found.transfers.items()
    }


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
    ranks: list[dict[str, list] | None] = [None, None]
    dist.all_gather_object(ranks, property_values())  # every rank transfers the same probes
    if rank == 0:
        with open(out_path, "w") as handle:
            extra = {"world_size": dist.get_world_size(), "rank0_maps": len(maps), "properties_per_rank": ranks}
            json.dump({**values, **extra}, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.multiprocessing.start_processes(run, args=(sys.argv[1], int(sys.argv[2])), nprocs=2, start_method="fork")
