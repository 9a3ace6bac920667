"""Patch ranking, perturbation baselines and the batched perturbed-forward runner.

Shared by insertion/deletion and the faithfulness violation test. A perturbation is described at
patch level: a bool mask (B, S, h, w) says, for each image and each of S perturbation steps, which
patches are taken from ``fill`` instead of ``base``. The runner builds the B * S images chunk by
chunk (``batch_size`` images per forward) so memory stays bounded and the model sees large batches.
A classifier's score is the target's probability; a segmentation model's (``regions`` given) is the
mean of the target's logit over the object's region on its logits grid.
"""
from __future__ import annotations

import math
from typing import Callable, Literal, Union

import torch
import torchvision.transforms.v2.functional as TF
from torch import Tensor, nn

from gradskip_lightning.adapters import find_adapter

Baseline = Union[str, Tensor]
"""``"zeros"`` (zeros of the normalised input: the mean colour), ``"blur"`` or a tensor broadcastable to the images."""

Activation = Literal["softmax", "sigmoid"]
"""How logits become the scored probability: ``"softmax"`` over classes (multi-class) or each
class's own ``"sigmoid"`` (multi-label)."""

ACTIVATIONS: tuple[str, ...] = ("softmax", "sigmoid")


def check_activation(activation: str) -> None:
    """Raise ValueError unless ``activation`` is one of :data:`ACTIVATIONS`."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


def check_classes(targets: Tensor, num_classes: int) -> None:
    """Raise ValueError unless every target (n,) is a class index below ``num_classes``."""
    if (targets >= num_classes).any():
        raise ValueError(f"targets must be < num_classes = {num_classes}")


def class_probabilities(logits: Tensor, targets: Tensor, activation: Activation = "softmax") -> Tensor:
    """Probability (n,) of each row's target class from logits (n, num_classes) (ValueError otherwise).

    Example:
        >>> logits = torch.tensor([[2.0, 0.0], [2.0, 0.0]])
        >>> class_probabilities(logits, torch.tensor([0, 1])).round(decimals=3)
        tensor([0.8810, 0.1190])
        >>> class_probabilities(logits, torch.tensor([0, 1]), "sigmoid").round(decimals=3)
        tensor([0.8810, 0.5000])
    """
    check_activation(activation)
    if not isinstance(logits, Tensor) or logits.ndim != 2 or logits.shape[0] != len(targets):
        got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"model must return logits (n, num_classes) for n = {len(targets)} images, got {got}")
    check_classes(targets, logits.shape[1])
    probabilities = logits.softmax(dim=1) if activation == "softmax" else logits.sigmoid()
    return probabilities.gather(1, targets[:, None])[:, 0]


def check_regions(regions: Tensor | None, batch: int) -> None:
    """Require ``regions`` to be None or a bool tensor (B, h, w) with a pixel in each image's region."""
    if regions is None:
        return
    if not isinstance(regions, Tensor) or regions.dtype != torch.bool:
        got = regions.dtype if isinstance(regions, Tensor) else type(regions).__name__
        raise TypeError(f"regions must be a bool tensor (B, h, w) on the logits grid, got {got}")
    if regions.ndim != 3 or regions.shape[0] != batch:
        raise ValueError(f"regions must have shape (B, h, w) with B = {batch}, got {tuple(regions.shape)}")
    empty = ~regions.flatten(1).any(dim=1)
    if empty.any():
        raise ValueError(f"regions {empty.nonzero().flatten().tolist()} are empty: each needs a pixel to score")


def region_scores(logits: Tensor, targets: Tensor, regions: Tensor) -> Tensor:
    """Mean (n,) over each row's region of its target class's logit, from logits (n, K, h, w).

    The score of a segmentation model for one object: no activation, in logit units.

    Args:
        logits: per-pixel class logits (n, K, h, w).
        targets: classes (n,).
        regions: bool (n, h, w) on the logits grid, at least one pixel each.

    Example:
        >>> logits = torch.arange(8.0).reshape(1, 2, 2, 2)  # class 1: [[4, 5], [6, 7]]
        >>> region_scores(logits, torch.tensor([1]), torch.tensor([[[True, False], [True, False]]]))
        tensor([5.])
    """
    check_regions(regions, len(targets))
    if not isinstance(logits, Tensor) or logits.ndim != 4 or logits.shape[:1] + logits.shape[2:] != regions.shape:
        got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(
            f"with regions (n, h, w) = {tuple(regions.shape)} the model must return logits (n, K, h, w) "
            f"on the same grid, got {got}"
        )
    check_classes(targets, logits.shape[1])
    target_logits = logits[torch.arange(len(targets), device=logits.device), targets.to(logits.device)]
    regions = regions.to(logits.device)
    inside = torch.where(regions, target_logits, torch.zeros((), dtype=logits.dtype, device=logits.device))
    return inside.sum(dim=(1, 2)) / regions.sum(dim=(1, 2))


class CountingModel(nn.Module):
    """Wraps a classifier and counts its forward calls and the images they carried.

    Example:
        >>> from gradskip_lightning.metrics import insertion_deletion
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 4)).eval()
        >>> images, maps = torch.randn(2, 3, 16, 16), torch.rand(2, 16, 16)
        >>> counted = CountingModel(model)
        >>> scores = insertion_deletion(counted, images, torch.tensor([0, 3]), maps, patch_size=8, steps=4)
        >>> counted.calls, counted.images  # 2 curves x 2 images x (K + 1) steps in one forward
        (1, 20)
    """

    def __init__(self, model: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.model = model
        self.calls = 0
        self.images = 0

    def forward(self, images: Tensor) -> Tensor:
        self.calls += 1
        self.images += images.shape[0]
        return self.model(images)


def resolve_patch_size(
    model: object, patch_size: int | tuple[int, int] | None, image_size: tuple[int, int]
) -> tuple[int, int]:
    """Patch size (ph, pw) in pixels: the given one, or the one of the backbone in ``model``.

    Raises ValueError when it cannot be found or does not divide the image size (H, W).
    """
    if patch_size is None:
        try:
            patch_size = find_adapter(model).patch_size
        except TypeError as error:
            raise ValueError(f"patch_size is required: the model's patch size is unknown. {error}") from None
    ph, pw = (patch_size, patch_size) if isinstance(patch_size, int) else tuple(patch_size)
    if ph < 1 or pw < 1:
        raise ValueError(f"patch_size must be positive, got {(ph, pw)}")
    height, width = image_size
    if height % ph or width % pw:
        raise ValueError(f"image size {(height, width)} is not a multiple of the patch size {(ph, pw)}")
    return ph, pw


def patch_relevance(maps: Tensor, patch_size: tuple[int, int]) -> Tensor:
    """Sum of each (B, H, W) map over each patch: (B, P) float64, patches in row-major order."""
    batch, height, width = maps.shape
    ph, pw = patch_size
    grid = maps.double().reshape(batch, height // ph, ph, width // pw, pw)
    return grid.sum(dim=(2, 4)).reshape(batch, -1)


def rank_patches(relevance: Tensor) -> Tensor:
    """Patch indices (B, P), highest relevance first; ties keep row-major order (stable sort)."""
    return torch.argsort(relevance, dim=1, descending=True, stable=True)


def ranked_masks(order: Tensor, counts: Tensor) -> Tensor:
    """Masks (B, S, P) bool: step s selects the first ``counts[s]`` patches of ``order`` (B, P)."""
    position = torch.argsort(order, dim=1)  # rank of each patch
    return position[:, None, :] < counts.to(order.device)[None, :, None]


def gaussian_blur(images: Tensor, kernel_size: int | None = None, sigma: float | None = None) -> Tensor:
    """Gaussian-blurred copy of images (B, C, H, W), reflect-padded.

    Defaults follow Petsiuk et al.: kernel 11 and sigma 5 at 224 px, scaled with each side
    (sigma = 5 * side / 224, kernel = 2 * round(sigma) + 1, at least 3).
    """
    sizes = images.shape[-2:]
    sigmas = [sigma if sigma is not None else 5.0 * side / 224 for side in sizes]
    kernels = [kernel_size if kernel_size is not None else max(3, 2 * round(s) + 1) for s in sigmas]
    kernels = [min(k, 2 * ((side - 1) // 2) + 1) for k, side in zip(kernels, sizes)]  # reflect pad < side
    # torchvision expects (x, y) order: width first.
    return TF.gaussian_blur(images, kernel_size=kernels[::-1], sigma=sigmas[::-1])


def make_baseline(images: Tensor, baseline: Baseline) -> Tensor:
    """The replacement images (B, C, H, W) for ``baseline``: "zeros", "blur" or a broadcastable tensor."""
    if isinstance(baseline, Tensor):
        try:
            return torch.broadcast_to(baseline.to(images), images.shape)
        except RuntimeError as err:
            raise ValueError(
                f"baseline tensor {tuple(baseline.shape)} does not broadcast to images {tuple(images.shape)}"
            ) from err
    if baseline == "zeros":
        return torch.zeros_like(images)
    if baseline == "blur":
        return gaussian_blur(images)
    raise ValueError(f'baseline must be "zeros", "blur" or a tensor, got {baseline!r}')


def step_counts(num_patches: int, steps: int) -> Tensor:
    """Patches perturbed at each of the K + 1 steps (K + 1,): round(k * P / K), halves rounded up."""
    if not 1 <= steps <= num_patches:
        raise ValueError(f"steps must be in [1, {num_patches}] (one per patch at most), got {steps}")
    return torch.tensor([math.floor(k * num_patches / steps + 0.5) for k in range(steps + 1)])


def perturbed_probabilities(
    model: Callable[[Tensor], Tensor],
    base: Tensor,
    fill: Tensor,
    masks: Tensor,
    targets: Tensor,
    *,
    batch_size: int,
    activation: Activation = "softmax",
    regions: Tensor | None = None,
) -> Tensor:
    """Score of each target class on every perturbed image: its probability, or its mean region logit.

    Without ``regions`` the score is the target's softmax or sigmoid probability; with ``regions``
    (segmentation) it is :func:`region_scores`, the mean of the target's logit over the image's
    region (logit units, ``activation`` unused).

    Args:
        model: images (n, C, H, W) -> logits (n, num_classes), or (n, K, h, w) with ``regions``;
            called under ``torch.no_grad()`` in whatever mode it is in (pass an eval-mode model).
        base: images (B, C, H, W) that unselected patches come from.
        fill: images (B, C, H, W) that selected patches come from.
        masks: patch selections (B, S, h, w) bool; patches are (H / h) x (W / w) pixels.
        targets: classes (B,).
        batch_size: images per forward call.
        activation: "softmax" (multi-class) or "sigmoid" (multi-label), see :data:`Activation`.
        regions: None, or bool (B, h, w) on the model's logits grid: the pixels each image's score
            averages over.

    Returns:
        Scores (B, S) in the dtype of the logits: probabilities, or mean logits with ``regions``.
    """
    check_activation(activation)
    check_regions(regions, base.shape[0])
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    batch, steps, grid_h, grid_w = masks.shape
    ph, pw = base.shape[-2] // grid_h, base.shape[-1] // grid_w
    flat = masks.reshape(batch * steps, grid_h, grid_w).to(base.device)
    targets = targets.to(base.device)
    chunks = []
    with torch.no_grad():
        for start in range(0, batch * steps, batch_size):
            index = torch.arange(start, min(start + batch_size, batch * steps), device=base.device)
            sample = index // steps
            pixel_mask = flat[index].repeat_interleave(ph, dim=1).repeat_interleave(pw, dim=2)
            logits = model(torch.where(pixel_mask[:, None], fill[sample], base[sample]))
            if regions is None:
                chunks.append(class_probabilities(logits, targets[sample], activation))
            else:
                chunks.append(region_scores(logits, targets[sample], regions[sample]))
    return torch.cat(chunks).reshape(batch, steps)
