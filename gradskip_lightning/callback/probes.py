"""The fixed probe set: which images are explained every epoch, and how they are drawn."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.utils.data import Dataset

__all__ = ["ProbeSet", "stratified_indices", "dataset_labels", "load_probes"]


@dataclass
class ProbeSet:
    """Probe images and what belongs to them, in a fixed order.

    Attributes:
        images: (P, C, H, W) float32, normalised as the model expects.
        labels: (P,) int64 classes.
        ids: (P,) int64 identifiers: dataset indices for drawn probes, 0..P-1 for given ones.
        masks: (P, H, W) bool object masks, or None.
    """

    images: Tensor
    labels: Tensor
    ids: Tensor
    masks: Tensor | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.images, Tensor) or self.images.ndim != 4 or not self.images.is_floating_point():
            raise ValueError(
                f"probe images must be a float tensor (P, C, H, W); got {tuple(getattr(self.images, 'shape', ()))}"
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
        if self.masks is not None:
            self.masks = torch.as_tensor(self.masks).bool()
            if self.masks.shape != (count, *self.images.shape[2:]):
                raise ValueError(
                    f"probe masks must be ({count}, {self.images.shape[2]}, {self.images.shape[3]}); "
                    f"got {tuple(self.masks.shape)}"
                )

    def __len__(self) -> int:
        return self.images.shape[0]

    def subset(self, index: Tensor | slice) -> ProbeSet:
        """The probes at ``index`` (positions, not ids), in that order."""
        return ProbeSet(
            self.images[index],
            self.labels[index],
            self.ids[index],
            None if self.masks is None else self.masks[index],
        )


def dataset_labels(dataset: Dataset) -> Tensor:
    """All labels (N,) int64 of a dataset: its ``labels`` attribute, else read item by item."""
    labels = getattr(dataset, "labels", None)
    if labels is None:
        labels = [int(torch.as_tensor(dataset[i][1]).reshape(-1)[0]) for i in range(len(dataset))]
    return torch.as_tensor(labels).long().reshape(-1)


def stratified_indices(labels: Tensor, num_probes: int, seed: int) -> Tensor:
    """Pick ``num_probes`` indices spread evenly over the classes, fixed by ``seed``.

    Classes take turns (each gets ``num_probes // classes`` or one more, a class with too few
    images gives its turn to the others); within a class the images are a seeded random
    permutation. The result is sorted by (label, index) so grids read class by class.
    """
    if num_probes < 1:
        raise ValueError(f"num_probes must be >= 1, got {num_probes}")
    labels = torch.as_tensor(labels).long().reshape(-1)
    generator = torch.Generator().manual_seed(seed)
    pools = []
    for cls in torch.unique(labels).tolist():
        members = torch.nonzero(labels == cls)[:, 0]
        pools.append(members[torch.randperm(len(members), generator=generator)].tolist())
    chosen: list[int] = []
    depth = 0
    while len(chosen) < min(num_probes, len(labels)):
        for pool in pools:
            if depth < len(pool) and len(chosen) < num_probes:
                chosen.append(pool[depth])
        depth += 1
    chosen_t = torch.tensor(chosen, dtype=torch.long)
    order = sorted(range(len(chosen)), key=lambda i: (int(labels[chosen[i]]), chosen[i]))
    return chosen_t[order]


def load_probes(dataset: Dataset, indices: Sequence[int] | Tensor) -> ProbeSet:
    """Read the probes at ``indices`` from a dataset of ``(image, label[, mask])`` items.

    Reads items by index only: no DataLoader and no iterator is touched.
    """
    images, labels, masks = [], [], []
    for index in torch.as_tensor(indices).tolist():
        item = dataset[index]
        if not isinstance(item, (tuple, list)) or len(item) < 2:
            raise TypeError(
                f"dataset items must be (image, label) or (image, label, mask) tuples; got {type(item).__name__}"
            )
        images.append(torch.as_tensor(item[0]).float())
        labels.append(int(torch.as_tensor(item[1]).reshape(-1)[0]))
        if len(item) > 2:
            masks.append(torch.as_tensor(item[2]).bool())
    return ProbeSet(
        torch.stack(images),
        torch.tensor(labels),
        torch.as_tensor(indices).long(),
        torch.stack(masks) if len(masks) == len(images) else None,
    )
