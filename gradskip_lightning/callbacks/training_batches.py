"""Where a training batch holds its images and labels, and the seed of each batch's draws."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from torch import Tensor

from gradskip_lightning.engine.probes.items import IMAGE_KEYS, LABEL_KEYS, chosen_key

__all__ = ["batch_images", "batch_labels", "batch_seed", "class_members", "held_out_correct"]

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
        key = chosen_key(batch, image_key, IMAGE_KEYS)
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


def batch_labels(batch: Any, label_key: str | None = None) -> Any:
    """The labels of a ``batch`` as it holds them: the second element of a tuple or list batch, or the mapping's
    ``label_key`` (default: the first of :data:`~gradskip_lightning.engine.probes.LABEL_KEYS`); None without."""
    if isinstance(batch, Mapping):
        key = chosen_key(batch, label_key, LABEL_KEYS)
        return batch.get(key) if key is not None else None
    if isinstance(batch, Sequence) and not isinstance(batch, str) and len(batch) > 1:
        return batch[1]
    return None


def _usable(labels: Any) -> bool:
    """Whether ``labels`` are class indices (B,) or multi-hot (B, K)."""
    return isinstance(labels, Tensor) and (labels.ndim == 2 or labels.ndim == 1 and not labels.is_floating_point())


def held_out_correct(logits: Tensor, labels: Any) -> tuple[int, int] | None:
    """(right, images) of ``logits`` (B, K) against a batch's ``labels``: the arg-max is the class (B,), or every
    label's logit > 0 agrees with the multi-hot labels (B, K); None when the labels are neither or do not match.

    Example:
        >>> import torch
        >>> held_out_correct(torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0]]), torch.tensor([0, 1, 1]))
        (2, 3)
    """
    if not _usable(labels) or logits.ndim != 2 or len(logits) != len(labels):
        return None
    labels = labels.to(logits.device)
    if labels.ndim == 1:
        right = logits.argmax(dim=1) == labels
    elif labels.shape == logits.shape:
        right = ((logits > 0) == (labels > 0)).all(dim=1)
    else:
        return None
    return int(right.sum()), len(labels)


def class_members(batch: Any, target: int, label_key: str | None = None) -> Tensor:
    """(B,) bool on the CPU: which images of a training ``batch`` are of class ``target``, read from its labels:
    the second element of a tuple or list batch, or the mapping's ``label_key`` (default: the first of
    :data:`~gradskip_lightning.engine.probes.LABEL_KEYS`); class indices (B,), or multi-hot (B, K) (an image is
    of every class whose entry is > 0).

    Raises:
        TypeError: a batch without labels, or labels of another form.
        ValueError: multi-hot labels with fewer than ``target + 1`` classes.

    Example:
        >>> import torch
        >>> class_members([torch.zeros(3, 1, 2, 2), torch.tensor([2, 0, 2])], 2).tolist()
        [True, False, True]
        >>> multi_hot = {"pixel_values": torch.zeros(2, 1, 2, 2), "labels": torch.tensor([[0, 1], [1, 0]])}
        >>> class_members(multi_hot, 1).tolist()
        [True, False]
    """
    labels = batch_labels(batch, label_key)
    if not _usable(labels):
        wanted = repr(label_key) if label_key is not None else f"one of {LABEL_KEYS}"
        if labels is None:
            described = f"a {type(batch).__name__} batch without labels"
        elif isinstance(labels, Tensor):
            described = f"labels {labels.dtype} {tuple(labels.shape)}"
        else:
            described = type(labels).__name__
        raise TypeError(
            "ShortcutCorrection(erase=True) takes the artifact off its class's own images and reads the classes from "
            f"the batch's labels: the second element of a tuple batch, or a mapping's {wanted} (name it with "
            f"label_key=...), as class indices (B,) or multi-hot (B, K); got {described}. Without labels, give "
            "erase=False"
        )
    if labels.ndim == 2 and target >= labels.shape[1]:
        raise ValueError(f"class {target} is not among the batch's {labels.shape[1]} multi-hot classes")
    members = labels == target if labels.ndim == 1 else labels[:, target] > 0
    return members.cpu()


def batch_seed(seed: int, rank: int, epoch: int, batch_idx: int) -> int:
    """The seed of one batch's draws: a hash of the correction's seed, the process rank, the epoch and the
    batch's index, so that ranks draw apart and a resumed fit draws what the uninterrupted one would have.

    Example:
        >>> batch_seed(0, 0, 0, 0) == batch_seed(0, 0, 0, 0) != batch_seed(0, 1, 0, 0)
        True
    """
    return int(np.random.SeedSequence([seed, rank, epoch, batch_idx]).generate_state(1, dtype=np.uint64)[0] >> 1)
