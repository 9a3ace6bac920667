"""Input checks shared by the metrics: shapes, finiteness and masks, with errors that name what was expected."""
from __future__ import annotations

import torch
from torch import Tensor


def check_maps(maps: Tensor, name: str = "maps") -> None:
    """Require a finite floating tensor (B, H, W)."""
    if not isinstance(maps, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (B, H, W), got {type(maps).__name__}")
    if maps.ndim != 3:
        raise ValueError(f"{name} must have shape (B, H, W), got {tuple(maps.shape)}")
    if not maps.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got {maps.dtype}")
    if maps.shape[0] == 0:
        raise ValueError(f"{name} is empty: expected at least one map")
    if not torch.isfinite(maps).all():
        raise ValueError(f"{name} contains NaN or infinite values")


def check_images_targets_maps(images: Tensor, targets: Tensor, maps: Tensor) -> None:
    """Require images (B, C, H, W), targets (B,) integer and finite maps (B, H, W) of the same size."""
    if not isinstance(images, Tensor) or images.ndim != 4 or not images.is_floating_point():
        shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
        raise ValueError(f"images must be a floating tensor (B, C, H, W), got {shape}")
    check_maps(maps)
    if maps.shape != (images.shape[0], *images.shape[2:]):
        raise ValueError(
            f"maps (B, H, W) must match images (B, C, H, W): got maps {tuple(maps.shape)} "
            f"for images {tuple(images.shape)}"
        )
    check_targets(targets, images.shape[0])


def check_targets(targets: Tensor, batch: int) -> None:
    """Require integer targets (B,) that are not negative."""
    if not isinstance(targets, Tensor) or targets.shape != (batch,):
        shape = tuple(targets.shape) if isinstance(targets, Tensor) else type(targets).__name__
        raise ValueError(f"targets must be a tensor ({batch},), got {shape}")
    if targets.is_floating_point() or targets.dtype == torch.bool:
        raise TypeError(f"targets must be an integer tensor, got {targets.dtype}")
    if (targets < 0).any():
        raise ValueError("targets must be class indices >= 0")


def as_bool_masks(masks: Tensor, maps: Tensor, *, allow_empty: bool) -> Tensor:
    """Check masks (B, H, W) against maps and return them as bool.

    Masks may be bool or numeric with values in {0, 1}. With ``allow_empty=False`` a mask without
    any foreground pixel is an error.
    """
    if not isinstance(masks, Tensor):
        raise TypeError(f"masks must be a torch.Tensor (B, H, W), got {type(masks).__name__}")
    if masks.shape != maps.shape:
        raise ValueError(f"masks must have the shape of maps {tuple(maps.shape)}, got {tuple(masks.shape)}")
    if masks.dtype != torch.bool:
        if not ((masks == 0) | (masks == 1)).all():
            raise ValueError("masks must be bool or hold only the values 0 and 1")
        masks = masks != 0
    if not allow_empty:
        empty = ~masks.flatten(1).any(1)
        if empty.any():
            raise ValueError(f"masks {empty.nonzero().flatten().tolist()} are empty: each needs a foreground pixel")
    return masks
