"""Peer attribution methods from other libraries, as map functions ``(model, images, targets) -> maps``.

Optional benchmark-only dependencies, imported lazily: Captum (Integrated Gradients, Input x
Gradient) and pytorch-grad-cam (Grad-CAM with a ViT or Swin reshape). Every function returns maps
(B, H, W) float32 at input resolution, higher = more relevant to the target class, so they go
through the same metric functions as the engine's maps.

Map conventions (stated in docs/results/faithfulness.md):
- Captum attributions (B, C, H, W) are summed over channels, keeping the sign: a pixel that
  lowers the target logit gets negative relevance (the Faithfulness Violation Test reads signs).
- Integrated Gradients integrates from the zero baseline of the normalised input (the mean
  colour, the same baseline as deletion) in ``ig_steps`` Gauss-Legendre steps.
- Grad-CAM is pytorch-grad-cam's output: ReLU, min-max normalised per image, bilinear upsampling.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .maps import MapFn, adapter_of


@dataclass(frozen=True)
class Peer:
    """A peer method: the Python package it needs and its map function given the IG step count."""

    package: str
    build: Callable[[int], MapFn]


def available_peers(names: list[str]) -> list[str]:
    """The peers among ``names`` whose package is installed; prints a note for each one skipped."""
    found = []
    for name in names:
        if importlib.util.find_spec(PEERS[name].package) is None:
            print(f"note: {name} skipped: the optional package {PEERS[name].package!r} is not installed")
        else:
            found.append(name)
    return found


def _non_leaf_input(model: nn.Module) -> Callable[[Tensor], Tensor]:
    """``model`` fed a copy of its input: Captum's inputs are autograd leaves, on which the module hooks of
    torch's FlopCounterMode fail under ``torch.autograd.grad``; the copy is free (no FLOPs)."""
    return lambda x: model(x.clone())


def integrated_gradients(steps: int = 50, internal_batch_size: int = 256) -> MapFn:
    """Captum IntegratedGradients with ``steps`` steps from the zero (mean-colour) baseline."""

    def explain(model: nn.Module, images: Tensor, targets: Tensor) -> Tensor:
        from captum.attr import IntegratedGradients

        ig = IntegratedGradients(_non_leaf_input(model))
        with torch.enable_grad():
            attr = ig.attribute(
                images,
                baselines=torch.zeros_like(images),
                target=targets,
                n_steps=steps,
                internal_batch_size=internal_batch_size,
            )
        return attr.sum(dim=1).detach().float()

    return explain


def input_x_gradient(model: nn.Module, images: Tensor, targets: Tensor) -> Tensor:
    """Captum InputXGradient: input * d logit / d input, summed over channels (signed)."""
    from captum.attr import InputXGradient

    with torch.enable_grad():
        attr = InputXGradient(_non_leaf_input(model)).attribute(images.clone().requires_grad_(), target=targets)
    return attr.sum(dim=1).detach().float()


def grad_cam(model: nn.Module, images: Tensor, targets: Tensor) -> Tensor:
    """pytorch-grad-cam GradCAM on the last block's ``norm1`` output, patch tokens as a (h, w) grid.

    As in pytorch-grad-cam's ViT example: prefix tokens dropped, tokens (B, P, D) reshaped to
    (B, D, h, w); a Swin block's tokens are already a grid (B, h, w, D) (its last stage's, as in the
    library's Swin example). The library's backward writes parameter ``.grad``; it is cleared afterwards.
    """
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    adapter = adapter_of(model)
    h, w = adapter.grid_size
    prefix = adapter.num_prefix_tokens

    def reshape(tokens: Tensor) -> Tensor:
        if tokens.dim() == 4:  # a Swin block's (B, h, w, D)
            return tokens.permute(0, 3, 1, 2)
        patches = tokens[:, prefix:, :]
        return patches.reshape(patches.shape[0], h, w, patches.shape[2]).permute(0, 3, 1, 2)

    training = model.training
    try:
        with (
            torch.enable_grad(),
            GradCAM(model=model, target_layers=[adapter.blocks[-1].norm1], reshape_transform=reshape) as cam,
        ):
            maps = cam(input_tensor=images, targets=[ClassifierOutputTarget(int(t)) for t in targets])
    finally:
        model.zero_grad(set_to_none=True)
        model.train(training)
    return torch.from_numpy(maps).float().reshape(images.shape[0], *images.shape[-2:])


#: Peer name -> its package and map function; a new peer is one entry.
PEERS: dict[str, Peer] = {
    "integrated_gradients": Peer("captum", integrated_gradients),
    "input_x_gradient": Peer("captum", lambda ig_steps: input_x_gradient),
    "grad_cam": Peer("pytorch_grad_cam", lambda ig_steps: grad_cam),
}


def peer_method(name: str, ig_steps: int = 50) -> MapFn:
    """The map function of peer ``name`` (one of :data:`PEERS`)."""
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; choose one of {tuple(PEERS)}")
    return PEERS[name].build(ig_steps)
