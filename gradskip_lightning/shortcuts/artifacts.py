"""Artifacts a correction puts on training images so that they stop predicting one class (augmentative ClArC).

An :class:`Artifact` is what a shortcut looks like, as something that can be put on any image:
``apply(images, generator)`` returns the images (B, C, H, W) with it on every one, and ``erase(images, others,
generator)`` takes it off its own class's images by giving each what one of ``others`` (images of other
classes) has there instead. Two kinds
(:data:`ArtifactKind`, each with its restore function in :data:`ARTIFACT_KINDS`):

- :class:`PatchPaste`, a located artifact (pixels at a place): a known tag's pattern
  (:meth:`PatchPaste.from_tag`) or a flagged class's discovery hotspot with the class's own pixels there
  (:meth:`PatchPaste.from_hotspot`);
- :class:`PropertyPaste`, a shortcut with no place (a class's colour, brightness, sharpness, noise, compression,
  tone, channel registration, stripes or whole image-wide signature): each image is given a donor's statistic of
  the property by the transfer the discovery stage tests with (:mod:`gradskip_lightning.shortcuts.image_properties`),
  in the stage's pixel space; for colour and the signature, half of the images by an additive one instead
  (:mod:`gradskip_lightning.shortcuts.correction_transfers`: the stage cannot tell a cast from a gain).

:class:`~.core.ShortcutCorrection` turns a discovery into artifacts (:func:`~.core.artifact_for`,
:func:`~.core.property_artifact_for`). :func:`paste_share` puts an artifact on a share ``p`` of a batch,
in place, with the caller's generator (never the global RNG); :func:`erase_from_class` takes it off the
images of its class in a batch, with the batch's other classes' images as the stand-ins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor

from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.core.validation import check_choice, check_patch_mask
from gradskip_lightning.shortcuts.correction_transfers import correction_property
from gradskip_lightning.shortcuts.image_properties import PROPERTY_NAMES, PixelSpace, PropertyName
from gradskip_lightning.shortcuts.regions import Region, paste
from gradskip_lightning.shortcuts.tags import SpuriousTag
from gradskip_lightning.shortcuts.transplant import Transplant

__all__ = [
    "ARTIFACT_KINDS",
    "Artifact",
    "ArtifactKind",
    "PatchPaste",
    "PropertyPaste",
    "erase_from_class",
    "paste_share",
    "restore_artifact",
]

#: The kinds of artifact; each has its restore function in :data:`ARTIFACT_KINDS`.
ArtifactKind = Literal["patch", "property"]


@runtime_checkable
class Artifact(Protocol):
    """A shortcut of class ``target`` that can be put on any image.

    Attributes:
        kind: its :data:`ArtifactKind` (what :func:`restore_artifact` reads back).
    """

    kind: ClassVar[ArtifactKind]

    @property
    def target(self) -> int:
        """The class the artifact predicts."""
        ...

    def apply(self, images: Tensor, generator: torch.Generator) -> Tensor:
        """``images`` (B, C, H, W), in the model's input space, with the artifact on every one (a new tensor);
        any random choice is drawn from ``generator``."""
        ...

    def erase(self, images: Tensor, others: Tensor, generator: torch.Generator) -> Tensor:
        """``images`` (B, C, H, W) of the artifact's class with it taken off (a new tensor): each gets, in its
        place, what one of ``others`` (M >= 1, C, H, W; images of other classes, drawn from ``generator``) has
        there (a patch: their pixels at the artifact's place; a property: their statistic)."""
        ...

    @property
    def key_prefix(self) -> str:
        """What its names in the logged keys start with: ``""`` (a located shortcut), ``"<property>/"``."""
        ...

    def describe(self) -> str:
        """What and where it is, for the log (``"shortcut at (24, 24)-(28, 28)"``, ``"colour shortcut"``)."""
        ...

    def action(self, images: str) -> str:
        """What putting it on ``images`` (words) does, for the log (``"pasting it on <images>"``)."""
        ...

    def scalars(self) -> dict[str, float]:
        """Its logged values by name (``box/top``, ...): ``correction/<prefix><key_prefix><name>/class_<k>``."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain values only (checkpoints load with ``weights_only=True``)."""
        ...


def _check_target(target: object) -> None:
    """Require an artifact's class: an int >= 0."""
    if isinstance(target, bool) or not isinstance(target, int) or target < 0:
        raise ValueError(f"target must be a class index >= 0, got {target!r}")


@dataclass(frozen=True, eq=False)
class PatchPaste:
    """Donor pixels pasted at a fixed place: a tag's pattern, or a flagged class's hotspot.

    Each image gets one donor, drawn uniformly; inside the box only the ``mask`` pixels are replaced.

    Attributes:
        target: the class the pixels predict.
        top, left: the box's top-left pixel.
        mask: (bh, bw) bool, the pixels of the box that are pasted (a hotspot need not fill its box).
        donors: (n, C or 1, bh, bw) the box's pixels of each donor, in the model's input space (one
            channel is pasted on every channel).

    Example:
        >>> paste = PatchPaste(1, 0, 1, torch.ones(1, 2, dtype=torch.bool), torch.full((1, 1, 1, 2), 9.0))
        >>> paste.apply(torch.zeros(1, 1, 2, 3), torch.Generator().manual_seed(0))[0, 0]
        tensor([[0., 9., 9.],
                [0., 0., 0.]])
        >>> paste.describe(), paste.box
        ('shortcut at (0, 1)-(1, 3)', (0, 1, 1, 3))
    """

    kind: ClassVar[ArtifactKind] = "patch"
    target: int
    top: int
    left: int
    mask: Tensor
    donors: Tensor

    def __post_init__(self) -> None:
        _check_target(self.target)
        if min(self.top, self.left) < 0:
            raise ValueError(f"the box's corner must be >= 0, got ({self.top}, {self.left})")
        check_patch_mask(self.mask, "mask")
        if self.donors.ndim != 4 or len(self.donors) == 0 or tuple(self.donors.shape[2:]) != tuple(self.mask.shape):
            raise ValueError(
                f"donors must be (n >= 1, C, bh, bw) with (bh, bw) the mask's {tuple(self.mask.shape)}; "
                f"got {tuple(self.donors.shape)}"
            )
        if not self.mask.any():
            raise ValueError("mask selects no pixel: there is nothing to paste")

    @property
    def region(self) -> Region:
        """Where it is pasted: the box's ``mask`` pixels."""
        return Region(self.top, self.left, self.mask)

    @property
    def box(self) -> tuple[int, int, int, int]:
        """(top, left, bottom, right) in pixels, bottom and right exclusive."""
        return self.region.bounds

    @classmethod
    def from_tag(cls, tag: SpuriousTag, normalisation: Normalisation) -> PatchPaste:
        """The tag's pattern at its place, normalised with ``normalisation`` (1 or C values) as the
        model's images are (one donor of ``normalisation.channels`` channels)."""
        region = tag.region
        _, _, bottom, right = region.bounds
        blank = torch.zeros(1, normalisation.channels, bottom, right)
        pixels = region.cut(Transplant(tag, normalisation).paste(blank))
        return cls(tag.target_class, region.top, region.left, region.mask, pixels)

    @classmethod
    def from_hotspot(
        cls, target: int, hotspot: Tensor, patch_size: tuple[int, int], images: Tensor, margin: int = 0
    ) -> PatchPaste:
        """Class ``target``'s hotspot (h, w) bool patches, grown by ``margin`` patches on every side, with the
        pixels of ``images`` (n, C, H, W) there (the class's discovery probes: the donors); the mask is the
        grown hotspot upsampled by ``patch_size``."""
        check_patch_mask(hotspot)
        if not hotspot.any():
            raise ValueError(f"class {target}'s hotspot is empty: there is nothing to paste")
        if images.ndim != 4 or len(images) == 0:
            raise ValueError(f"donor images must be (n >= 1, C, H, W); got {tuple(images.shape)}")
        if isinstance(margin, bool) or not isinstance(margin, int) or margin < 0:
            raise ValueError(f"margin must be a number of patches >= 0, got {margin!r}")
        hotspot = hotspot.cpu()
        if margin:  # binary dilation: every patch within ``margin`` patches (Chebyshev) of the hotspot
            window = 2 * margin + 1
            hotspot = F.max_pool2d(hotspot[None, None].float(), window, stride=1, padding=margin)[0, 0].bool()
        return cls.from_region(target, Region.of_patches(hotspot, patch_size), images)

    @classmethod
    def from_region(cls, target: int, region: Region, images: Tensor) -> PatchPaste:
        """Class ``target``'s ``region`` with the pixels of ``images`` (n, C, H, W) there (the donors)."""
        if images.ndim != 4 or len(images) == 0:
            raise ValueError(f"donor images must be (n >= 1, C, H, W); got {tuple(images.shape)}")
        return cls(target, region.top, region.left, region.mask, region.cut(images.detach().cpu()).clone())

    def apply(self, images: Tensor, generator: torch.Generator) -> Tensor:
        """``images`` (B, C, H, W) with a donor drawn from ``generator`` pasted on each (a new tensor)."""
        return self._paste(images, self.donors, generator)

    def erase(self, images: Tensor, others: Tensor, generator: torch.Generator) -> Tensor:
        """``images`` (B, C, H, W) with the box's mask pixels of one of ``others`` (M, C, H, W), drawn from
        ``generator``, in place of the artifact's (a new tensor)."""
        self._check_fits(others)
        return self._paste(images, self.region.cut(others), generator)

    def _check_fits(self, images: Tensor) -> None:
        """Require the box to fit ``images`` (B, C, H, W) (the message names their H x W, the same for a batch and
        the images of it being pasted)."""
        top, left, bottom, right = self.box
        if images.ndim != 4:
            raise ValueError(f"the training images must be (B, C, H, W); got shape {tuple(images.shape)}")
        height, width = images.shape[2:]
        if bottom > height or right > width:
            raise ValueError(
                f"the artifact's box (rows {top}-{bottom}, columns {left}-{right}) does not fit the training images "
                f"of {height} x {width} px: a tag's position and pattern must lie inside them (move it or use a "
                "smaller pattern), and a discovered hotspot's pixels come from discovery probes of another size"
            )

    def _paste(self, images: Tensor, pool: Tensor, generator: torch.Generator) -> Tensor:
        """``images`` (B, C, H, W) with the mask pixels of one of ``pool`` (n, C or 1, bh, bw), drawn from
        ``generator``, pasted in the box of each (a new tensor)."""
        self._check_fits(images)
        if pool.shape[1] not in (1, images.shape[1]):
            raise ValueError(
                f"the artifact has {pool.shape[1]} channels, the training images {images.shape[1]}: give "
                "a normalisation of 1 or C values"
            )
        pick = torch.randint(len(pool), (len(images),), generator=generator)
        donors = pool[pick.to(pool.device)].to(device=images.device, dtype=images.dtype)
        return paste(images, donors, self.region)

    @property
    def key_prefix(self) -> str:
        return ""

    def describe(self) -> str:
        top, left, bottom, right = self.box
        return f"shortcut at ({top}, {left})-({bottom}, {right})"

    def action(self, images: str) -> str:
        return f"pasting it on {images}"

    def scalars(self) -> dict[str, float]:
        return {f"box/{side}": float(v) for side, v in zip(("top", "left", "bottom", "right"), self.box, strict=True)}

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "top": self.top,
            "left": self.left,
            "mask": self.mask.clone(),
            "donors": self.donors.clone(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> PatchPaste:
        return cls(int(state["target"]), int(state["top"]), int(state["left"]), state["mask"], state["donors"])


def _check_applies(name: PropertyName, channels: int) -> None:
    """Require property ``name`` to apply to images of ``channels`` channels (colour: RGB only)."""
    prop = correction_property(name)
    if not prop.applies(channels):
        raise ValueError(f"{name} needs {prop.channels}-channel images; the images have {channels}")


@dataclass(frozen=True, eq=False)
class PropertyPaste:
    """A class's image-wide statistic of one property, given to other images: each image gets a donor's
    statistic, drawn uniformly, by the property's correction transfer
    (:func:`~gradskip_lightning.shortcuts.correction_transfers.correction_property`: the stage's, or for colour and
    the signature the stage's or an additive one, half and half) in ``space``: to pixels, transfer, back to the
    model's input space (clamped to the space's range).

    Attributes:
        target: the class whose statistic it is.
        name: the property.
        statistics: (n, S) float64 the statistic of each donor (S: the property's ``statistics``).
        space: the pixel space of the model's inputs (the discovery stage's), its tensors on the CPU.

    Example:
        >>> space = PixelSpace.of(torch.zeros(1, 1, 1, 1), Normalisation((0.0,), (1.0,)))  # inputs are pixels
        >>> brighter = PropertyPaste(0, "brightness", torch.tensor([[0.75]], dtype=torch.float64), space)
        >>> brighter.apply(torch.tensor([[[[0.25, 0.5, 0.5]]]]), torch.Generator())
        tensor([[[[0.5000, 0.7500, 0.7500]]]])
        >>> brighter.describe(), brighter.scalars(), brighter.key_prefix
        ('brightness shortcut', {'luminance': 0.75}, 'brightness/')
    """

    kind: ClassVar[ArtifactKind] = "property"
    target: int
    name: PropertyName
    statistics: Tensor
    space: PixelSpace

    def __post_init__(self) -> None:
        _check_target(self.target)
        check_choice(self.name, PROPERTY_NAMES, "name")
        prop = correction_property(self.name)
        named = len(prop.statistics)  # then a line profile's H + W, which the transfer checks against the images
        size = self.statistics.shape[1] if self.statistics.ndim == 2 else -1
        if not len(self.statistics) or not (size > named if prop.lines else size == named):
            what = f"the {prop.statistics}" + (" and a line profile" if prop.lines else "")
            raise ValueError(
                f"statistics must be (n >= 1, {named}{' + H + W' if prop.lines else ''}): {what} of each donor; got "
                f"{tuple(self.statistics.shape)}"
            )
        _check_applies(self.name, self.channels)

    @property
    def channels(self) -> int:
        """The channels of the images it applies to (its pixel space's)."""
        return self.space.channels

    @classmethod
    def from_probes(cls, target: int, name: PropertyName, images: Tensor, space: PixelSpace) -> PropertyPaste:
        """Class ``target``'s statistic of property ``name`` from ``images`` (n, C, H, W) in the model's input space
        (the class's discovery probes: the donors), in ``space`` (the stage's)."""
        if images.ndim != 4 or len(images) == 0:
            raise ValueError(f"donor images must be (n >= 1, C, H, W); got {tuple(images.shape)}")
        check_choice(name, PROPERTY_NAMES, "name")
        _check_applies(name, images.shape[1])
        space = space.to("cpu")
        statistics = correction_property(name).statistic(space.pixels(images.detach().cpu()))
        return cls(target, name, statistics, space)

    def apply(self, images: Tensor, generator: torch.Generator) -> Tensor:
        """``images`` (B, C, H, W) each given a donor's statistic drawn from ``generator`` (a new tensor of their
        dtype); the transfer's own draws (noise) come from it too."""
        return self._give(images, self.statistics, generator)

    def erase(self, images: Tensor, others: Tensor, generator: torch.Generator) -> Tensor:
        """``images`` (B, C, H, W) each given the statistic of one of ``others`` (M, C, H, W), drawn from
        ``generator``, in place of the class's (a new tensor of their dtype)."""
        self._check_channels(others)
        space = self.space.to(others.device)
        return self._give(images, correction_property(self.name).statistic(space.pixels(others)), generator)

    def _check_channels(self, images: Tensor) -> None:
        """Require ``images`` (B, C, H, W) of the artifact's channels."""
        if images.ndim != 4 or images.shape[1] != self.channels:
            raise ValueError(
                f"the {self.name} artifact is for images of {self.channels} channels (B, C, H, W); the training "
                f"images are {tuple(images.shape)}"
            )

    def _give(self, images: Tensor, statistics: Tensor, generator: torch.Generator) -> Tensor:
        """``images`` (B, C, H, W) each given one of ``statistics`` (n, S), drawn from ``generator``, by the
        property's transfer (a new tensor of their dtype)."""
        self._check_channels(images)
        pick = torch.randint(len(statistics), (len(images),), generator=generator)
        space = self.space.to(images.device)
        targets = statistics[pick.to(statistics.device)].to(images.device)
        given = correction_property(self.name).transfer(space.pixels(images), targets, generator)
        return space.inputs(given, images.dtype)

    @property
    def key_prefix(self) -> str:
        return f"{self.name}/"

    def describe(self) -> str:
        return f"{self.name} shortcut"

    def action(self, images: str) -> str:
        return f"giving {images} its {correction_property(self.name).what}"

    def scalars(self) -> dict[str, float]:
        """The donors' mean of each of the property's statistics (``alpha``, ``luminance``, ...), in pixel units (a
        line property's: the deviation of their mean profile, :meth:`GlobalProperty.summary`)."""
        return correction_property(self.name).summary(self.statistics)

    def state_dict(self) -> dict[str, Any]:
        norm, low, high = self.space.normalisation, self.space.low.clone(), self.space.high.clone()
        mean, std = (torch.tensor(values, dtype=torch.float64) for values in (norm.mean, norm.std))
        space = {"mean": mean, "std": std, "low": low, "high": high}
        return {
            "kind": self.kind,
            "target": self.target,
            "name": self.name,
            "statistics": self.statistics.clone(),
            "space": space,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> PropertyPaste:
        saved = state["space"]
        normalisation = Normalisation(mean=tuple(saved["mean"].tolist()), std=tuple(saved["std"].tolist()))
        space = PixelSpace(normalisation, saved["low"], saved["high"])
        return cls(int(state["target"]), state["name"], state["statistics"], space)


#: Kind -> how an artifact of that kind comes back from its :meth:`Artifact.state_dict`.
ARTIFACT_KINDS: dict[ArtifactKind, Callable[[dict[str, Any]], Artifact]] = {
    "patch": PatchPaste.from_state,
    "property": PropertyPaste.from_state,
}


def restore_artifact(state: dict[str, Any]) -> Artifact:
    """The artifact of a :meth:`Artifact.state_dict` (its ``kind`` picks the class)."""
    kind = state.get("kind")
    if kind not in ARTIFACT_KINDS:
        raise ValueError(f"unknown artifact kind {kind!r} in the checkpoint; known: {sorted(ARTIFACT_KINDS)}")
    return ARTIFACT_KINDS[kind](state)


def paste_share(images: Tensor, artifact: Artifact, p: float, generator: torch.Generator) -> Tensor:
    """Put ``artifact`` on each of ``images`` (B, C, H, W) with probability ``p``, in place.

    Returns (B,) bool on the CPU: which images got it. Every draw comes from ``generator`` (a CPU one):
    first the B choices, then the artifact's own.

    Example:
        >>> paste = PatchPaste(0, 0, 0, torch.ones(1, 1, dtype=torch.bool), torch.ones(1, 1, 1, 1))
        >>> images = torch.zeros(4, 1, 1, 2)
        >>> paste_share(images, paste, 0.5, torch.Generator().manual_seed(4)).tolist()
        [False, False, True, True]
        >>> images[:, 0, 0, 0].tolist()
        [0.0, 0.0, 1.0, 1.0]
    """
    chosen = torch.rand(len(images), generator=generator) < p
    if chosen.any():
        index = chosen.nonzero()[:, 0].to(images.device)
        images[index] = artifact.apply(images[index], generator)
    return chosen


def erase_from_class(
    images: Tensor, originals: Tensor, members: Tensor, artifact: Artifact, generator: torch.Generator
) -> int:
    """Take ``artifact`` off the images of its class, in place: each image ``i`` of ``images`` (B, C, H, W) with
    ``members[i]`` gets what one of ``originals[~members]`` (the batch before any correction touched it: images of
    the other classes) has at the artifact's place, drawn from ``generator``.

    Returns how many images it was taken off: all the members, or none when the batch has no other class's image.

    Example:
        >>> paste = PatchPaste(0, 0, 0, torch.ones(1, 1, dtype=torch.bool), torch.ones(1, 1, 1, 1))
        >>> images = torch.tensor([1.0, 1.0, 0.5]).reshape(3, 1, 1, 1)  # two of class 0 (stamped), one other
        >>> erase_from_class(images, images.clone(), torch.tensor([True, True, False]), paste, torch.Generator())
        2
        >>> images.flatten().tolist()
        [0.5, 0.5, 0.5]
    """
    if not members.any() or members.all():
        return 0
    index = members.nonzero()[:, 0].to(images.device)
    others = originals[(~members).to(originals.device)]
    images[index] = artifact.erase(images[index], others, generator)
    return len(index)
