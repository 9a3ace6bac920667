"""Drawing probes from a dataset: labels, the explained label of multi-label items, the stratified
draw, loading the drawn items.

Multi-label probes (multi-hot labels (C,)) explain one positive label each: the positive label
that is rarest among the labels drawn from (the dataset's, or the explicit probes'), ties to the
lowest class index. It is fixed with the probe, so drift compares maps of the same class, and
the draw is stratified by it, so rare labels get probes. Images without a positive label are not
drawn.

Segmentation items ``(image, label map (H, W) int64)`` give one candidate probe per (image, class
present): the dataset's ``labels`` (N, K) multi-hot when it has them (e.g. without the
background), otherwise every class in the map. The draw is stratified over those pairs by class,
each probe explains its class over the positions the model predicts as it, and its ``"object"``
region is that class's pixels. Such a probe's id is ``index * K + class`` (an image with two
classes gives two probes).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils.data import Dataset, Subset

from .items import ITEM_FORMS, OBJECT, ItemKeys, as_regions, explained_labels, float32_images, read_item
from .probe_set import ProbeSet


def label_presence(label_maps: Tensor) -> Tensor:
    """Which classes each label map (N, H, W) holds: (N, K) int64 multi-hot, K = the largest class
    + 1; values of 255 and above (ignore indices) and below 0 count as no class.

    Example:
        >>> label_presence(torch.tensor([[[0, 2], [2, 255]]]))
        tensor([[1, 0, 1]])
    """
    maps = label_maps.long().flatten(1)
    valid = (maps >= 0) & (maps < 255)
    classes = int(maps[valid].max()) + 1 if valid.any() else 1
    counts = torch.zeros(len(maps), classes + 1, dtype=torch.long)  # the last column collects ignored pixels
    counts.scatter_add_(1, torch.where(valid, maps, classes), torch.ones_like(maps))
    return (counts[:, :classes] > 0).long()


def _is_label_map(label: Tensor, image: Tensor) -> bool:
    """A segmentation item's label: an integer (H, W) map of the image's size."""
    return label.ndim == 2 and not label.is_floating_point() and tuple(label.shape) == tuple(image.shape[-2:])


def dataset_labels(dataset: Dataset, keys: ItemKeys = ItemKeys()) -> Tensor:
    """All labels of a dataset, (N,) int64 or (N, C) multi-hot, read without loading images.

    Uses the dataset's ``labels`` or ``targets`` (torchvision) attribute, through ``Subset``
    indices; only a dataset with neither is read item by item (label maps then give the classes
    present, :func:`label_presence`), a mapping item's label under ``keys``.
    """
    if isinstance(dataset, Subset):
        return dataset_labels(dataset.dataset, keys)[torch.as_tensor(dataset.indices, dtype=torch.long)]
    labels = getattr(dataset, "labels", None)
    if labels is None:
        labels = getattr(dataset, "targets", None)
    if labels is None:
        labels = torch.stack([torch.as_tensor(read_item(dataset, i, keys)[1]) for i in range(len(dataset))])  # type: ignore[arg-type]  # map-style: sized
    labels = torch.as_tensor(labels)
    if labels.ndim == 3:  # label maps (N, H, W)
        return label_presence(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:  # MedMNIST-style (N, 1) class labels
        labels = labels[:, 0]
    return labels if labels.ndim == 2 else labels.long().reshape(-1)


def stratified_indices(labels: Tensor, num_probes: int, seed: int) -> Tensor:
    """Pick ``num_probes`` indices spread evenly over the classes, fixed by ``seed``.

    Classes take turns (each gets ``num_probes // classes`` or one more, a class with too few
    images gives its turn to the others); within a class the images are a seeded random
    permutation. Multi-hot labels (N, C) are stratified by :func:`explained_labels`. Labels
    below 0 (nothing to explain) are never picked. The result is sorted by (label, index) so
    grids read class by class.
    """
    if num_probes < 1:
        raise ValueError(f"num_probes must be >= 1, got {num_probes}")
    labels = torch.as_tensor(labels)
    if labels.ndim == 2:
        labels = explained_labels(labels, labels.float().sum(dim=0))
    labels = labels.long().reshape(-1)
    generator = torch.Generator().manual_seed(seed)
    pools = []
    for cls in torch.unique(labels[labels >= 0]).tolist():
        members = torch.nonzero(labels == cls)[:, 0]
        pools.append(members[torch.randperm(len(members), generator=generator)].tolist())
    chosen: list[int] = []
    depth = 0
    while len(chosen) < min(num_probes, int((labels >= 0).sum())):
        for pool in pools:
            if depth < len(pool) and len(chosen) < num_probes:
                chosen.append(pool[depth])
        depth += 1
    chosen_t = torch.tensor(chosen, dtype=torch.long)
    order = sorted(range(len(chosen)), key=lambda i: (int(labels[chosen[i]]), chosen[i]))
    return chosen_t[order]


def load_probes(
    dataset: Dataset,
    indices: Sequence[int] | Tensor,
    frequency: Tensor | None = None,
    keys: ItemKeys = ItemKeys(),
) -> ProbeSet:
    """Read the probes at ``indices`` from a dataset of ``(image, label[, mask | regions])`` items,
    or of mappings read through ``keys`` (:class:`ItemKeys`).

    Reads items by index only: no DataLoader and no iterator is touched. Multi-hot labels (C,)
    explain the label :func:`explained_labels` picks with ``frequency`` (C,) (default: the
    labels of these probes).
    """
    images: list[Tensor] = []
    labels: list[Tensor] = []
    regions: list[dict[str, Tensor]] = []
    for index in torch.as_tensor(indices).tolist():
        item = read_item(dataset, index, keys)
        image = torch.as_tensor(item[0])
        if not image.is_floating_point():
            raise TypeError(
                f"dataset item {index} has a {image.dtype} image: probes must be float images normalised as the "
                "model expects. Convert in the dataset's transform (ToDtype(torch.float32, scale=True), Normalize)"
            )
        images.append(
            float32_images(image, f"dataset item {index}'s images") if not images else image.to(images[0].dtype)
        )
        labels.append(torch.as_tensor(item[1]))
        item_regions = as_regions(item[2], f"dataset item {index}'s masks") if len(item) > 2 else None
        if item_regions is not None:
            for name, mask in item_regions.items():
                if tuple(mask.shape) != tuple(image.shape[-2:]):
                    raise ValueError(
                        f"dataset item {index}'s mask {name!r} is {tuple(mask.shape)}, its image "
                        f"{tuple(image.shape)}: a mask must be (H, W) of the image's size. Probes are read as "
                        f"{ITEM_FORMS}"
                    )
            regions.append(item_regions)
    ids = torch.as_tensor(indices).long()
    stacked = torch.stack(labels)
    multi_hot = None
    if stacked.ndim == 2 and stacked.shape[1] > 1:
        multi_hot = stacked.float()
        stacked = explained_labels(multi_hot, multi_hot.sum(dim=0) if frequency is None else frequency)
    merged = None
    if len(regions) == len(images) and regions:
        common = [name for name in regions[0] if all(name in r for r in regions)]
        merged = {name: torch.stack([r[name] for r in regions]) for name in common}
    return ProbeSet(torch.stack(images), stacked.reshape(-1), ids, merged, multi_hot)


def is_segmentation_dataset(dataset: Dataset, keys: ItemKeys = ItemKeys()) -> bool:
    """True when the dataset's items are ``(image, label map)`` (read from its first item, through ``keys``)."""
    item = read_item(dataset, 0, keys)
    image, label = torch.as_tensor(item[0]), torch.as_tensor(item[1])
    return len(item) == 2 and _is_label_map(label, image)


def segmentation_pairs(presence: Tensor) -> tuple[Tensor, Tensor]:
    """Every (image, class present) of a (N, K) multi-hot: their ids ``index * K + class`` and
    classes, each (Q,) int64, by image then class.

    Example:
        >>> segmentation_pairs(torch.tensor([[0, 1, 1], [0, 0, 1]]))
        (tensor([1, 2, 5]), tensor([1, 2, 2]))
    """
    index, classes = presence.nonzero(as_tuple=True)
    return index * presence.shape[1] + classes, classes


def load_segmentation_probes(
    dataset: Dataset, pair_ids: Sequence[int] | Tensor, num_classes: int, keys: ItemKeys = ItemKeys()
) -> ProbeSet:
    """Read the (image, class) probes ``pair_ids`` (``index * num_classes + class``) from a dataset
    of ``(image, label map)`` items (mappings: through ``keys``): each explains its class, its
    ``"object"`` region the class's pixels. Reads items by index only."""
    pair_ids = torch.as_tensor(pair_ids).long()
    images, maps = zip(*(read_item(dataset, int(i), keys)[:2] for i in pair_ids // num_classes))
    classes = pair_ids % num_classes
    label_maps = torch.stack([torch.as_tensor(m) for m in maps])
    return ProbeSet(
        float32_images(torch.stack(images), "the dataset's images"),
        classes,
        pair_ids,
        {OBJECT: label_maps == classes[:, None, None]},
    )
