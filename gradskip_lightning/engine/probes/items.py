"""How a dataset item becomes a probe: item forms, mapping keys (:class:`ItemKeys`), masks and regions.

Mapping items (MONAI, HF datasets) give their image, label and masks under the keys of
:class:`ItemKeys` (the callback's ``ProbeSettings(image_key, label_key, mask_keys)``; by default
the common names of :data:`IMAGE_KEYS`, :data:`LABEL_KEYS`, :data:`REGION_KEYS`); their other
fields are never read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.utils.data import Dataset

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


def as_mask(mask: Any, what: str) -> Tensor:
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


def as_regions(regions: Any, what: str = "probe_masks") -> dict[str, Tensor] | None:
    """Region masks by name (a bare mask is the ``"object"`` region), each checked by :func:`as_mask`."""
    if regions is None:
        return None
    if isinstance(regions, Mapping):
        return {check_region_name(name): as_mask(mask, f"{what}[{name!r}]") for name, mask in regions.items()}
    return {OBJECT: as_mask(regions, what)}


def float32_images(images: Tensor, what: str) -> Tensor:
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


def chosen_key(mapping: Mapping[str, Any], key: str | None, defaults: Sequence[str]) -> str | None:
    """``key`` when given, else the first of ``defaults`` that ``mapping`` has (None: none).

    Example:
        >>> chosen_key({"img": 0, "target": 1}, None, LABEL_KEYS), chosen_key({}, "scan", IMAGE_KEYS)
        ('target', 'scan')
    """
    return key if key is not None else next((k for k in defaults if k in mapping), None)


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
        """(image, label[, regions]) of the mapping ``item`` (dataset item ``index``, for messages),
        each value checked (:func:`checked_values`).

        Raises:
            ValueError: a named key the item lacks. TypeError: no default key found, or a value that
            cannot be a probe's (a path, a string label, None).
        """
        found = []
        for key, option, defaults in ((self.image, "image_key", IMAGE_KEYS), (self.label, "label_key", LABEL_KEYS)):
            chosen = chosen_key(item, key, defaults)
            if chosen is None:
                raise TypeError(
                    f"GradSkipCallback reads a mapping item's image from one of {IMAGE_KEYS} and its label from one of "
                    f"{LABEL_KEYS}; the item has {sorted(map(str, item))}. Name its keys with "
                    "ProbeSettings(image_key=..., label_key=...), or give the callback ProbeImages(images, labels)"
                )
            named = f"probes.{option}={key!r}" if key is not None else f"key {chosen!r}"
            found.append((_field(item, chosen, option, index), named))
        (image, image_at), (label, label_at) = found
        checked_values(image, label, index, image_at, label_at)
        if self.masks is None:
            regions = next((item[k] for k in REGION_KEYS if k in item), None)
        else:
            regions = {name: _field(item, key, "mask_keys", index) for key, name in self.regions.items()} or None
        return (image, label) if regions is None else (image, label, regions)


def checked_values(image: Any, label: Any, index: int, image_at: str, label_at: str) -> None:
    """Refuse a dataset item's image or label that cannot be a probe's, naming where it was read
    (``image_at``, ``label_at``: the key or the position), what it is and the fix.

    Raises:
        TypeError: an image that is a path or not an array; a label that is None or a string.

    Example:
        >>> checked_values(torch.zeros(3, 4, 4), "cat", 7, "key 'image'", "key 'label'")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: dataset item 7's label (key 'label') is the string 'cat': labels must be class indices ...
    """
    if isinstance(image, (str, bytes, PathLike)):
        raise TypeError(
            f"dataset item {index}'s image ({image_at}) is the path {image!r}: probes need the image itself, a float "
            "tensor (C, H, W) normalised as the model expects. Load it in the dataset's transform (e.g. MONAI "
            "LoadImaged, or PIL.Image.open then ToTensor and Normalize)"
        )
    if not isinstance(image, (Tensor, np.ndarray)):
        raise TypeError(
            f"dataset item {index}'s image ({image_at}) is a {type(image).__name__}: probes need a float tensor "
            "(C, H, W) normalised as the model expects. Convert it in the dataset's transform (ToImage/ToTensor, "
            "ToDtype(torch.float32, scale=True), Normalize)"
        )
    if label is None:
        raise TypeError(
            f"dataset item {index}'s label ({label_at}) is None: every probe needs a class to explain. Make the "
            "dataset's items carry their class index there"
        )
    if isinstance(label, (str, bytes)):
        raise TypeError(
            f"dataset item {index}'s label ({label_at}) is the string {label!r}: labels must be class indices (an "
            "int, or a multi-hot tensor). Map class names to indices in the dataset's transform (e.g. a label2id dict)"
        )


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


def read_item(dataset: Dataset, index: int, keys: ItemKeys) -> tuple:
    """Item ``index`` of ``dataset`` as (image, label[, masks or regions]), checked (:func:`checked_values`)."""
    item = dataset[index]
    if isinstance(item, Mapping):
        return keys.read(item, index)
    if not isinstance(item, (tuple, list)) or len(item) < 2:
        raise TypeError(
            f"GradSkipCallback reads probes as dataset items (image, label), (image, label, mask), "
            f"(image, label, regions dict) or mappings with {IMAGE_KEYS[0]!r} and {LABEL_KEYS[0]!r} keys; got a "
            f"{type(item).__name__}. Make the dataset return such items, or give the callback "
            "ProbeImages(images, labels)"
        )
    if keys.named:
        raise TypeError(
            f"probes.image_key, label_key or mask_keys name the fields of mapping items, but dataset item {index} is "
            f"a {type(item).__name__} (read by position: image, label[, mask]). Leave them unset for such a dataset"
        )
    checked_values(item[0], item[1], index, "its first element", "its second element")
    return tuple(item)


def explained_labels(multi_hot: Tensor, frequency: Tensor) -> Tensor:
    """The positive label each multi-hot row (N, C) explains: the rarest by ``frequency`` (C,).

    Returns (N,) int64, -1 for rows without a positive label.
    """
    positive = multi_hot > 0
    never = torch.full(multi_hot.shape, float("inf"), dtype=torch.double)
    score = torch.where(positive, frequency.double()[None, :], never)
    chosen = score.argmin(dim=1)
    return torch.where(positive.any(dim=1), chosen, torch.full_like(chosen, -1))
