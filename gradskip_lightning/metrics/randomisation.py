"""Model-parameter randomisation test (Adebayo et al. 2018), cascading from the head down."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Protocol, Union

import torch
from torch import Tensor, nn

from .drift import spearman, topk_iou

ExplainFn = Callable[[nn.Module, Tensor, Tensor], Tensor]


class Cascading(Protocol):
    """What the test needs of a model family: its layers top first and how to re-initialise one
    (the ViT adapter ``gradskip_lightning.families.timm_vit.adapter_for(model)``,
    ``gradskip_lightning.families.segformer.SegformerCascade(model)`` for SegFormer)."""

    def cascade(self, model: nn.Module) -> list[tuple[str, list[nn.Module]]]: ...

    def reinitialise(self, layer: nn.Module) -> None: ...


CascadeFor = Callable[[nn.Module], Cascading]
"""A model -> its :class:`Cascading`, e.g. ``adapter_for`` or ``SegformerCascade``: called with the test's
copy of the model, so the layers it names and re-initialises are the copy's."""

Similarity = Union[str, Callable[[Tensor, Tensor], Tensor]]


@dataclass(frozen=True)
class RandomisationCurve:
    """Similarity to the original maps after each cascading step.

    Attributes:
        layers: names of the layers re-initialised at each step, e.g. ("head", "blocks.1", "blocks.0");
            step s has re-initialised ``layers[:s + 1]``.
        similarity: (S, B) per step and image.
    """

    layers: tuple[str, ...]
    similarity: Tensor

    @property
    def mean(self) -> Tensor:
        """(S,) mean similarity per step (NaN-skipping)."""
        return self.similarity.nanmean(dim=1)


def _similarity_fn(similarity: Similarity) -> Callable[[Tensor, Tensor], Tensor]:
    if callable(similarity):
        return similarity
    if not isinstance(similarity, str):
        kind = type(similarity).__name__
        raise TypeError(f'similarity must be "spearman", "topk_iou" or a callable (maps_a, maps_b) -> (B,), got {kind}')
    if similarity == "spearman":
        return spearman
    if similarity == "topk_iou":
        return topk_iou
    raise ValueError(
        f'similarity must be "spearman", "topk_iou" or a callable (maps_a, maps_b) -> (B,), got {similarity!r}'
    )


def parameter_randomisation(
    model: nn.Module,
    images: Tensor,
    targets: Tensor,
    explain_fn: ExplainFn,
    *,
    similarity: Similarity = "spearman",
    seed: int = 0,
    cascade_for: CascadeFor,
) -> RandomisationCurve:
    """Cascading randomisation: similarity of maps as more top layers get random weights.

    ``model`` is deep-copied and never touched. On the copy: maps are computed, then the classifier
    head is re-initialised (the backbone's and any head outside it), then blocks[L-1], ...,
    blocks[0], one more each step, recomputing maps and comparing them with the copy's original
    maps. The family's :class:`Cascading` (``cascade_for`` of the copy) names the layers and
    re-initialises them (timm's ViT init for the ViT adapter) under a fixed seed without
    disturbing the global RNG.

    Args:
        model: a module that ``cascade_for`` accepts (a backbone, or a module holding one).
        images: (B, C, H, W); targets: (B,) classes explained at every step.
        explain_fn: (model, images, targets) -> maps (B, H, W); called with the copy.
        similarity: "spearman", "topk_iou" (top 10 %) or a callable (maps_a, maps_b) -> (B,).
        seed: seed of the re-initialisation.
        cascade_for: the copy -> its :class:`Cascading` (see :data:`CascadeFor`), found by the
            caller: ``gradskip_lightning.families.timm_vit.adapter_for`` for a timm ViT (required).

    Returns:
        A :class:`RandomisationCurve` with L + 1 steps.
    """
    if not callable(cascade_for):
        raise TypeError(
            f"cascade_for must be a callable model -> Cascading (e.g. adapter_for), got {type(cascade_for).__name__}"
        )
    compare = _similarity_fn(similarity)
    randomised = copy.deepcopy(model)
    cascading = cascade_for(randomised)
    original = explain_fn(randomised, images, targets)
    layers = cascading.cascade(randomised)
    similarities = []
    cuda_devices = sorted({p.device.index or 0 for p in randomised.parameters() if p.is_cuda})
    with torch.random.fork_rng(devices=cuda_devices):
        torch.manual_seed(seed)
        for _, modules in layers:
            with torch.no_grad():
                for module in modules:
                    cascading.reinitialise(module)
            similarities.append(compare(original, explain_fn(randomised, images, targets)))
    return RandomisationCurve(layers=tuple(name for name, _ in layers), similarity=torch.stack(similarities))
