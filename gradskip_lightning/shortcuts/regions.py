"""A region of an image and the one way to paste pixels into it.

A :class:`Region` is pixels at a place: a bool mask (bh, bw) whose top-left pixel is at (top, left). A
tag's region is its whole box (:meth:`Region.of_box`); a discovered hotspot's is its patches in pixels
(:meth:`Region.of_patches`: a hotspot need not fill its bounding box). :func:`paste` puts pixels into a
region of every image of a batch: the tag transplant (:mod:`.transplant`), the hotspot transplant test
(:mod:`.discovery_transplant`, also at a random place per image) and the correction's artifacts
(:mod:`.artifacts`) all paste through it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gradskip_lightning.core.validation import check_patch_mask

__all__ = ["Region", "paste", "patch_pixels"]


def patch_pixels(patches: Tensor, patch_size: tuple[int, int]) -> Tensor:
    """(h * ph, w * pw) bool: ``patches`` (h, w) bool on a grid of ``patch_size`` (ph, pw) px patches, in pixels."""
    return patches.repeat_interleave(patch_size[0], dim=0).repeat_interleave(patch_size[1], dim=1)


@dataclass(frozen=True, eq=False)
class Region:
    """Pixels at a place: ``mask`` (bh, bw) bool, its top-left pixel at (``top``, ``left``).

    Example:
        >>> region = Region.of_patches(torch.tensor([[False, True], [False, False]]), (2, 2))
        >>> region.bounds, region.mask.tolist()
        ((0, 2, 2, 4), [[True, True], [True, True]])
        >>> region.pixels(4, 4).sum().item(), region.at(2, 0).bounds
        (4, (2, 0, 4, 2))
    """

    top: int
    left: int
    mask: Tensor

    def __post_init__(self) -> None:
        check_patch_mask(self.mask, "mask")
        if min(self.top, self.left) < 0:
            raise ValueError(f"the box's corner must be >= 0, got ({self.top}, {self.left})")

    @classmethod
    def of_box(cls, top: int, left: int, bottom: int, right: int) -> Region:
        """Every pixel of the box rows ``top:bottom``, columns ``left:right``."""
        return cls(top, left, torch.ones(bottom - top, right - left, dtype=torch.bool))

    @classmethod
    def of_patches(cls, patches: Tensor, patch_size: tuple[int, int]) -> Region:
        """The pixels of ``patches`` (h, w) bool on a grid of ``patch_size`` (ph, pw) px patches, in their bounding
        box."""
        check_patch_mask(patches)
        if not patches.any():
            raise ValueError("the patches select none: the region is empty")
        return cls.of_pixels(patch_pixels(patches.cpu(), patch_size))

    @classmethod
    def of_pixels(cls, pixels: Tensor) -> Region:
        """The pixels of ``pixels`` (H, W) bool, a whole image's, in their bounding box."""
        check_patch_mask(pixels, "pixels")
        if not pixels.any():
            raise ValueError("the pixels select none: the region is empty")
        pixels = pixels.cpu()
        rows, cols = pixels.any(dim=1).nonzero()[:, 0], pixels.any(dim=0).nonzero()[:, 0]
        top, bottom, left, right = int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
        return cls(top, left, pixels[top:bottom, left:right].clone())

    @property
    def bounds(self) -> tuple[int, int, int, int]:
        """(top, left, bottom, right) in pixels, bottom and right exclusive."""
        return self.top, self.left, self.top + self.mask.shape[0], self.left + self.mask.shape[1]

    def at(self, top: int, left: int) -> Region:
        """The same mask with its top-left pixel at (``top``, ``left``)."""
        return Region(top, left, self.mask)

    def fits(self, height: int, width: int) -> bool:
        """Whether the region lies inside images of ``height`` x ``width`` px."""
        _, _, bottom, right = self.bounds
        return bottom <= height and right <= width

    def pixels(self, height: int, width: int) -> Tensor:
        """(height, width) bool: the region's pixels in a whole image (it must fit)."""
        if not self.fits(height, width):
            raise ValueError(f"the region {self.bounds} does not fit {height} x {width} px images")
        top, left, bottom, right = self.bounds
        whole = torch.zeros(height, width, dtype=torch.bool)
        whole[top:bottom, left:right] = self.mask
        return whole

    def cut(self, images: Tensor) -> Tensor:
        """``images`` (..., H, W) cut to the region's box: (..., bh, bw)."""
        top, left, bottom, right = self.bounds
        return images[..., top:bottom, left:right]

    def placed(self, tops: Tensor, lefts: Tensor, height: int, width: int) -> Tensor:
        """(n, height, width) bool: the mask with its top-left pixel at each of (``tops``, ``lefts``) (n,) (a part
        outside the image is cut off)."""
        rows = torch.arange(height, device=tops.device)[None, :, None] - tops[:, None, None]
        cols = torch.arange(width, device=tops.device)[None, None, :] - lefts[:, None, None]
        shape = self.mask.to(tops.device)
        inside = (rows >= 0) & (rows < shape.shape[0]) & (cols >= 0) & (cols < shape.shape[1])
        return inside & shape[rows.clamp(0, shape.shape[0] - 1), cols.clamp(0, shape.shape[1] - 1)]


def paste(images: Tensor, pixels: Tensor, region: Region, corners: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """A copy of ``images`` (B, C, H, W) with the region's pixels taken from ``pixels``.

    Args:
        images: (B, C, H, W) the images pasted into (they are not changed).
        pixels: what is pasted, broadcast over the batch and the channels: the region's own values
            (1 or B, 1 or C, bh, bw), or whole images (1 or B, 1 or C, H, W) whose region is taken.
        region: where, and which of its box's pixels.
        corners: (tops, lefts) (B,) each image's own top-left pixel for the region (its mask moved per image;
            ``pixels`` are then whole images). None: the region's own place for every image.

    Example:
        >>> region = Region(0, 1, torch.tensor([[True, False], [True, True]]))
        >>> paste(torch.zeros(1, 1, 2, 3), torch.ones(1, 1, 2, 2), region)[0, 0]
        tensor([[0., 1., 0.],
                [0., 1., 1.]])
    """
    height, width = images.shape[-2:]
    if corners is not None:
        masks = region.placed(corners[0], corners[1], height, width).to(images.device)
        return torch.where(masks[:, None], pixels, images)
    if not region.fits(height, width):
        raise ValueError(f"the region {region.bounds} does not fit {height} x {width} px images")
    if tuple(pixels.shape[-2:]) == (height, width):
        pixels = region.cut(pixels)
    out = images.clone()
    inside = region.cut(out)
    top, left, bottom, right = region.bounds
    out[..., top:bottom, left:right] = torch.where(region.mask.to(images.device), pixels, inside)
    return out
