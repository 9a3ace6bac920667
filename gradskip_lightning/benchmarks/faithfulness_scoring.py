"""Scoring one attribution method on a fixed subset: maps, faithfulness, localisation, sanity, cost.

Every method is a map function ``(model, images, targets) -> maps (B, H, W)``; all of them go
through the same metric functions of :mod:`gradskip_lightning.metrics`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from gradskip_lightning.benchmarks.cost import count_flops, forward_flops
from gradskip_lightning.adapters import find_adapter
from gradskip_lightning.explainer import Explainer
from gradskip_lightning.metrics import (
    faithfulness_violation,
    insertion_deletion,
    parameter_randomisation,
    pointing_game,
)

MapFn = Callable[[nn.Module, Tensor, Tensor], Tensor]
#: A method is "cheap" when one map costs at most this many forward passes (FLOPs).
CHEAP_RATIO = 3.0


@dataclass(frozen=True)
class Method:
    """A named map function; ``kind`` is "engine" (this library), "peer" (another library) or "ablation"."""

    name: str
    fn: MapFn
    kind: str = "engine"


def engine_method(method: str, **options) -> MapFn:
    """Map function of an :class:`~gradskip_lightning.explainer.Explainer` method with ``options``."""

    def explain(model: nn.Module, images: Tensor, targets: Tensor) -> Tensor:
        return Explainer(model, method, **options).explain(images, targets).maps

    return explain


def compute_maps(fn: MapFn, model: nn.Module, images: Tensor, targets: Tensor, batch_size: int) -> tuple[Tensor, float]:
    """Maps (n, H, W) of the whole subset in chunks of ``batch_size``, and CPU wall ms per map: the
    median over chunks (robust to other jobs on a shared machine), after a warm-up call on two images."""
    fn(model, images[:2], targets[:2])
    chunks, per_map_ms = [], []
    for first in range(0, len(images), batch_size):
        chunk = slice(first, first + batch_size)
        start = time.perf_counter()
        chunks.append(fn(model, images[chunk], targets[chunk]).detach().float())
        per_map_ms.append((time.perf_counter() - start) * 1000.0 / len(chunks[-1]))
    return torch.cat(chunks), statistics.median(per_map_ms)


def flops_per_map(fn: MapFn, model: nn.Module, image: Tensor, target: Tensor) -> int:
    """FLOPs of one map for one image (1, C, H, W), attention non-fused so FlopCounterMode sees it."""
    with find_adapter(model).explain_mode(model):
        return count_flops(lambda: fn(model, image, target))


def score_maps(
    model: nn.Module,
    images: Tensor,
    targets: Tensor,
    maps: Tensor,
    masks: Tensor | None,
    *,
    steps: int,
    batch_size: int,
) -> dict[str, float]:
    """Mean insertion, deletion, ins - del, FVT violation ratio and Pointing Game (None without masks)."""
    with torch.no_grad():
        scores = insertion_deletion(model, images, targets, maps, steps=steps, batch_size=batch_size)
        violations = faithfulness_violation(model, images, targets, maps, batch_size=batch_size)
    return {
        "insertion": scores["insertion"].mean().item(),
        "deletion": scores["deletion"].mean().item(),
        "insertion_minus_deletion": scores["insertion_minus_deletion"].mean().item(),
        "fvt_violation": violations.double().mean().item(),
        "pointing_game": None if masks is None else pointing_game(maps, masks).double().mean().item(),
    }


def randomisation_similarity(fn: MapFn, model: nn.Module, images: Tensor, targets: Tensor, seed: int) -> dict:
    """Cascading parameter randomisation (head, then blocks top-down): Spearman to the trained maps.

    Returns ``randomisation_similarity`` (mean over the L + 1 cascade steps; lower = the maps depend
    more on the learned weights) and ``randomisation_curve`` (per step, head first).
    """
    curve = parameter_randomisation(model, images, targets, lambda m, x, t: fn(m, x, t).detach(), seed=seed).mean
    return {"randomisation_similarity": curve.nanmean().item(), "randomisation_curve": curve.tolist()}


def cost(fn: MapFn, model: nn.Module, image: Tensor, target: Tensor) -> dict:
    """GFLOPs per map and the ratio to one forward, for one image (1, C, H, W)."""
    per_map = flops_per_map(fn, model, image, target)
    forward = forward_flops(model, image)
    return {
        "gflops_per_map": per_map / 1e9,
        "ratio_to_forward": per_map / forward,
        "cheap": per_map / forward <= CHEAP_RATIO,
    }
