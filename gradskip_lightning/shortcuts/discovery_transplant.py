"""Hotspot transplant test without a known tag: paste a class's hotspot onto the other classes' probes.

For a class c, a group of its probes (the donors: every probe of the class, or one SpRAy strategy's)
and a region (a patch mask (h, w): the group's hotspot, from :mod:`~gradskip_lightning.shortcuts.discovery_maps`,
or that hotspot grown), the recipients are the probes of the other classes that the model does not
already predict as c. Each is pasted, pixel for pixel (the mask upsampled by the patch size), with
three regions:

- the region from a donor (the test): ``flip_rate``;
- (a) a region of the same shape at a uniformly random place (seeded), from the same donor:
  ``random_flip_rate``;
- (b) the region from a probe of another class: ``other_class_flip_rate``.

Donors are taken in turn (recipient i gets donor i mod n, and the other-class probe after it). A flip
is a prediction of c after pasting: its arg-max (softmax) or its sigmoid above 0.5 (multi-label).

Two p-values make the test calibrated without extra forwards. The flips: each recipient is pasted
once per arm, so the test and a control form a pair; under the null that the region's pixels flip no
more than the control's, the recipients that flip under one only are as likely to be either (an exact
one-sided sign test); ``flip_p_value`` is the larger of the two controls' p-values. The pixels:
:func:`constancy_test` says how much more the donors' region pixels agree with each other than the
other classes' do (:func:`pixel_constancy`) and whether that excess stands out from its own sampling
noise (a jackknife z-test: ``constancy_p_value``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from gradskip_lightning.core.validation import (
    check_choice,
    check_image_batch,
    check_logits,
    check_patch_mask,
    check_targets,
)
from gradskip_lightning.metrics.perturbation import ACTIVATIONS, Activation, class_probabilities
from gradskip_lightning.shortcuts.regions import Region, paste, patch_pixels


@dataclass(frozen=True)
class HotspotTransplant:
    """The transplant test of one region; rates and the flips' p-value are NaN without recipients (or donors,
    or an empty region).

    Attributes:
        target: the class c whose region was pasted.
        recipients: probes of other classes not predicted as c before pasting (the rates' denominator).
        flip_rate: share of recipients predicted as c with the region of a donor pasted in.
        random_flip_rate: control (a), the same with a region of its shape at a random place.
        other_class_flip_rate: control (b), the region taken from a probe of another class.
        constancy: :func:`pixel_constancy` of the donors' region pixels, in [0, 1] (NaN: too few probes).
        flip_p_value: exact one-sided sign test of the test's flips against each control's, the larger p.
        constancy_p_value: p-value of the donors' pixel agreement beyond chance (:func:`constancy_test`).
        measured: False when the pasted copies were not forwarded (``hotspot_transplant(measure=False)``): the
            rates are NaN and ``flip_p_value`` is 1, a valid p-value that claims nothing.
        stopped: the test stopped at its first look (``first_look``): ``flip_p_value`` 1; its controls NaN when its
            flip rate alone was under ``futile_below`` (they were not forwarded).
    """

    target: int
    recipients: int
    flip_rate: float
    random_flip_rate: float
    other_class_flip_rate: float
    constancy: float
    flip_p_value: float = math.nan
    constancy_p_value: float = math.nan
    measured: bool = True
    stopped: bool = False

    @property
    def excess(self) -> float:
        """``max(0, flip_rate - max(random_flip_rate, other_class_flip_rate))``; NaN when a rate is, but for a test
        stopped before its controls were forwarded: its flip rate, the most the excess can be."""
        controls = max(self.random_flip_rate, self.other_class_flip_rate)
        if self.stopped and math.isnan(controls) and not math.isnan(self.flip_rate):
            return self.flip_rate
        if math.isnan(self.flip_rate) or math.isnan(self.random_flip_rate) or math.isnan(self.other_class_flip_rate):
            return math.nan
        return max(0.0, self.flip_rate - controls)

    @property
    def p_value(self) -> float:
        """The intersection-union test's: ``max(flip_p_value, constancy_p_value)`` (a shortcut needs both the
        flips and the pixels); NaN when either is."""
        if math.isnan(self.flip_p_value) or math.isnan(self.constancy_p_value):
            return math.nan
        return max(self.flip_p_value, self.constancy_p_value)


def predicted_as(logits: Tensor, target: int, activation: Activation = "softmax") -> Tensor:
    """(B,) bool: rows of logits (B, K) predicted as ``target``: its arg-max, or its sigmoid above 0.5.

    Example:
        >>> logits = torch.tensor([[2.0, 1.0], [-1.0, -2.0]])
        >>> predicted_as(logits, 0).tolist(), predicted_as(logits, 0, "sigmoid").tolist()
        ([True, True], [True, False])
    """
    probabilities = class_probabilities(logits, torch.full((len(logits),), target, device=logits.device), activation)
    return probabilities > 0.5 if activation == "sigmoid" else logits.argmax(dim=1) == target


#: Two probes' pixel values agree when they differ by at most this share of the value's standard deviation
#: over every probe (a stamp's pixels are equal; natural images agree by chance only, about 6 % of pairs).
AGREEMENT_TOLERANCE = 0.1
#: The fewest probes a tested group (a class's probes, or one SpRAy strategy's: the donors) needs for a p-value, in
#: every discovery test (the hotspot's here and the global properties'): a smaller group is scored but never flagged
#: (the pixels' jackknife needs a pair left once an image is out; two donors make no class-wide rule either).
MIN_TESTED_PROBES = 3
#: Recipients a transplant or transfer test measures first (the other classes in turn): the rest only when these
#: give at least half the suspicion that flags (a test that cannot fire stops early: most tests of most epochs).
FIRST_LOOK = 16
_CHUNK_ELEMENTS = 1 << 22  # pairwise comparisons held at once


def check_first_look(first_look: int | None) -> None:
    """Refuse a ``first_look`` that is not a number of recipients >= 1 or None."""
    if first_look is not None and (isinstance(first_look, bool) or not isinstance(first_look, int) or first_look < 1):
        raise ValueError(f"first_look must be a number of recipients >= 1 or None, got {first_look!r}")


def interleaved(positions: Tensor, classes: Tensor) -> Tensor:
    """``positions`` (n,) reordered class by class in turn: the first of each class (in class order), then the
    second of each, ...; within a class, in their order. Any prefix then spans the classes evenly.

    Example:
        >>> interleaved(torch.tensor([0, 1, 2, 3, 4]), torch.tensor([1, 1, 1, 2, 2])).tolist()
        [0, 3, 1, 4, 2]
    """
    own = classes[positions]
    same = own[:, None] == own[None, :]
    rank = (same & torch.ones_like(same).tril(diagonal=-1)).sum(dim=1)  # earlier positions of the same class
    return positions[torch.argsort(rank * (int(own.max()) + 1) + own, stable=True)] if len(positions) else positions


def sign_test(wins: int, losses: int) -> float:
    """One-sided exact sign test: P(X >= wins) for X ~ Binomial(wins + losses, 1/2); 1.0 without pairs.

    Example:
        >>> sign_test(5, 0), sign_test(3, 3), sign_test(0, 0)
        (0.03125, 0.65625, 1.0)
    """
    count = wins + losses
    return sum(math.comb(count, k) for k in range(wins, count + 1)) / 2**count


def agreement_tolerance(values: Tensor) -> Tensor:
    """The largest difference at which two of the images' values agree, per value: :data:`AGREEMENT_TOLERANCE` of
    its standard deviation over the images (n, ...) (0 for a single image).

    Example:
        >>> agreement_tolerance(torch.tensor([[0.0, 1.0], [2.0, 1.0]], dtype=torch.float64)).tolist()
        [0.14142135623730953, 0.0]
    """
    return AGREEMENT_TOLERANCE * (values.std(dim=0) if len(values) > 1 else torch.zeros_like(values[0]))


def agreement_counts(images: Tensor, pixels: Tensor) -> Tensor:
    """(P, P) float64: for each pair of images (P, C, H, W), at how many of the region's values (``pixels``
    (H, W) bool, times C channels) they agree (:data:`AGREEMENT_TOLERANCE`; the diagonal is every value)."""
    region = images[:, :, pixels.to(images.device)].flatten(1).double()  # (P, m)
    tolerance = agreement_tolerance(region)
    counts = region.new_zeros(len(region), len(region))
    step = max(1, _CHUNK_ELEMENTS // max(1, len(region) ** 2))
    for start in range(0, region.shape[1], step):
        part = region[:, start : start + step]
        counts += ((part[:, None] - part[None]).abs() <= tolerance[start : start + step]).sum(dim=2)
    return counts


@dataclass(frozen=True)
class PatchAgreements:
    """:func:`agreement_counts` of every region made of patches, from one pass over the probes: per patch, at how
    many of its values each ordered pair of distinct probes of the same class agrees (the only pairs
    :func:`constancy_test` reads); a region's counts are the sums over its patches.

    Attributes:
        first, second: (n,) positions of the pairs' probes among the P probes.
        counts: (h, w, n) float64, per patch each pair's agreeing values.
        patch_values: values per patch (ph * pw * C).
        probes: P.

    Example:
        >>> images = torch.rand(6, 2, 4, 4, generator=torch.Generator().manual_seed(0))
        >>> classes, region = torch.tensor([0, 0, 0, 1, 1, 1]), torch.tensor([[True, False], [True, True]])
        >>> counts = PatchAgreements.of(images, classes, 2).region(region)
        >>> whole = agreement_counts(images, patch_pixels(region, (2, 2)))
        >>> same = classes[:, None] == classes[None, :]
        >>> torch.equal(counts[same], whole[same]), float(counts[0, 0]), float(counts[0, 3])
        (True, 24.0, 0.0)
    """

    first: Tensor
    second: Tensor
    counts: Tensor
    patch_values: int
    probes: int

    @classmethod
    def of(cls, images: Tensor, classes: Tensor, patch_size: int | tuple[int, int]) -> PatchAgreements:
        """The counts of the probes (P, C, H, W) of ``classes`` (P,), for patches of ``patch_size`` pixels."""
        patch = patch_shape(patch_size)
        count, channels, height, width = images.shape
        grid = (height // patch[0], width // patch[1])
        values = images.double()
        tolerance = agreement_tolerance(values)
        classes = classes.to(images.device)
        first, second = (classes[:, None] == classes[None, :]).triu(diagonal=1).nonzero(as_tuple=True)  # once a pair
        step = max(1, _CHUNK_ELEMENTS // max(1, values[0].numel()))
        chunks = []
        for start in range(0, len(first), step):
            i, j = first[start : start + step], second[start : start + step]
            agree = ((values[i] - values[j]).abs() <= tolerance).sum(dim=1, dtype=torch.float64)  # (pairs, H, W)
            chunks.append(agree.reshape(len(i), grid[0], patch[0], grid[1], patch[1]).sum(dim=(2, 4)))  # (pairs, h, w)
        counts = torch.cat(chunks) if chunks else values.new_zeros(0, *grid)
        both = torch.cat([counts, counts]).permute(1, 2, 0)  # (i, j) and (j, i) agree alike
        return cls(torch.cat([first, second]), torch.cat([second, first]), both, channels * patch[0] * patch[1], count)

    def region(self, hotspot: Tensor) -> Tensor:
        """(P, P) float64: the agreement counts of the region ``hotspot`` (h, w) bool, as :func:`agreement_counts`
        gives them for pairs of the same class; 0 for pairs of different classes, the diagonal every value."""
        hotspot = hotspot.to(self.counts.device)
        counts = self.counts.new_zeros(self.probes, self.probes)
        counts[self.first, self.second] = self.counts[hotspot].sum(dim=0)
        return counts.fill_diagonal_(float(hotspot.sum()) * self.patch_values)


def constancy_test(
    images: Tensor,
    classes: Tensor,
    target: int,
    pixels: Tensor,
    members: Tensor | None = None,
    counts: Tensor | None = None,
) -> tuple[float, float]:
    """(constancy, p-value) of a region's pixels over a group of class-``target`` images.

    Two images agree at a pixel value when they differ by at most :data:`AGREEMENT_TOLERANCE` of its standard
    deviation over all images. ``a`` is the share of the group's image pairs that agree, over the region's
    values; ``a_o`` the same over pairs within each other class, pooled (chance agreement). The constancy is
    ``clamp((a - a_o) / (1 - a_o), 0, 1)``: f s^2 for a stamp on a share s of the group covering a share f
    of the region (its pixels agree in s^2 of the pairs), so 1 for a stamp on every image, 0.36 on 60 % of
    them, about 0 for an object or a texture, and 0 for values that agree everywhere (a_o = 1).

    The p-value is one-sided, of ``a - a_o > 0``: the normal tail of ``(a - a_o) / se``, with ``se`` the
    delete-one jackknife standard error over the group's images and the other classes' (each sample's
    leave-one-out values; pairs that share an image are not independent, the jackknife accounts for it).
    0 when se is 0 and a > a_o. Both are NaN with fewer than 2 images in the group, no other class with 2
    images, or an empty region; the p-value is NaN with fewer than :data:`MIN_TESTED_PROBES` (3: a jackknife
    needs a pair left).

    Args:
        images: (P, C, H, W) probe images.
        classes: (P,) their classes.
        target: the class c.
        pixels: (H, W) bool, the region.
        members: (n,) positions of the group's images among ``images`` (default: every image of class c).
        counts: (P, P) the region's :func:`agreement_counts`, when known (:meth:`PatchAgreements.region`: only
            the pairs of the same class are read).

    Example:
        >>> images = torch.rand(8, 1, 4, 4, generator=torch.Generator().manual_seed(0))
        >>> images[:4, :, 0, 0] = 0.5  # a stamp on class 1
        >>> classes, corner = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0]), torch.zeros(4, 4, dtype=torch.bool)
        >>> corner[0, 0] = True
        >>> constancy, p_value = constancy_test(images, classes, 1, corner)
        >>> constancy, round(p_value, 4)  # 4 images a class: the others' chance agreement is uncertain
        (1.0, 0.0019)
    """
    classes, pixels = classes.to(images.device), pixels.to(images.device)
    group = (classes == target).nonzero()[:, 0] if members is None else members.to(images.device)
    sizes = torch.bincount(classes[classes != target])
    if len(group) < 2 or not bool((sizes > 1).any()) or not pixels.any():
        return math.nan, math.nan
    counts = agreement_counts(images, pixels) if counts is None else counts.clone()
    values = float(counts[0, 0])
    counts = counts.fill_diagonal_(0)
    inside = counts[group][:, group]
    others = ((classes != target) & (sizes[classes.clamp(max=len(sizes) - 1)] > 1)).nonzero()[:, 0]
    same = (classes[others][:, None] == classes[others][None, :]).double()
    within = counts[others][:, others] * same
    n, pairs = len(group), float((same.sum() - len(others)))
    agreement, chance = float(inside.sum() / (n * (n - 1) * values)), float(within.sum() / (pairs * values))
    constancy = 0.0 if chance >= 1 else min(1.0, max(0.0, (agreement - chance) / (1 - chance)))
    if n < MIN_TESTED_PROBES:
        return constancy, math.nan
    # delete-one jackknife: the group's pair mean without image k, the others' pooled pair mean without image k
    group_out = (inside.sum() - 2 * inside.sum(dim=1)) / ((n - 1) * (n - 2) * values)
    fewer = pairs - 2 * (same.sum(dim=1) - 1)
    others_out = (within.sum() - 2 * within.sum(dim=1)) / (fewer.clamp(min=1) * values)
    others_out = others_out[fewer > 0]
    variance = sum(
        float((len(out) - 1) / len(out) * (out - out.mean()).square().sum()) for out in (group_out, others_out)
    )
    effect = agreement - chance
    if variance <= 0:
        return constancy, 0.0 if effect > 0 else 1.0
    return constancy, 0.5 * math.erfc(effect / math.sqrt(2 * variance))


def pixel_constancy(
    images: Tensor, classes: Tensor, target: int, pixels: Tensor, members: Tensor | None = None
) -> float:
    """How much more a region's pixels agree across a group of class-``target`` images than within other
    classes, in [0, 1]: the constancy of :func:`constancy_test` (about the square of the share of the group
    carrying a stamp that covers the region; 0 for an object or a texture).

    Args:
        images: (P, C, H, W) probe images.
        classes: (P,) their classes.
        target: the class c.
        pixels: (H, W) bool, the region.
        members: (n,) positions of the group's images (default: every image of class c).

    Example:
        >>> images = torch.rand(6, 1, 4, 4, generator=torch.Generator().manual_seed(0))
        >>> images[:3, :, 0, 0] = 0.5  # a stamp on class 1
        >>> classes, corner = torch.tensor([1, 1, 1, 0, 0, 0]), torch.zeros(4, 4, dtype=torch.bool)
        >>> corner[0, 0] = True
        >>> pixel_constancy(images, classes, 1, corner)
        1.0
    """
    return constancy_test(images, classes, target, pixels, members)[0]


#: Least per-pixel constancy (:func:`constant_pixels`) of an artifact's own pixels: a stamp on half of the group.
CONSTANT_PIXEL = 0.25


def constant_pixels(images: Tensor, classes: Tensor, members: Tensor, within: Tensor) -> Tensor:
    """(H, W) bool: the pixels of ``within`` (H, W) bool whose values a group's images share beyond chance, the
    pixels of a stamp (the constancy of :func:`constancy_test` per pixel, at least :data:`CONSTANT_PIXEL`).

    A pixel agrees for a pair of images when every channel differs by at most :data:`AGREEMENT_TOLERANCE` of its
    standard deviation over all images; ``a`` is the share of the group's pairs that agree, ``a_o`` the share of
    pairs within each class outside the group (pooled); the constancy is ``clamp((a - a_o) / (1 - a_o), 0, 1)``
    (0 where ``a_o`` is 1: a pixel every image shares, a background).

    Args:
        images: (P, C, H, W) probe images.
        classes: (P,) their classes.
        members: (n,) positions of the group's images (all of one class).
        within: (H, W) bool, where to look.

    Example:
        >>> images = torch.rand(8, 1, 4, 4, generator=torch.Generator().manual_seed(0))
        >>> images[:4, :, 1, 1:3] = 0.5  # a 1 x 2 stamp on class 1
        >>> classes, everywhere = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0]), torch.ones(4, 4, dtype=torch.bool)
        >>> constant_pixels(images, classes, torch.arange(4), everywhere).nonzero().tolist()
        [[1, 1], [1, 2]]
    """
    values = images[:, :, within.to(images.device)].double()  # (P, C, m)
    tolerance = agreement_tolerance(values)

    def agreeing(group: Tensor) -> tuple[Tensor, int]:  # per pixel: pairs of the group that agree, and pairs
        chosen = values[group]
        agree = ((chosen[:, None] - chosen[None]).abs() <= tolerance).all(dim=2).sum(dim=(0, 1)) - len(chosen)
        return agree.double(), len(chosen) * (len(chosen) - 1)

    members = members.to(images.device)
    inside, pairs = agreeing(members)
    group_class = classes[members[:1]]
    outside, other_pairs = torch.zeros_like(inside), 0
    for label in classes[classes != group_class].unique():
        agree, count = agreeing((classes == label).nonzero()[:, 0])
        outside, other_pairs = outside + agree, other_pairs + count
    pixels = torch.zeros_like(within, dtype=torch.bool)
    if pairs == 0 or other_pairs == 0:
        return pixels
    share, chance = inside / pairs, outside / other_pairs
    constancy = torch.where(chance < 1, (share - chance) / (1 - chance).clamp(min=1e-12), 0.0).clamp(0, 1)
    pixels[within] = (constancy >= CONSTANT_PIXEL).cpu()
    return pixels


def patch_shape(patch_size: int | tuple[int, int]) -> tuple[int, int]:
    """(ph, pw) from ``patch_size``, ph or (ph, pw) positive ints."""
    pair = (patch_size, patch_size) if isinstance(patch_size, int) else patch_size
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 or any(type(p) is not int for p in pair):
        raise TypeError(f"patch_size must be an int or a pair of ints (ph, pw); got {patch_size!r}")
    if min(pair) < 1:
        raise ValueError(f"patch_size must be positive; got {patch_size!r}")
    return pair[0], pair[1]


def hotspot_transplant(
    model: Callable[[Tensor], Tensor],
    images: Tensor,
    classes: Tensor,
    hotspot: Tensor,
    target: int,
    *,
    patch_size: int | tuple[int, int],
    donors: Tensor | None = None,
    seed: int = 0,
    batch_size: int = 256,
    activation: Activation = "softmax",
    logits: Tensor | None = None,
    measure: bool = True,
    first_look: int | None = None,
    futile_below: float = 0.0,
    pixel_test: tuple[float, float] | None = None,
) -> HotspotTransplant:
    """Paste a region of class ``target``'s donors onto the other classes' probes, with controls and p-values
    (see the module docstring).

    All images go through ``model`` in chunks of ``batch_size`` under ``torch.no_grad()``: the
    recipients once unchanged (unless ``logits`` gives them), then 3 pasted copies of each
    (n_o + 3 * recipients images); the p-values need no other forward.

    Args:
        model: images (B, C, H, W) -> logits (B, K), in eval mode (the mode is left as it is).
        images: (P, C, H, W) probe images, normalised as the model expects.
        classes: (P,) their classes.
        hotspot: (h, w) bool patch mask, the region; ``(h * ph, w * pw)`` must be the image size.
        target: the class c.
        patch_size: pixels per patch, ph or (ph, pw).
        donors: (n,) positions of the donor probes, all of class c (default: every probe of class c).
        seed: of the random placements of control (a).
        batch_size: images per forward call.
        activation: "softmax" (a flip: arg-max) or "sigmoid" (multi-label: its sigmoid > 0.5).
        logits: (P, K) the model's logits of the unchanged ``images``, when known (their forward is
            then skipped; :func:`~.discovery.discover` computes them once for every class).
        measure: False: count the recipients and test the pixels only, without forwarding the pasted copies
            (``measured`` False: NaN rates, flips' p-value 1).
        first_look: recipients measured first (taken from the other classes in turn; None: every one at once);
            when their flip rate's excess over the controls is below ``futile_below``, the test stops there:
            its rates are theirs and its flips' p-value is 1 (it claims nothing, as an unmeasured test's). The
            region goes first: when its flip rate alone is below ``futile_below``, the controls are not
            forwarded (NaN; the excess is then the flip rate, the most it can be).
        futile_below: see ``first_look``.
        pixel_test: the (constancy, p-value) of the region's pixels when tested elsewhere (:func:`~.discovery.discover`
            tests a whole class on its pixel sample); None: :func:`constancy_test` of the donors among ``images``.

    Example:
        >>> def model(x):  # class 1 iff the top-left 2 x 2 pixels are 1
        ...     stamped = (x[:, 0, :2, :2] == 1).flatten(1).all(1).double()
        ...     return torch.stack([1 - stamped, stamped], dim=1)
        >>> images = torch.rand(8, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> classes = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0])
        >>> images[:4, :, :2, :2] = 1.0
        >>> hotspot = torch.zeros(4, 4, dtype=torch.bool)
        >>> hotspot[0, 0] = True
        >>> result = hotspot_transplant(model, images, classes, hotspot, 1, patch_size=2)
        >>> result.flip_rate, result.other_class_flip_rate, result.constancy, result.recipients
        (1.0, 0.0, 1.0, 4)
        >>> result.flip_p_value  # 4 recipients flip under the test only: 1 / 2^4
        0.0625
    """
    check_image_batch(images)
    check_targets(classes, len(images))
    check_patch_mask(hotspot)
    check_choice(activation, ACTIVATIONS, "activation")
    if isinstance(target, bool) or not isinstance(target, int):
        raise TypeError(f"target must be a class index (int); got {type(target).__name__}")
    if target < 0:
        raise ValueError(f"target must be a class index >= 0; got {target}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    check_first_look(first_look)
    patch, grid = patch_shape(patch_size), (hotspot.shape[0], hotspot.shape[1])
    covered, size = (grid[0] * patch[0], grid[1] * patch[1]), tuple(images.shape[-2:])
    if covered != size:
        raise ValueError(f"hotspot {grid} of {patch} px patches covers {covered}, not the images' {size}")
    device = images.device
    classes, hotspot = classes.to(device), hotspot.to(device)
    others = (classes != target).nonzero()[:, 0]
    donors = (classes == target).nonzero()[:, 0] if donors is None else _checked_donors(donors, classes, target)
    if pixel_test is None:
        pixel_test = constancy_test(images, classes, target, patch_pixels(hotspot, patch), donors)
    constancy, constancy_p = pixel_test

    def predictions(count: int, build: Callable[[int, int], Tensor]) -> Tensor:
        chunks = []
        with torch.no_grad():
            for start in range(0, count, batch_size):
                chunks.append(predicted_as(model(build(start, min(start + batch_size, count))), target, activation))
        return torch.cat(chunks) if chunks else torch.zeros(0, dtype=torch.bool, device=device)

    undefined = HotspotTransplant(target, 0, math.nan, math.nan, math.nan, constancy, math.nan, constancy_p)
    if not len(donors) or not hotspot.any():
        return undefined
    if logits is None:
        clean = predictions(len(others), lambda start, stop: images[others[start:stop]])
    else:
        check_logits(model, logits, len(images))
        clean = predicted_as(logits.to(device)[others], target, activation)
    eligible = interleaved((~clean.to(device)).nonzero()[:, 0], classes[others])
    count = len(eligible)
    if not count:
        return undefined
    if not measure:
        return HotspotTransplant(
            target, count, math.nan, math.nan, math.nan, constancy, 1.0, constancy_p, measured=False
        )  # fmt: skip
    region = Region.of_patches(hotspot, patch)
    rows, cols = hotspot.any(dim=1).nonzero()[:, 0], hotspot.any(dim=0).nonzero()[:, 0]
    shape = (int(rows[-1] - rows[0]) + 1, int(cols[-1] - cols[0]) + 1)  # the region's box in patches
    generator = torch.Generator().manual_seed(seed)
    random_tops = torch.randint(grid[0] - shape[0] + 1, (count,), generator=generator)
    random_lefts = torch.randint(grid[1] - shape[1] + 1, (count,), generator=generator)

    def arms(index: Tensor, which: tuple[int, ...] = (0, 1, 2)) -> Tensor:
        """(len(which), n) flips of recipients ``index`` (n,) (positions among the eligible) under the arms ``which``
        of: 0 the region from a donor, 1 (a) a random place from the donor, 2 (b) the region from another class."""
        n, chosen = len(index), eligible[index]
        recipient = others[chosen].repeat(len(which))
        sources = (donors[index % len(donors)], donors[index % len(donors)], others[(chosen + 1) % len(others)])
        donor = torch.cat([sources[arm] for arm in which])
        top, left = rows[:1].expand(n), cols[:1].expand(n)
        places = ((top, left), (random_tops.to(device)[index], random_lefts.to(device)[index]), (top, left))
        tops = torch.cat([places[arm][0] for arm in which]) * patch[0]
        lefts = torch.cat([places[arm][1] for arm in which]) * patch[1]

        def pasted(start: int, stop: int) -> Tensor:
            corners = (tops[start:stop], lefts[start:stop])
            return paste(images[recipient[start:stop]], images[donor[start:stop]], region, corners)

        return predictions(len(which) * n, pasted).reshape(len(which), n)

    index = torch.arange(count, device=device)
    look = count if first_look is None else min(first_look, count)
    if look < count:  # a look that can stop: the region first, its controls only if the flips alone could fire
        region_flips = arms(index[:look], (0,))
        rate = float(region_flips.double().mean())
        if rate < futile_below:  # the most the excess can be
            return HotspotTransplant(
                target, look, rate, math.nan, math.nan, constancy, 1.0, constancy_p, stopped=True
            )  # fmt: skip
        flips = torch.cat([region_flips, arms(index[:look], (1, 2))])
    else:
        flips = arms(index)
    stopped = look < count and _excess(flips) < futile_below
    if look < count and not stopped:
        flips = torch.cat([flips, arms(index[look:])], dim=1)
    count = flips.shape[1]
    test, random_place, other_class = flips
    flip_p = 1.0 if stopped else max(
        sign_test(int((test & ~control).sum()), int((control & ~test).sum())) for control in (random_place, other_class)
    )  # fmt: skip
    rates = [float(arm.double().mean()) for arm in (test, random_place, other_class)]
    return HotspotTransplant(
        target, count, rates[0], rates[1], rates[2], constancy, flip_p, constancy_p, stopped=stopped
    )


def _excess(flips: Tensor) -> float:
    """The flip rate's excess over the larger control's, ``max(0, test - max(a, b))``, of flips (3, n)."""
    rates = flips.double().mean(dim=1)
    return max(0.0, float(rates[0] - rates[1:].max()))


def _checked_donors(donors: Tensor, classes: Tensor, target: int) -> Tensor:
    """``donors`` (n,) on the classes' device, checked: distinct positions of class-``target`` probes."""
    if not isinstance(donors, Tensor) or donors.ndim != 1 or donors.dtype != torch.long:
        raise TypeError(f"donors must be a 1-d int64 tensor of probe positions; got {donors!r}")
    donors = donors.to(classes.device)
    outside = (donors < 0) | (donors >= len(classes))
    wrong = outside | (classes[donors.clamp(0, len(classes) - 1)] != target)
    if bool(wrong.any()) or len(donors.unique()) != len(donors):
        raise ValueError(
            f"donors must be distinct positions of class-{target} probes among the {len(classes)} images; got "
            f"{donors.tolist()} (positions {donors[wrong].tolist()} are not; under DDP pass each map's probe position "
            "to ClassMapSummary.update(positions=...))"
        )
    return donors
