"""Where a training batch holds its images, and the seed of each batch's draws."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from torch import Tensor

from gradskip_lightning.callback.probes import IMAGE_KEYS

__all__ = ["batch_images", "batch_seed"]

BATCH_FORMS = (
    "a tensor of images (B, C, H, W), a tuple or list whose first element is one ((images, labels, ...), what "
    f"the default collate makes of tuple items), or a mapping with the images under image_key (default: the "
    f"first of {IMAGE_KEYS})"
)


def batch_images(batch: Any, image_key: str | None = None) -> Tensor:
    """The images tensor (B, C, H, W) of a training ``batch``, the very tensor the training step gets.

    Raises:
        TypeError: a batch of another form, or whose images are not a float tensor (B, C, H, W).

    Example:
        >>> import torch
        >>> images = torch.zeros(2, 3, 4, 4)
        >>> batch_images([images, torch.zeros(2)]) is images, batch_images({"pixel_values": images}) is images
        (True, True)
    """
    if isinstance(batch, Tensor):
        images = batch
    elif isinstance(batch, Mapping):
        key = image_key if image_key is not None else next((k for k in IMAGE_KEYS if k in batch), None)
        if key is None or key not in batch:
            wanted = repr(image_key) if image_key is not None else f"one of {IMAGE_KEYS}"
            raise TypeError(
                f"ShortcutCorrection looks for the training images under {wanted}; the batch has keys "
                f"{sorted(map(str, batch))}. Name the key with ShortcutCorrection(image_key=...)"
            )
        images = batch[key]
    elif isinstance(batch, Sequence) and not isinstance(batch, str) and len(batch) > 0:
        images = batch[0]
    else:
        raise TypeError(f"ShortcutCorrection reads training batches as {BATCH_FORMS}; got a {type(batch).__name__}")
    if not isinstance(images, Tensor) or images.ndim != 4 or not images.is_floating_point():
        described = f"{images.dtype} {tuple(images.shape)}" if isinstance(images, Tensor) else type(images).__name__
        raise TypeError(
            f"ShortcutCorrection needs the batch's images as a float tensor (B, C, H, W), in the model's input space; "
            f"got {described}. Batches are read as {BATCH_FORMS}"
        )
    return images


def batch_seed(seed: int, rank: int, epoch: int, batch_idx: int) -> int:
    """The seed of one batch's draws: a hash of the correction's seed, the process rank, the epoch and the
    batch's index, so that ranks draw apart and a resumed fit draws what the uninterrupted one would have.

    Example:
        >>> batch_seed(0, 0, 0, 0) == batch_seed(0, 0, 0, 0) != batch_seed(0, 1, 0, 0)
        True
    """
    return int(np.random.SeedSequence([seed, rank, epoch, batch_idx]).generate_state(1, dtype=np.uint64)[0] >> 1)
