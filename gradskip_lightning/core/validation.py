"""Input checks shared by the explainers, the metrics and the callback: one function per kind of
input, and one exception type per mistake.

- a value of the wrong Python type, or a tensor of the wrong dtype: :class:`TypeError`;
- a wrong shape, an out-of-range value, NaN or infinity: :class:`ValueError`.

Every message names what was expected and what was given.

Example:
    >>> import torch
    >>> check_image_batch(torch.zeros(2, 3, 8, 8))
    >>> check_image_batch(torch.zeros(2, 8, 8))
    Traceback (most recent call last):
    ...
    ValueError: images must have shape (B, C, H, W); got (2, 8, 8)
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral, Real
from typing import TypeGuard, TypeVar

import torch
from torch import Tensor

__all__ = [
    "as_bool_masks",
    "as_patch_size",
    "check_choice",
    "check_class_targets",
    "check_fraction",
    "check_image_batch",
    "check_images_targets_maps",
    "check_int",
    "check_logits",
    "check_map_pair",
    "check_maps",
    "check_patch_mask",
    "check_regions",
    "check_targets",
    "required",
]


T = TypeVar("T")


def required(value: T | None, what: str) -> T:
    """``value``, or a ValueError saying that ``what`` is missing (narrows an optional for the caller).

    Example:
        >>> required(3, "the patch size")
        3
        >>> required(None, "chefer's attention gradient (a 'gradients' pass)")
        Traceback (most recent call last):
        ...
        ValueError: chefer's attention gradient (a 'gradients' pass) is missing
    """
    if value is None:
        raise ValueError(f"{what} is missing")
    return value


def _describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"{value.dtype} {tuple(value.shape)}"
    return type(value).__name__


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, Integral) and not isinstance(value, bool)


def check_int(value: object, name: str, low: int = 1, high: int | None = None, unit: str = "") -> None:
    """Require an int in [low, high] (no upper bound when ``high`` is None); ``unit`` follows the range
    in the message, e.g. " patches".

    Example:
        >>> check_int(3, "steps", high=16)
        >>> check_int(17, "steps", high=16, unit=" (one per patch at most)")
        Traceback (most recent call last):
        ...
        ValueError: steps must be in [1, 16] (one per patch at most); got 17
    """
    if not _is_int(value):
        raise TypeError(f"{name} must be an int; got {_describe(value)}")
    if value < low or (high is not None and value > high):
        expected = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {expected}{unit}; got {value}")


def check_fraction(value: object, name: str) -> None:
    """Require a real number in (0, 1]."""
    if not isinstance(value, Real) or isinstance(value, bool):
        raise TypeError(f"{name} must be a fraction in (0, 1]; got {_describe(value)}")
    if not 0 < float(value) <= 1:
        raise ValueError(f"{name} must be a fraction in (0, 1]; got {value}")


def check_choice(value: object, choices: tuple[str, ...], name: str) -> None:
    """Require one of the strings ``choices``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {choices}; got {_describe(value)}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}; got {value!r}")


def as_patch_size(patch_size: object, image_size: tuple[int, int] | None = None) -> tuple[int, int]:
    """The patch size (ph, pw) in pixels of an int or a pair of ints, each side >= 1 and, with
    ``image_size`` (H, W), dividing it.

    Example:
        >>> as_patch_size(8, (32, 32)), as_patch_size((4, 8))
        ((8, 8), (4, 8))
        >>> as_patch_size(None)
        Traceback (most recent call last):
        ...
        TypeError: patch_size is required: an int or a pair (ph, pw) of ints, e.g. explainer.patch_size; got NoneType
    """
    expected = "an int or a pair (ph, pw) of ints, e.g. explainer.patch_size"
    if _is_int(patch_size):
        patch_size = (patch_size, patch_size)
    if not isinstance(patch_size, Sequence) or isinstance(patch_size, str):
        given = "patch_size is required" if patch_size is None else "patch_size must be"
        raise TypeError(f"{given}: {expected}; got {_describe(patch_size)}")
    if len(patch_size) != 2:
        raise ValueError(f"patch_size must be {expected}; got {len(patch_size)} values {tuple(patch_size)}")
    if not all(_is_int(side) for side in patch_size):
        raise TypeError(f"patch_size must be {expected}; got {tuple(patch_size)!r}")
    ph, pw = (int(side) for side in patch_size)
    if ph < 1 or pw < 1:
        raise ValueError(f"patch_size must be positive; got {(ph, pw)}")
    if image_size is not None and (image_size[0] % ph or image_size[1] % pw):
        raise ValueError(f"image size {tuple(image_size)} is not a multiple of the patch size {(ph, pw)}")
    return ph, pw


def check_image_batch(images: Tensor, name: str = "images") -> None:
    """Require a finite floating tensor (B, C, H, W)."""
    if not isinstance(images, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (B, C, H, W); got {_describe(images)}")
    if images.ndim != 4:
        raise ValueError(f"{name} must have shape (B, C, H, W); got {tuple(images.shape)}")
    if not images.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, normalised as the model expects; got {images.dtype}")
    if not torch.isfinite(images).all():
        raise ValueError(f"{name} contain NaN or infinite values")


def check_targets(targets: Tensor, batch: int) -> None:
    """Require integer class indices (batch,) that are not negative."""
    if not isinstance(targets, Tensor):
        raise TypeError(f"targets must be an integer tensor ({batch},); got {_describe(targets)}")
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
        raise TypeError(f"targets must be an integer tensor, got {targets.dtype}")
    if targets.shape != (batch,):
        raise ValueError(f"targets must have shape ({batch},); got {tuple(targets.shape)}")
    if (targets < 0).any():
        raise ValueError(f"targets must be class indices >= 0; got {targets.tolist()}")


def check_class_targets(targets: Tensor, batch: int, num_classes: int) -> None:
    """Require integer class indices (batch,) in [0, num_classes)."""
    check_targets(targets, batch)
    if batch and targets.max() >= num_classes:
        raise ValueError(f"targets must be in [0, {num_classes}); got {targets.tolist()}")


def check_logits(model: object, logits: object, batch: int) -> None:
    """Require the float logits (batch, C), C >= 1, that ``model``'s forward returned."""
    if not isinstance(logits, Tensor) or logits.ndim != 2 or logits.shape[0] != batch or not logits.shape[1]:
        raise ValueError(
            f"{type(model).__name__}.forward must return logits of shape (B={batch}, num_classes); got "
            f"{_describe(logits)}. Pass the module whose forward maps images to class logits."
        )


def check_maps(maps: Tensor, name: str = "maps") -> None:
    """Require a finite floating tensor (B, H, W) with B >= 1."""
    if not isinstance(maps, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (B, H, W); got {_describe(maps)}")
    if maps.ndim != 3:
        raise ValueError(f"{name} must have shape (B, H, W); got {tuple(maps.shape)}")
    if not maps.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor; got {maps.dtype}")
    if maps.shape[0] == 0:
        raise ValueError(f"{name} is empty: expected at least one map")
    if not torch.isfinite(maps).all():
        raise ValueError(f"{name} contains NaN or infinite values")


def check_map_pair(maps_a: Tensor, maps_b: Tensor) -> None:
    """Require two finite floating tensors (B, H, W) of the same shape, ``maps_a`` and ``maps_b``."""
    check_maps(maps_a, "maps_a")
    check_maps(maps_b, "maps_b")
    if maps_a.shape != maps_b.shape:
        raise ValueError(f"maps_a {tuple(maps_a.shape)} and maps_b {tuple(maps_b.shape)} must have the same shape")


def check_regions(regions: Tensor | None, batch: int) -> None:
    """Require None or a bool tensor (batch, h, w) with at least one pixel in each image's region."""
    if regions is None:
        return
    if not isinstance(regions, Tensor) or regions.dtype != torch.bool:
        raise TypeError(f"regions must be a bool tensor (B, h, w) on the logits grid; got {_describe(regions)}")
    if regions.ndim != 3 or regions.shape[0] != batch:
        raise ValueError(f"regions must have shape (B, h, w) with B = {batch}; got {tuple(regions.shape)}")
    empty = ~regions.flatten(1).any(dim=1)
    if empty.any():
        raise ValueError(f"regions {empty.nonzero().flatten().tolist()} are empty: each needs a pixel to score")


def check_images_targets_maps(images: Tensor, targets: Tensor, maps: Tensor) -> None:
    """Require images (B, C, H, W), integer targets (B,) and finite maps (B, H, W) of the images' size."""
    if not isinstance(images, Tensor):
        raise TypeError(f"images must be a torch.Tensor (B, C, H, W); got {_describe(images)}")
    if images.ndim != 4:
        raise ValueError(f"images must have shape (B, C, H, W); got {tuple(images.shape)}")
    if not images.is_floating_point():
        raise TypeError(f"images must be a floating tensor; got {images.dtype}")
    check_maps(maps)
    if maps.shape != (images.shape[0], *images.shape[2:]):
        raise ValueError(
            f"maps (B, H, W) must match images (B, C, H, W): got maps {tuple(maps.shape)} "
            f"for images {tuple(images.shape)}"
        )
    check_targets(targets, images.shape[0])


def as_bool_masks(masks: Tensor, maps: Tensor, *, allow_empty: bool) -> Tensor:
    """Check masks (B, H, W) against maps (B, H, W) and return them as bool.

    Masks may be bool or numeric with values in {0, 1}. With ``allow_empty=False`` a mask without
    any foreground pixel is an error.
    """
    if not isinstance(masks, Tensor):
        raise TypeError(f"masks must be a torch.Tensor (B, H, W); got {_describe(masks)}")
    if masks.shape != maps.shape:
        raise ValueError(f"masks must have the shape of maps {tuple(maps.shape)}; got {tuple(masks.shape)}")
    if masks.dtype != torch.bool:
        if not ((masks == 0) | (masks == 1)).all():
            raise ValueError("masks must be bool or hold only the values 0 and 1")
        masks = masks != 0
    if not allow_empty:
        empty = ~masks.flatten(1).any(1)
        if empty.any():
            raise ValueError(f"masks {empty.nonzero().flatten().tolist()} are empty: each needs a foreground pixel")
    return masks


def check_patch_mask(mask: Tensor, name: str = "hotspot") -> None:
    """Require a bool tensor (h, w): a selection of patches on the token grid."""
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor (h, w) of patches; got {_describe(mask)}")
    if mask.ndim != 2:
        raise ValueError(f"{name} must have shape (h, w); got {tuple(mask.shape)}")
