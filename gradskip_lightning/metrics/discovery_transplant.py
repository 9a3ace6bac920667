"""Hotspot transplant test without a known tag: paste a class's hotspot onto the other classes' probes.

For a class c and its hotspot (a patch mask (h, w), from :mod:`~gradskip_lightning.metrics.discovery_maps`), the
recipients are the probes of the other classes that the model does not already predict as c.
Each is pasted, pixel for pixel (the mask upsampled by the patch size), with three regions:

- the hotspot from a class-c probe (the test): ``flip_rate``;
- (a) a region of the hotspot's shape at a uniformly random place (seeded), from the same class-c
  probe: ``random_flip_rate``;
- (b) the hotspot from a probe of another class: ``other_class_flip_rate``.

Donors are taken in turn (recipient i gets class-c probe i mod n_c, and the other-class probe
after it). A flip is a prediction of c after pasting: its arg-max (softmax) or its sigmoid above
0.5 (multi-label). :func:`pixel_constancy` says how alike the hotspot's pixels are across class-c
probes compared with how much they vary within the other classes: 1 for a stamp, about 0 for an object.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from gradskip_lightning.core.validation import (
    check_choice,
    check_image_batch,
    check_logits,
    check_patch_mask,
    check_targets,
)

from .perturbation import ACTIVATIONS, Activation, class_probabilities


@dataclass(frozen=True)
class HotspotTransplant:
    """The transplant test of one class's hotspot; rates are NaN without recipients (or an empty hotspot).

    Attributes:
        target: the class c whose hotspot was pasted.
        recipients: probes of other classes not predicted as c before pasting (the rates' denominator).
        flip_rate: share of recipients predicted as c with the hotspot of a class-c probe pasted in.
        random_flip_rate: control (a), the same with a region of its shape at a random place.
        other_class_flip_rate: control (b), the hotspot taken from a probe of another class.
        constancy: :func:`pixel_constancy` of the hotspot's pixels, in [0, 1] (NaN: too few probes).
    """

    target: int
    recipients: int
    flip_rate: float
    random_flip_rate: float
    other_class_flip_rate: float
    constancy: float

    @property
    def excess(self) -> float:
        """``max(0, flip_rate - max(random_flip_rate, other_class_flip_rate))``; NaN when a rate is."""
        controls = max(self.random_flip_rate, self.other_class_flip_rate)
        if math.isnan(self.flip_rate) or math.isnan(self.random_flip_rate) or math.isnan(self.other_class_flip_rate):
            return math.nan
        return max(0.0, self.flip_rate - controls)


def predicted_as(logits: Tensor, target: int, activation: Activation = "softmax") -> Tensor:
    """(B,) bool: rows of logits (B, K) predicted as ``target``: its arg-max, or its sigmoid above 0.5.

    Example:
        >>> logits = torch.tensor([[2.0, 1.0], [-1.0, -2.0]])
        >>> predicted_as(logits, 0).tolist(), predicted_as(logits, 0, "sigmoid").tolist()
        ([True, True], [True, False])
    """
    probabilities = class_probabilities(logits, torch.full((len(logits),), target, device=logits.device), activation)
    return probabilities > 0.5 if activation == "sigmoid" else logits.argmax(dim=1) == target


def pixel_constancy(images: Tensor, classes: Tensor, target: int, pixels: Tensor) -> float:
    """How much more alike a region's pixels are across class-``target`` images than within other classes, in [0, 1].

    ``1 - s_c / s_o`` clamped to [0, 1]: s_c is the per-pixel standard deviation over the class's
    images, s_o the pooled within-class one over the other classes' images (so that those classes
    differing from each other does not count as variability), both averaged over the region's pixels
    and channels. 1 for a region that is the same in every image of the class only (a stamp), about 0
    for an object or a texture, 0 for pixels constant everywhere. NaN with fewer than 2 images of the
    class, no other class with 2 images, or an empty region.

    Args:
        images: (P, C, H, W) probe images.
        classes: (P,) their classes.
        target: the class c.
        pixels: (H, W) bool, the region.

    Example:
        >>> images = torch.rand(6, 1, 4, 4, generator=torch.Generator().manual_seed(0))
        >>> images[:3, :, 0, 0] = 0.5  # a stamp on class 1
        >>> classes, corner = torch.tensor([1, 1, 1, 0, 0, 0]), torch.zeros(4, 4, dtype=torch.bool)
        >>> corner[0, 0] = True
        >>> pixel_constancy(images, classes, 1, corner)
        1.0
    """
    classes, pixels = classes.to(images.device), pixels.to(images.device)
    region = images[:, :, pixels].double()  # (P, C, n): the region's pixels only
    inside, others = region[classes == target], classes != target
    _, group, sizes = classes[others].unique(return_inverse=True, return_counts=True)
    dof = int((sizes - 1).sum())
    if len(inside) < 2 or dof < 1 or not pixels.any():
        return math.nan
    values = region[others]
    means = region.new_zeros(len(sizes), *region.shape[1:]).index_add_(0, group, values) / sizes[:, None, None]
    spread_out = ((values - means[group]).square().sum(dim=0) / dof).sqrt().mean()
    if spread_out == 0:
        return 0.0
    return float((1 - inside.std(dim=0).mean() / spread_out).clamp(0, 1))


def _patch_pixels(patch_size: int | tuple[int, int]) -> tuple[int, int]:
    """(ph, pw) from ``patch_size``, ph or (ph, pw) positive ints."""
    pair = (patch_size, patch_size) if isinstance(patch_size, int) else patch_size
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 or any(type(p) is not int for p in pair):
        raise TypeError(f"patch_size must be an int or a pair of ints (ph, pw); got {patch_size!r}")
    if min(pair) < 1:
        raise ValueError(f"patch_size must be positive; got {patch_size!r}")
    return pair[0], pair[1]


def _pixel_masks(shape: Tensor, tops: Tensor, lefts: Tensor, grid: tuple[int, int], patch: tuple[int, int]) -> Tensor:
    """(n, H, W) bool: the patch mask ``shape`` (bh, bw) placed with its corner at (tops, lefts) (n,), in pixels."""
    height, width = grid
    rows = torch.arange(height, device=tops.device)[None, :, None] - tops[:, None, None]
    cols = torch.arange(width, device=tops.device)[None, None, :] - lefts[:, None, None]
    inside = (rows >= 0) & (rows < shape.shape[0]) & (cols >= 0) & (cols < shape.shape[1])
    masks = inside & shape[rows.clamp(0, shape.shape[0] - 1), cols.clamp(0, shape.shape[1] - 1)]
    return masks.repeat_interleave(patch[0], dim=1).repeat_interleave(patch[1], dim=2)


def hotspot_transplant(
    model: Callable[[Tensor], Tensor],
    images: Tensor,
    classes: Tensor,
    hotspot: Tensor,
    target: int,
    *,
    patch_size: int | tuple[int, int],
    seed: int = 0,
    batch_size: int = 256,
    activation: Activation = "softmax",
    logits: Tensor | None = None,
) -> HotspotTransplant:
    """Paste class ``target``'s hotspot onto the other classes' probes, with controls (see the module docstring).

    All images go through ``model`` in chunks of ``batch_size`` under ``torch.no_grad()``: the
    recipients once unchanged (unless ``logits`` gives them), then 3 pasted copies of each
    (n_o + 3 * recipients images).

    Args:
        model: images (B, C, H, W) -> logits (B, K), in eval mode (the mode is left as it is).
        images: (P, C, H, W) probe images, normalised as the model expects.
        classes: (P,) their classes.
        hotspot: (h, w) bool patch mask; ``(h * ph, w * pw)`` must be the image size.
        target: the class c.
        patch_size: pixels per patch, ph or (ph, pw).
        seed: of the random placements of control (a).
        batch_size: images per forward call.
        activation: "softmax" (a flip: arg-max) or "sigmoid" (multi-label: its sigmoid > 0.5).
        logits: (P, K) the model's logits of the unchanged ``images``, when known (their forward is
            then skipped; :func:`~.discovery.discover` computes them once for every class).

    Example:
        >>> def model(x):  # class 1 iff the top-left 2 x 2 pixels are 1
        ...     stamped = (x[:, 0, :2, :2] == 1).flatten(1).all(1).double()
        ...     return torch.stack([1 - stamped, stamped], dim=1)
        >>> images = torch.rand(8, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> classes = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0])
        >>> images[:4, :, :2, :2] = 1.0
        >>> hotspot = torch.zeros(4, 4, dtype=torch.bool)
        >>> hotspot[0, 0] = True
        >>> result = hotspot_transplant(model, images, classes, hotspot, 1, patch_size=2)
        >>> result.flip_rate, result.other_class_flip_rate, result.constancy, result.recipients
        (1.0, 0.0, 1.0, 4)
    """
    check_image_batch(images)
    check_targets(classes, len(images))
    check_patch_mask(hotspot)
    check_choice(activation, ACTIVATIONS, "activation")
    if isinstance(target, bool) or not isinstance(target, int):
        raise TypeError(f"target must be a class index (int); got {type(target).__name__}")
    if target < 0:
        raise ValueError(f"target must be a class index >= 0; got {target}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    patch, grid = _patch_pixels(patch_size), (hotspot.shape[0], hotspot.shape[1])
    covered, size = (grid[0] * patch[0], grid[1] * patch[1]), tuple(images.shape[-2:])
    if covered != size:
        raise ValueError(f"hotspot {grid} of {patch} px patches covers {covered}, not the images' {size}")
    device = images.device
    classes, hotspot = classes.to(device), hotspot.to(device)
    donors, others = (classes == target).nonzero()[:, 0], (classes != target).nonzero()[:, 0]
    pixels = hotspot.repeat_interleave(patch[0], dim=0).repeat_interleave(patch[1], dim=1)
    constancy = pixel_constancy(images, classes, target, pixels)

    def predictions(count: int, build: Callable[[int, int], Tensor]) -> Tensor:
        chunks = []
        with torch.no_grad():
            for start in range(0, count, batch_size):
                chunks.append(predicted_as(model(build(start, min(start + batch_size, count))), target, activation))
        return torch.cat(chunks) if chunks else torch.zeros(0, dtype=torch.bool, device=device)

    if not len(donors) or not hotspot.any():
        return HotspotTransplant(target, 0, math.nan, math.nan, math.nan, constancy)
    if logits is None:
        clean = predictions(len(others), lambda start, stop: images[others[start:stop]])
    else:
        check_logits(model, logits, len(images))
        clean = predicted_as(logits.to(device)[others], target, activation)
    eligible = (~clean.to(device)).nonzero()[:, 0]
    count = len(eligible)
    if not count:
        return HotspotTransplant(target, 0, math.nan, math.nan, math.nan, constancy)
    rows, cols = hotspot.any(dim=1).nonzero()[:, 0], hotspot.any(dim=0).nonzero()[:, 0]
    shape = hotspot[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
    generator = torch.Generator().manual_seed(seed)
    random_tops = torch.randint(grid[0] - shape.shape[0] + 1, (count,), generator=generator)
    random_lefts = torch.randint(grid[1] - shape.shape[1] + 1, (count,), generator=generator)
    index = torch.arange(count, device=device)
    # arms in a row: the hotspot from class c, (a) a random place from class c, (b) the hotspot from another class
    recipient = others[eligible].repeat(3)
    donor = torch.cat([donors[index % len(donors)]] * 2 + [others[(eligible + 1) % len(others)]])
    tops = torch.cat([rows[:1].expand(count), random_tops.to(device), rows[:1].expand(count)])
    lefts = torch.cat([cols[:1].expand(count), random_lefts.to(device), cols[:1].expand(count)])

    def pasted(start: int, stop: int) -> Tensor:
        masks = _pixel_masks(shape, tops[start:stop], lefts[start:stop], grid, patch)
        return torch.where(masks[:, None], images[donor[start:stop]], images[recipient[start:stop]])

    rates = predictions(3 * count, pasted).reshape(3, count).double().mean(dim=1).tolist()
    return HotspotTransplant(target, count, rates[0], rates[1], rates[2], constancy)
