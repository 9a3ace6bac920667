"""The fixed probe set: which images are explained every epoch, how they are drawn and checked.

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

Mapping items (MONAI, HF datasets) give their image, label and masks under the keys of
:class:`ItemKeys` (the callback's ``ProbeSettings(image_key, label_key, mask_keys)``; by default
the common names of :data:`IMAGE_KEYS`, :data:`LABEL_KEYS`, :data:`REGION_KEYS`); their other
fields are never read.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.utils.data import Dataset, Subset

from gradskip_lightning.core.validation import required

__all__ = [
    "ProbeSet",
    "ProbeSource",
    "ItemKeys",
    "stratified_indices",
    "dataset_labels",
    "explained_labels",
    "label_presence",
    "load_probes",
    "load_segmentation_probes",
    "segmentation_pairs",
    "check_probes",
    "given_probes",
]

OBJECT = "object"
"""The region the Pointing Game scores."""

ITEM_FORMS = (
    "(image, label), (image, label, mask (H, W) bool or 0/1), (image, label, {name: mask}) or mappings (their keys: "
    "ProbeSettings' image_key, label_key, mask_keys)"
)
"""The dataset items probes are read from, for messages."""

#: A region name inside a logged key: no "/" (it would read as another key), no leading dot, no space.
_REGION_NAME = re.compile(r"[^./\\\s][^/\\\s]*")


def check_region_name(name: object) -> str:
    """``name`` if it can end a logged key (``regions/<prefix>mass/<name>``), else ValueError naming the rule."""
    if not isinstance(name, str) or not _REGION_NAME.fullmatch(name):
        raise ValueError(
            f"region name {name!r} cannot be part of a logged key: use a non-empty string without '/', '\\' or "
            "spaces that does not start with '.', e.g. 'object' or 'tag_1'"
        )
    return name


def _as_mask(mask: Any, what: str) -> Tensor:
    """``mask`` as a bool tensor: a bool, integer or float tensor (or array) of 0s and 1s only."""
    if not isinstance(mask, (Tensor, np.ndarray)):
        raise TypeError(
            f"{what} must be a bool or 0/1 mask tensor; got a {type(mask).__name__} ({mask!r:.60}). Probes are read "
            f"as {ITEM_FORMS}: return a mask as the third element, or only (image, label)"
        )
    mask = torch.as_tensor(mask)
    if mask.dtype != torch.bool and (mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all())):
        low, high = float(mask.min().real), float(mask.max().real)
        raise ValueError(
            f"{what} must be a bool or 0/1 mask; got {mask.dtype} values in [{low:g}, {high:g}] (a weight map is not "
            f"a region). Probes are read as {ITEM_FORMS}: threshold the map into a mask, e.g. weights > 0.5"
        )
    return mask.bool()


def _as_regions(regions: Any, what: str = "probe_masks") -> dict[str, Tensor] | None:
    """Region masks by name (a bare mask is the ``"object"`` region), each checked by :func:`_as_mask`."""
    if regions is None:
        return None
    if isinstance(regions, Mapping):
        return {check_region_name(name): _as_mask(mask, f"{what}[{name!r}]") for name, mask in regions.items()}
    return {OBJECT: _as_mask(regions, what)}


def _float32(images: Tensor, what: str) -> Tensor:
    """Float ``images`` as float32 (the dtype the explanation starts from), with a note when converted."""
    if images.dtype != torch.float32:
        rank_zero_warn(
            f"GradSkipCallback: {what} are {images.dtype}; converted to torch.float32 (the explanation runs in the "
            "model's dtype). Pass float32 images to silence this"
        )
        images = images.float()
    return images


#: Keys of a mapping item (MONAI, HF datasets) read as the image, the label and the regions, first found first.
IMAGE_KEYS = ("image", "pixel_values", "img", "images")
LABEL_KEYS = ("label", "labels", "target", "targets", "class")
REGION_KEYS = ("mask", "masks", "regions")


@dataclass(frozen=True)
class ItemKeys:
    """Which fields of a mapping dataset item (MONAI, HF datasets) hold the image, the label and
    the region masks; every other field (ids, paths, metadata, other tensors) is never read.

    Attributes:
        image: the image's key; None: the first of :data:`IMAGE_KEYS` the item has.
        label: the label's key; None: the first of :data:`LABEL_KEYS`.
        masks: the keys whose values are (H, W) masks, each region named by its key, or a mapping
            {key: region name} (``{"seg": "object"}``: the ``"object"`` region, which the Pointing
            Game scores); empty: no regions. None: the first of :data:`REGION_KEYS` the item has
            (a mask is the ``"object"`` region, a dict {name: mask} named regions), no other key.

    Raises:
        TypeError: a key that is not a string. ValueError: an empty key, a mask key given twice,
            a region name that cannot be part of a logged key (:func:`check_region_name`).

    Example:
        >>> keys = ItemKeys(image="img", label="target", masks=["seg"])
        >>> image, label, regions = keys.read({"img": torch.zeros(3, 2, 2), "target": 1, "seg": torch.ones(2, 2),
        ...                                    "patient_id": 3, "path": "a.png"})
        >>> label, list(regions)
        (1, ['seg'])
    """

    image: str | None = None
    label: str | None = None
    masks: Sequence[str] | Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        for option, key in (("image_key", self.image), ("label_key", self.label)):
            if key is not None:
                _check_key(option, key)
        if self.masks is None:
            return
        if isinstance(self.masks, str) or not isinstance(self.masks, (Sequence, Mapping)):
            raise TypeError(
                f"mask_keys must be a list of keys or a mapping {{key: region name}}; got {self.masks!r}. "
                "One mask key: mask_keys=[key]"
            )
        keys = list(self.masks)
        for key in keys:
            _check_key("mask_keys", key)
        if len(set(keys)) != len(keys):
            raise ValueError(f"mask_keys names a key twice: {keys}")
        names = list(self.regions.values())
        for name in names:
            check_region_name(name)
        if len(set(names)) != len(names):
            raise ValueError(f"mask_keys gives two keys the same region name: {dict(self.regions)}")

    @property
    def regions(self) -> dict[str, str]:
        """Mask key -> region name of the named :attr:`masks` (empty when None)."""
        if isinstance(self.masks, Mapping):
            return dict(self.masks)
        return {key: key for key in self.masks or ()}

    @property
    def named(self) -> bool:
        """Whether any key is named (a dataset of tuple items then cannot be read with them)."""
        return (self.image, self.label, self.masks) != (None, None, None)

    def read(self, item: Mapping[str, Any], index: int = 0) -> tuple:
        """(image, label[, regions]) of the mapping ``item`` (dataset item ``index``, for messages).

        Raises:
            ValueError: a named key the item lacks. TypeError: no default key found.
        """
        image, label = (
            _field(item, key, option, index) if key is not None else next((item[k] for k in keys if k in item), None)
            for key, option, keys in ((self.image, "image_key", IMAGE_KEYS), (self.label, "label_key", LABEL_KEYS))
        )
        if image is None or label is None:
            raise TypeError(
                f"GradSkipCallback reads a mapping item's image from one of {IMAGE_KEYS} and its label from one of "
                f"{LABEL_KEYS}; the item has {sorted(map(str, item))}. Name its keys with "
                "ProbeSettings(image_key=..., label_key=...), or pass probe_images and probe_labels to the callback"
            )
        if self.masks is None:
            regions = next((item[k] for k in REGION_KEYS if k in item), None)
        else:
            regions = {name: _field(item, key, "mask_keys", index) for key, name in self.regions.items()} or None
        return (image, label) if regions is None else (image, label, regions)


def _check_key(option: str, key: object) -> None:
    if not isinstance(key, str):
        raise TypeError(f"{option} must name a key of the dataset's items as a string; got {key!r}")
    if not key:
        raise ValueError(f"{option} must be a non-empty key of the dataset's items; got ''")


def _field(item: Mapping[str, Any], key: str, option: str, index: int) -> Any:
    """``item[key]``, or ValueError naming the key, the item's keys and ``option``."""
    if key not in item:
        raise ValueError(
            f"dataset item {index} has no key {key!r} (probes.{option}); its keys are {sorted(map(str, item))}. "
            f"Name one of them in ProbeSettings({option}=...)"
        )
    return item[key]


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
        self.regions = _as_regions(self.regions)
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
        labels = torch.stack([torch.as_tensor(_item(dataset, i, keys)[1]) for i in range(len(dataset))])  # type: ignore[arg-type]  # map-style: sized
    labels = torch.as_tensor(labels)
    if labels.ndim == 3:  # label maps (N, H, W)
        return label_presence(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:  # MedMNIST-style (N, 1) class labels
        labels = labels[:, 0]
    return labels if labels.ndim == 2 else labels.long().reshape(-1)


def explained_labels(multi_hot: Tensor, frequency: Tensor) -> Tensor:
    """The positive label each multi-hot row (N, C) explains: the rarest by ``frequency`` (C,).

    Returns (N,) int64, -1 for rows without a positive label.
    """
    positive = multi_hot > 0
    never = torch.full(multi_hot.shape, float("inf"), dtype=torch.double)
    score = torch.where(positive, frequency.double()[None, :], never)
    chosen = score.argmin(dim=1)
    return torch.where(positive.any(dim=1), chosen, torch.full_like(chosen, -1))


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


def _item(dataset: Dataset, index: int, keys: ItemKeys) -> tuple:
    item = dataset[index]
    if isinstance(item, Mapping):
        return keys.read(item, index)
    if not isinstance(item, (tuple, list)) or len(item) < 2:
        raise TypeError(
            f"GradSkipCallback reads probes as dataset items (image, label), (image, label, mask), "
            f"(image, label, regions dict) or mappings with {IMAGE_KEYS[0]!r} and {LABEL_KEYS[0]!r} keys; got a "
            f"{type(item).__name__}. Make the dataset return such items, or pass probe_images and probe_labels"
        )
    if keys.named:
        raise TypeError(
            f"probes.image_key, label_key or mask_keys name the fields of mapping items, but dataset item {index} is "
            f"a {type(item).__name__} (read by position: image, label[, mask]). Leave them unset for such a dataset"
        )
    return tuple(item)


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
        item = _item(dataset, index, keys)
        image = torch.as_tensor(item[0])
        if not image.is_floating_point():
            raise TypeError(
                f"dataset item {index} has a {image.dtype} image: probes must be float images normalised as the "
                "model expects. Convert in the dataset's transform (ToDtype(torch.float32, scale=True), Normalize)"
            )
        images.append(_float32(image, f"dataset item {index}'s images") if not images else image.to(images[0].dtype))
        labels.append(torch.as_tensor(item[1]))
        item_regions = _as_regions(item[2], f"dataset item {index}'s masks") if len(item) > 2 else None
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
    item = _item(dataset, 0, keys)
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
    images, maps = zip(*(_item(dataset, int(i), keys)[:2] for i in pair_ids // num_classes))
    classes = pair_ids % num_classes
    label_maps = torch.stack([torch.as_tensor(m) for m in maps])
    return ProbeSet(
        _float32(torch.stack(images), "the dataset's images"),
        classes,
        pair_ids,
        {OBJECT: label_maps == classes[:, None, None]},
    )


def check_probes(probes: ProbeSet, in_chans: int, img_size: tuple[int, int] | None, num_classes: int) -> None:
    """Refuse probes the model cannot explain, before any epoch: shape, finiteness, labels.
    ``img_size`` None: the model takes any size (only the channels are checked here).

    Raises:
        ValueError: naming the problem and the fix.
    """
    expected = (in_chans, *(img_size or probes.images.shape[2:]))
    if tuple(probes.images.shape[1:]) != expected:
        raise ValueError(
            f"probe images must be (P, {expected[0]}, {expected[1]}, {expected[2]}) for this model; "
            f"got {tuple(probes.images.shape)}"
        )
    bad = (~torch.isfinite(probes.images).flatten(1).all(dim=1)).nonzero()[:, 0]
    if len(bad):
        raise ValueError(f"probe images {probes.ids[bad].tolist()} (ids) contain NaN or infinite values")
    if probes.multi_hot is not None and probes.multi_hot.shape[1] != num_classes:
        raise ValueError(f"multi-hot probe labels must have {num_classes} classes; got {probes.multi_hot.shape[1]}")
    out = ((probes.labels < 0) | (probes.labels >= num_classes)).nonzero()[:, 0]
    if len(out):
        what = "have no positive label" if probes.multi_hot is not None else f"are not in [0, {num_classes})"
        raise ValueError(
            f"probe labels of ids {probes.ids[out].tolist()} {what} (labels {probes.labels[out].tolist()}): "
            "fix the dataset's labels or the probe_labels given"
        )


def given_probes(
    images: Tensor | None, labels: Tensor | None, masks: Tensor | Mapping[str, Tensor] | None
) -> ProbeSet | None:
    """The explicit probes of the callback's ``probe_images`` (P, C, H, W) float, ``probe_labels``
    (P,) or multi-hot (P, C), and ``probe_masks`` (P, H, W) or {name: (P, H, W)}; None without images."""
    if images is None:
        if labels is not None or masks is not None:
            raise ValueError("probe_labels and probe_masks need probe_images")
        return None
    if labels is None:
        raise ValueError("probe_labels (P,) or (P, C) are required with probe_images")
    images = torch.as_tensor(images)
    if not images.is_floating_point():
        raise TypeError(
            f"probe_images must be float, normalised as the model expects; got {images.dtype}. Convert them as "
            "the training data is, e.g. images.float() / 255 then (x - mean) / std"
        )
    images = _float32(images, "probe_images")
    labels = torch.as_tensor(labels)
    multi_hot = None
    if labels.ndim == 2 and labels.shape[1] > 1:
        multi_hot = labels.float()
        labels = explained_labels(multi_hot, multi_hot.sum(dim=0))
    return ProbeSet(images, labels.reshape(-1), torch.arange(len(images)), _as_regions(masks), multi_hot)


class ProbeSource:
    """The probe set over a callback's life: given, drawn once per fit, restored from a checkpoint.

    Args:
        given: explicit probes, or None to draw ``num_probes`` with ``seed`` from a dataset.
        num_probes: probes drawn, stratified by (explained) class.
        seed: seed of the draw.
        keys: where mapping items hold the image, the label and the masks.
    """

    def __init__(self, given: ProbeSet | None, num_probes: int, seed: int, keys: ItemKeys = ItemKeys()) -> None:
        self.given = given
        self.num_probes = num_probes
        self.seed = seed
        self.keys = keys
        self.dataset: Dataset | None = None
        self.restored_ids: Tensor | None = None
        self._drawn: ProbeSet | None = None

    @property
    def probes(self) -> ProbeSet | None:
        """The current probes (None until drawn)."""
        return self.given if self.given is not None else self._drawn

    def reset(self) -> None:
        """Forget drawn probes and restored ids: a new fit draws from its own data."""
        self.dataset, self.restored_ids, self._drawn = None, None, None

    def draw(self, dataset: Dataset) -> ProbeSet:
        """Draw (or re-read the restored ids) from ``dataset``, unless probes were given or drawn.

        Restored ids the dataset does not have (a smaller validation set) are dropped with a warning
        and the probes drawn afresh; fewer probes than ``num_probes`` to draw from is said once."""
        if self.probes is not None:
            return self.probes
        self.dataset = dataset
        labels = dataset_labels(dataset, self.keys)
        segmentation = labels.ndim == 2 and is_segmentation_dataset(dataset, self.keys)
        pair_ids, strata = segmentation_pairs(labels) if segmentation else (None, labels)
        ids = self.restored_ids
        if ids is not None:
            valid = required(pair_ids, "the pairs") if segmentation else torch.arange(len(labels))
            missing = ids[~torch.isin(ids, valid)]
            if len(missing):
                rank_zero_warn(
                    f"GradSkipCallback: the checkpoint's probe ids {missing.tolist()[:8]} are not in this dataset "
                    f"({len(labels)} items): the probes are drawn afresh (probes.num_probes={self.num_probes}, "
                    f"probe_seed={self.seed}). Resume with the validation set of the checkpointed run to keep them"
                )
                ids = self.restored_ids = None
        if ids is None:
            drawn = stratified_indices(strata, self.num_probes, self.seed)
            if len(drawn) == 0:
                raise ValueError("no item of the dataset has a label or class to explain: nothing to draw probes from")
            if len(drawn) < self.num_probes:
                rank_zero_warn(
                    f"GradSkipCallback: probes.num_probes={self.num_probes} but the dataset has only {len(drawn)} "
                    f"{'(image, class) pairs' if segmentation else 'items'} with a class to explain: {len(drawn)} "
                    "probes are drawn. Set probes.num_probes to at most that to silence this"
                )
            ids = required(pair_ids, "the (image, class) pairs")[drawn] if segmentation else drawn
        if segmentation:
            self._drawn = load_segmentation_probes(dataset, ids, labels.shape[1], self.keys)
        else:
            frequency = labels.float().sum(dim=0) if labels.ndim == 2 else None
            self._drawn = load_probes(dataset, ids, frequency, self.keys)
        return self._drawn

    def restore(self, ids: Tensor | None) -> None:
        """Use the checkpointed probe ``ids`` (re-read now when a dataset is known); says once when
        their number overrides ``num_probes``; ids the dataset cannot give are dropped with a warning
        and the probes drawn afresh."""
        if ids is None or self.given is not None:
            return
        if len(ids) != self.num_probes:
            rank_zero_warn(
                f"GradSkipCallback: the checkpoint's {len(ids)} probes are explained, not probes.num_probes="
                f"{self.num_probes}: the probe set is kept across a resume so drift compares the same images. "
                "Start a new run (no ckpt_path) to draw another number"
            )
        self.restored_ids = ids
        if self._drawn is not None and not torch.equal(self._drawn.ids, ids) and self.dataset is not None:
            self._drawn = None
            try:
                self.draw(self.dataset)
            except Exception as err:  # noqa: BLE001 - the checkpoint's probes cannot be re-read: draw afresh
                rank_zero_warn(
                    f"GradSkipCallback: the checkpoint's probes cannot be read ({type(err).__name__}: {err})"
                )
                self.reset()
