"""The pixel sample: more images of each class than the probes, whose pixels the discovery reads without a forward.

Two things are read there (:class:`PixelSample`, computed once per patch size: a sample kept over a fit is
compared once):

- the agreements of its same-class pairs at every patch (:class:`~.discovery_transplant.PatchAgreements`), which a
  whole class's pixel test reads (:func:`~.discovery_transplant.constancy_test`);
- its copied patch (:class:`CopiedPatch`): a stamp is a copy, so at a patch it covers the images that carry it are
  identical (every value within :data:`~.discovery_transplant.AGREEMENT_TOLERANCE` of its standard deviation over
  the sample), which natural images rarely are. The class and patch with the highest share of identical pairs is
  found with a permutation p-value: the classes are shuffled over the sample and the highest share over every
  class and patch taken again, so the choice of the patch is part of the null. :func:`~.discovery.discover` tests
  the class's probes that carry the copy there like a hotspot: a stamp on part of a class that no map points at.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from gradskip_lightning.core.validation import check_image_batch, check_targets

from .discovery_transplant import PatchAgreements, agreement_tolerance, patch_shape

_CHUNK_ELEMENTS = 1 << 22  # (permutation, identical pair) slots counted at once


@dataclass(frozen=True)
class CopiedPatch:
    """The class and patch whose images are identical in the highest share of the class's pairs.

    Attributes:
        label: the class.
        patch: (row, column) of the patch.
        share: the class's pairs identical there, over its pairs, in [0, 1].
        p_value: permutation p-value of the highest share over every class and patch (the classes shuffled over the
            sample, ``(1 + as high) / (1 + permutations)``).
    """

    label: int
    patch: tuple[int, int]
    share: float
    p_value: float


def identical_pairs(images: Tensor, patch_size: int | tuple[int, int]) -> tuple[Tensor, Tensor, Tensor]:
    """The pairs of images (Q, C, H, W) identical at a patch (every value within
    :data:`~.discovery_transplant.AGREEMENT_TOLERANCE` of its standard deviation over the images): (patch, i, j),
    each (T,) int64, with the patch's flat index on the (H / ph, W / pw) grid and i < j.

    Example:
        >>> images = torch.rand(4, 1, 4, 4, generator=torch.Generator().manual_seed(0))
        >>> images[1:3, :, :2, 2:] = 0.5  # images 1 and 2 share patch (0, 1)
        >>> [t.tolist() for t in identical_pairs(images, 2)]
        [[1], [1], [2]]
    """
    ph, pw = patch_shape(patch_size)
    count, channels, height, width = images.shape
    values = images.double()
    tolerance = agreement_tolerance(values)
    scaled = values / tolerance.clamp(min=torch.finfo(torch.float64).tiny)  # identical: every |difference| <= 1
    patches = scaled.reshape(count, channels, height // ph, ph, width // pw, pw).permute(2, 4, 0, 1, 3, 5)
    patches = patches.reshape((height // ph) * (width // pw), count, -1)  # (h * w, Q, values)
    found = []
    for position, patch in enumerate(patches):  # (Q, values): a (Q, Q) comparison at a time
        # the pairs that agree at the patch's first value, kept while they agree at the next (few natural pairs last)
        left, right = (
            ((patch[:, None, 0] - patch[None, :, 0]).abs() <= 1 + 1e-9).triu(diagonal=1).nonzero(as_tuple=True)
        )
        for value in range(1, patch.shape[1]):
            if not len(left):
                break
            agree = (patch[left, value] - patch[right, value]).abs() <= 1 + 1e-9
            left, right = left[agree], right[agree]
        found.append((torch.full_like(left, position), left, right))
    index, left, right = (torch.cat(parts) for parts in zip(*found, strict=True))
    return index, left, right


def copied_patch(
    images: Tensor, classes: Tensor, patch_size: int | tuple[int, int], permutations: int = 999, seed: int = 0
) -> CopiedPatch | None:
    """The class and patch of images (Q, C, H, W) of ``classes`` (Q,) with the highest share of the class's pairs
    identical there (:func:`identical_pairs`), with its permutation p-value over ``permutations`` shufflings of the
    classes (seeded); None when no two images of a class are identical at any patch.

    Example:
        >>> images = torch.rand(24, 1, 4, 4, generator=torch.Generator().manual_seed(0))
        >>> classes = torch.arange(24) % 3
        >>> copied_patch(images, classes, 2) is None
        True
        >>> images[classes == 1, :, 2:, :2] = 0.5  # a stamp on class 1, at patch (1, 0)
        >>> copied_patch(images, classes, 2)
        CopiedPatch(label=1, patch=(1, 0), share=1.0, p_value=0.001)
        >>> images[::2, :, 2:, :2] = 0.5  # and on half of every class: no class copies it more than chance
        >>> copied_patch(images, classes, 2).p_value > 0.05
        True
    """
    ph, pw = patch_shape(patch_size)
    grid = (images.shape[2] // ph, images.shape[3] // pw)
    patches, first, second = identical_pairs(images, (ph, pw))
    classes = classes.to(images.device)
    labels = int(classes.max()) + 1 if len(classes) else 0
    sizes = torch.bincount(classes, minlength=labels).double()
    pairs = (sizes * (sizes - 1) / 2).clamp(min=1).repeat_interleave(grid[0] * grid[1])  # (K * h * w,)

    def highest(shuffled: Tensor) -> Tensor:
        """(B, K * h * w) shares of identical pairs per class and patch, classes (B, Q)."""
        own, other = shuffled[:, first], shuffled[:, second]
        same = (own == other).double()
        slots = own * (grid[0] * grid[1]) + patches[None]
        return same.new_zeros(len(shuffled), len(pairs)).scatter_add_(1, slots, same) / pairs[None]

    observed = highest(classes[None])[0]
    best = int(observed.argmax()) if len(observed) else 0
    if not len(observed) or observed[best] <= 0:
        return None
    generator = torch.Generator().manual_seed(seed)
    as_high, step = 0, max(1, _CHUNK_ELEMENTS // len(patches))
    for start in range(0, permutations, step):
        count = min(step, permutations - start)
        order = torch.stack([torch.randperm(len(classes), generator=generator) for _ in range(count)])
        as_high += int((highest(classes[order.to(classes.device)]).amax(dim=1) >= observed[best]).sum())
    label, flat = divmod(best, grid[0] * grid[1])
    return CopiedPatch(label, divmod(flat, grid[1]), float(observed[best]), (1 + as_high) / (1 + permutations))


def copy_carriers(
    images: Tensor, members: Tensor, sample: Tensor, pixels: Tensor, partners: Tensor | None = None
) -> Tensor:
    """(k,) those of ``members`` (n,), positions among the images (P, C, H, W), whose ``pixels`` (H, W) bool are
    identical (:func:`identical_pairs`' rule, over ``sample``) to those of another image of ``sample``
    (Q, C, H, W) (one of ``partners`` (Q,) bool, default every one): the probes that carry a copied patch.

    Example:
        >>> sample = torch.rand(4, 1, 2, 2, generator=torch.Generator().manual_seed(0))
        >>> sample[:2, :, 0, 0] = 0.5
        >>> corner = torch.tensor([[True, False], [False, False]])
        >>> copy_carriers(sample, torch.tensor([0, 2]), sample, corner).tolist()  # probe 0 is sample image 0
        [0]
    """
    pixels = pixels.to(images.device)
    values = sample[:, :, pixels].double().flatten(1)  # (Q, m)
    tolerance = agreement_tolerance(values)
    mine = images[members][:, :, pixels].double().flatten(1)  # (n, m)
    identical = ((mine[:, None] - values[None]).abs() <= tolerance).all(dim=2)  # (n, Q)
    itself = (images[members].flatten(1)[:, None] == sample.flatten(1)[None]).all(dim=2)
    if partners is not None:
        identical &= partners.to(identical.device)[None]
    return members[(identical & ~itself).any(dim=1)]


@dataclass(frozen=True, eq=False)
class PixelSample:
    """Images whose pixels a class's pixel test and the copy test read (:func:`~.discovery.discover`'s
    ``pixel_sample``), with their :class:`~.discovery_transplant.PatchAgreements` and :class:`CopiedPatch` computed
    once per patch size (and permutations, seed): a sample kept over a fit is compared once.

    Attributes:
        images: (Q, C, H, W) images, normalised as the probes are.
        classes: (Q,) their classes.

    Example:
        >>> sample = PixelSample(torch.rand(6, 1, 4, 4), torch.tensor([0, 0, 0, 1, 1, 1]))
        >>> sample.agreements(2) is sample.agreements((2, 2)), sample.agreements(2).counts.shape
        (True, torch.Size([2, 2, 12]))
    """

    images: Tensor
    classes: Tensor
    _agreements: dict[tuple[int, int], PatchAgreements] = field(default_factory=dict, init=False, repr=False)
    _copies: dict[tuple[tuple[int, int], int, int], CopiedPatch | None] = field(
        default_factory=dict, init=False, repr=False
    )

    def __post_init__(self) -> None:
        check_image_batch(self.images)
        check_targets(self.classes, len(self.images))

    def agreements(self, patch_size: int | tuple[int, int]) -> PatchAgreements:
        """The sample's :class:`~.discovery_transplant.PatchAgreements` for patches of ``patch_size`` pixels
        (computed at the first call)."""
        patch = patch_shape(patch_size)
        if patch not in self._agreements:
            self._agreements[patch] = PatchAgreements.of(self.images, self.classes, patch)
        return self._agreements[patch]

    def copied_patch(self, patch_size: int | tuple[int, int], permutations: int, seed: int) -> CopiedPatch | None:
        """The sample's :func:`copied_patch` (computed at the first call)."""
        key = (patch_shape(patch_size), permutations, seed)
        if key not in self._copies:
            self._copies[key] = copied_patch(self.images, self.classes, key[0], permutations, seed)
        return self._copies[key]
