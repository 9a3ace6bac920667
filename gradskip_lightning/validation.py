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

import torch
from torch import Tensor, nn

__all__ = [
    "as_bool_masks",
    "check_class_targets",
    "check_image_batch",
    "check_images_targets_maps",
    "check_logits",
    "check_maps",
    "check_targets",
]


def _describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"{value.dtype} {tuple(value.shape)}"
    return type(value).__name__


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


def check_logits(model: nn.Module, logits: object, batch: int) -> None:
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
