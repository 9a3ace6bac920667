"""The probe container (:class:`ProbeSet`), the checks against the model, and explicit probes."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .items import OBJECT, as_regions, explained_labels, float32_images


@dataclass
class ProbeSet:
    """Probe images and what belongs to them, in a fixed order.

    Attributes:
        images: (P, C, H, W) float, normalised as the model expects.
        labels: (P,) int64 explained classes (multi-label: the chosen positive label).
        ids: (P,) int64 identifiers: dataset indices for drawn probes, 0..P-1 for given ones.
        regions: name -> (P, H, W) bool masks (a bare tensor means ``{"object": masks}``), or None.
        multi_hot: (P, C) float multi-hot labels of multi-label probes, or None.
    """

    images: Tensor
    labels: Tensor
    ids: Tensor
    regions: dict[str, Tensor] | None = None
    multi_hot: Tensor | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.images, Tensor) or self.images.ndim != 4:
            raise ValueError(
                f"probe images must be a float tensor (P, C, H, W); got {tuple(getattr(self.images, 'shape', ()))}"
            )
        if not self.images.is_floating_point():
            raise TypeError(
                f"probe images must be float, normalised as the model expects; got {self.images.dtype}. Convert "
                "them as the training data is (e.g. ToDtype(torch.float32, scale=True) then Normalize(mean, std))"
            )
        count = self.images.shape[0]
        if count == 0:
            raise ValueError("the probe set is empty")
        self.labels = torch.as_tensor(self.labels).long().reshape(-1)
        self.ids = torch.as_tensor(self.ids).long().reshape(-1)
        if self.labels.shape != (count,) or self.ids.shape != (count,):
            raise ValueError(
                f"probe labels and ids must be ({count},); got {tuple(self.labels.shape)} and {tuple(self.ids.shape)}"
            )
        self.regions = as_regions(self.regions)
        for name, masks in (self.regions or {}).items():
            if masks.shape != (count, *self.images.shape[2:]):
                raise ValueError(
                    f"probe region {name!r} masks must be ({count}, {self.images.shape[2]}, {self.images.shape[3]}); "
                    f"got {tuple(masks.shape)}"
                )
        if self.multi_hot is not None and (self.multi_hot.ndim != 2 or len(self.multi_hot) != count):
            raise ValueError(f"multi-hot probe labels must be ({count}, C); got {tuple(self.multi_hot.shape)}")

    def __len__(self) -> int:
        return self.images.shape[0]

    @property
    def masks(self) -> Tensor | None:
        """The ``"object"`` region (P, H, W) bool, scored by the Pointing Game, or None."""
        return None if self.regions is None else self.regions.get(OBJECT)

    def fingerprint(self) -> Tensor:
        """(P,) int64: a hash of each probe's image bytes and label, to tell a changed probe set on resume."""
        images = self.images.detach().cpu().float().contiguous().flatten(1).numpy()
        labels = self.labels.cpu().numpy().astype(np.int64)
        hashes = [
            int.from_bytes(
                hashlib.blake2b(image.tobytes() + label.tobytes(), digest_size=8).digest(), "little", signed=True
            )
            for image, label in zip(images, labels, strict=True)
        ]
        return torch.tensor(hashes, dtype=torch.long)

    def subset(self, index: Tensor | slice) -> ProbeSet:
        """The probes at ``index`` (positions, not ids), in that order."""
        return ProbeSet(
            self.images[index],
            self.labels[index],
            self.ids[index],
            None if self.regions is None else {name: masks[index] for name, masks in self.regions.items()},
            None if self.multi_hot is None else self.multi_hot[index],
        )


def check_probes(
    probes: ProbeSet, in_chans: int, img_size: tuple[int, int] | None, num_classes: int, what: str = "probe"
) -> None:
    """Refuse probes the model cannot explain, before any epoch: shape, finiteness, labels.
    ``img_size`` None: the model takes any size (only the channels are checked here); ``what`` names the
    probes in messages (``"discovery probe"``).

    Raises:
        ValueError: naming the problem and the fix.
    """
    expected = (in_chans, *(img_size or probes.images.shape[2:]))
    if tuple(probes.images.shape[1:]) != expected:
        raise ValueError(
            f"{what} images must be (P, {expected[0]}, {expected[1]}, {expected[2]}) for this model; "
            f"got {tuple(probes.images.shape)}"
        )
    bad = (~torch.isfinite(probes.images).flatten(1).all(dim=1)).nonzero()[:, 0]
    if len(bad):
        raise ValueError(
            f"{what} images {probes.ids[bad].tolist()} (ids) contain NaN or infinite values: fix those items of the "
            "dataset (or its transform), or give finite images"
        )
    if probes.multi_hot is not None and probes.multi_hot.shape[1] != num_classes:
        raise ValueError(f"multi-hot {what} labels must have {num_classes} classes; got {probes.multi_hot.shape[1]}")
    out = ((probes.labels < 0) | (probes.labels >= num_classes)).nonzero()[:, 0]
    if len(out):
        problem = "have no positive label" if probes.multi_hot is not None else f"are not in [0, {num_classes})"
        raise ValueError(
            f"{what} labels of ids {probes.ids[out].tolist()} {problem} (labels {probes.labels[out].tolist()}): "
            "fix the dataset's labels or the probe_labels given"
        )


class ProbeImages:
    """Explicit probes for the callback (instead of drawing them from the validation set).

    Args:
        images: (P, C, H, W) float, normalised as the model expects.
        labels: (P,) class indices, or (P, C) multi-hot (each probe explains its rarest positive label).
        masks: (P, H, W) bool masks of the ``"object"`` region, or {name: (P, H, W)} named regions.

    Raises:
        TypeError: images that are not float. ValueError: shapes that do not agree (the message names them).

    Example:
        >>> probes = ProbeImages(torch.zeros(2, 3, 8, 8), torch.tensor([0, 1]))
        >>> len(probes.probe_set), probes.probe_set.ids.tolist()
        (2, [0, 1])
    """

    def __init__(self, images: Tensor, labels: Tensor, masks: Tensor | Mapping[str, Tensor] | None = None) -> None:
        images = torch.as_tensor(images)
        if not images.is_floating_point():
            raise TypeError(
                f"ProbeImages' images must be float, normalised as the model expects; got {images.dtype}. Convert "
                "them as the training data is, e.g. images.float() / 255 then (x - mean) / std"
            )
        images = float32_images(images, "ProbeImages' images")
        labels = torch.as_tensor(labels)
        multi_hot = None
        if labels.ndim == 2 and labels.shape[1] > 1:
            multi_hot = labels.float()
            labels = explained_labels(multi_hot, multi_hot.sum(dim=0))
        #: The probe set, ids 0..P-1.
        self.probe_set = ProbeSet(
            images, labels.reshape(-1), torch.arange(len(images)), as_regions(masks, "ProbeImages' masks"), multi_hot
        )
