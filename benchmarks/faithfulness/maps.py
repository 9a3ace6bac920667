"""Methods as map functions ``(model, images, targets) -> maps (B, H, W)``: their maps over a subset,
their CPU time and their FLOPs per map. The scores of the maps are in
:mod:`~benchmarks.faithfulness.scores`. A model is explained by its registered
family (:func:`~gradskip_lightning.families.explainer_for`: a timm ViT or a Swin).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from benchmarks.cost import count_flops
from gradskip_lightning.core.adapter import PassAdapter
from gradskip_lightning.core.explanation import UnsupportedModel
from gradskip_lightning.families import explainer_for

from .records import Row

MapFn = Callable[[nn.Module, Tensor, Tensor], Tensor]
#: A method is "cheap" when one map costs at most this many forward passes (FLOPs).
CHEAP_RATIO = 3.0


@dataclass(frozen=True)
class Method:
    """A named map function: ``row`` says which table row it fills, ``fn`` makes its maps."""

    row: Row
    fn: MapFn


def engine_method(method: str, **options) -> MapFn:
    """Map function of ``method`` with ``options``, explained by the model's family's explainer."""

    def explain(model: nn.Module, images: Tensor, targets: Tensor) -> Tensor:
        return explainer_for(model, method, **options).explain(images, targets).maps

    return explain


def adapter_of(model: nn.Module) -> PassAdapter:
    """The adapter of ``model``'s network (patch size, explain mode, randomisation cascade), from its
    family's explainer.

    Raises:
        UnsupportedModel (a TypeError): no family explains ``model``, or its family has no streamed pass.
    """
    explainer = explainer_for(model)
    adapter = getattr(explainer, "adapter", None)
    if not isinstance(adapter, PassAdapter):
        raise UnsupportedModel(f"the faithfulness benchmark runs streamed-pass families, not {explainer.family}")
    return adapter


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


def eager_flops(model: nn.Module, fn: Callable[[], object]) -> int:
    """FLOPs of ``fn()`` with ``model``'s attention non-fused, so FlopCounterMode sees it."""
    with adapter_of(model).explain_mode(model):
        return count_flops(fn)


def flops_per_map(fn: MapFn, model: nn.Module, image: Tensor, target: Tensor) -> int:
    """FLOPs of one map for one image (1, C, H, W)."""
    return eager_flops(model, lambda: fn(model, image, target))


@dataclass(frozen=True)
class Cost:
    """FLOPs of one map for one image, in GFLOPs and in forward passes; ``cheap``: at most CHEAP_RATIO."""

    gflops_per_map: float
    ratio_to_forward: float

    @property
    def cheap(self) -> bool:
        return self.ratio_to_forward <= CHEAP_RATIO


def cost(fn: MapFn, model: nn.Module, image: Tensor, target: Tensor) -> Cost:
    """GFLOPs per map and the ratio to one forward, for one image (1, C, H, W)."""
    per_map = flops_per_map(fn, model, image, target)
    with torch.no_grad():
        forward = eager_flops(model, lambda: model(image))
    return Cost(per_map / 1e9, per_map / forward)
