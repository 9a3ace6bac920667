"""Artifacts a correction puts on training images so that they stop predicting one class (augmentative ClArC).

An :class:`Artifact` is what a shortcut looks like, as something that can be put on any image:
``apply(images, generator)`` returns the images (B, C, H, W) with it on every one. :class:`PatchPaste`
is a located artifact (pixels at a place): a known tag's pattern (:meth:`PatchPaste.from_tag`) or a
flagged class's discovery hotspot with the class's own pixels there (:meth:`PatchPaste.from_hotspot`).
A shortcut with no place (colour, brightness, sharpness or noise statistics of a class) is a second
implementation of the same protocol: it gets a kind in :data:`ArtifactKind`, its restore function in
:data:`ARTIFACT_KINDS`, and a builder where :class:`~.core.ShortcutCorrection` turns a discovery into
artifacts (:meth:`~.core.ShortcutCorrection.artifact_for`).

:func:`paste_share` puts an artifact on a share ``p`` of a batch, in place, with the caller's generator
(never the global RNG).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor

from gradskip_lightning.callback.scoring.transplant import Transplant
from gradskip_lightning.core.validation import check_patch_mask
from gradskip_lightning.data.tags import SpuriousTag

__all__ = ["ARTIFACT_KINDS", "Artifact", "ArtifactKind", "PatchPaste", "paste_share", "restore_artifact"]

#: The kinds of artifact; each has its restore function in :data:`ARTIFACT_KINDS`.
ArtifactKind = Literal["patch"]


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

    def describe(self) -> str:
        """What and where it is, for the log (``"shortcut at (24, 24)-(28, 28)"``)."""
        ...

    def scalars(self) -> dict[str, float]:
        """Its logged values by name (``box/top``, ...), logged as ``correction/<prefix><name>/class_<k>``."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain values only (checkpoints load with ``weights_only=True``)."""
        ...


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
        if isinstance(self.target, bool) or not isinstance(self.target, int) or self.target < 0:
            raise ValueError(f"target must be a class index >= 0, got {self.target!r}")
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
    def box(self) -> tuple[int, int, int, int]:
        """(top, left, bottom, right) in pixels, bottom and right exclusive."""
        return self.top, self.left, self.top + self.mask.shape[0], self.left + self.mask.shape[1]

    @classmethod
    def from_tag(cls, tag: SpuriousTag, mean: Sequence[float], std: Sequence[float]) -> PatchPaste:
        """The tag's pattern at its place, normalised with ``mean`` and ``std`` (1 or C values) as the
        model's images are (one donor of ``len(mean)`` channels)."""
        top, left, bottom, right = tag.box
        blank = torch.zeros(1, len(mean), bottom, right)
        pixels = Transplant(tag, tuple(mean), tuple(std)).paste(blank)[:, :, top:bottom, left:right]
        return cls(tag.target_class, top, left, torch.ones(bottom - top, right - left, dtype=torch.bool), pixels)

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
        pixels = hotspot.repeat_interleave(patch_size[0], dim=0).repeat_interleave(patch_size[1], dim=1)
        rows, cols = pixels.any(dim=1).nonzero()[:, 0], pixels.any(dim=0).nonzero()[:, 0]
        top, bottom, left, right = int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
        donors = images.detach().cpu()[:, :, top:bottom, left:right].clone()
        return cls(target, top, left, pixels[top:bottom, left:right].clone(), donors)

    def apply(self, images: Tensor, generator: torch.Generator) -> Tensor:
        """``images`` (B, C, H, W) with a donor drawn from ``generator`` pasted on each (a new tensor)."""
        top, left, bottom, right = self.box
        if images.ndim != 4 or bottom > images.shape[2] or right > images.shape[3]:
            raise ValueError(
                f"the artifact's box (rows {top}-{bottom}, columns {left}-{right}) does not fit images of shape "
                f"{tuple(images.shape)}: the training images must be (B, C, H, W) of the discovery probes' size"
            )
        if self.donors.shape[1] not in (1, images.shape[1]):
            raise ValueError(
                f"the artifact has {self.donors.shape[1]} channels, the training images {images.shape[1]}: give "
                "1 or C values of mean and std"
            )
        pick = torch.randint(len(self.donors), (len(images),), generator=generator)
        donors = self.donors[pick].to(device=images.device, dtype=images.dtype)
        out = images.clone()
        region = out[:, :, top:bottom, left:right]
        out[:, :, top:bottom, left:right] = torch.where(self.mask.to(images.device), donors, region)
        return out

    def describe(self) -> str:
        top, left, bottom, right = self.box
        return f"shortcut at ({top}, {left})-({bottom}, {right})"

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


#: Kind -> how an artifact of that kind comes back from its :meth:`Artifact.state_dict`.
ARTIFACT_KINDS: dict[ArtifactKind, Callable[[dict[str, Any]], Artifact]] = {"patch": PatchPaste.from_state}


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
