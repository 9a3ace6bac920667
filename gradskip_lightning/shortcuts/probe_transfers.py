"""What the global property tests compute from the probes alone, kept between a fit's epoch ends.

The discovery probes do not change during a fit, and neither does anything the property tests
(:mod:`.discovery_properties`) compute from them without the model: their pixels, each property's statistics
(P, S), each class's separability, which donors and draws each recipient takes, and so each recipient's transferred
images. :class:`ProbeTransfers` computes each of them the first time a test needs it and keeps it; only the model's
forwards are new at each epoch end.

For class k, the recipients are the other classes' probes in turn (:func:`~.discovery_transplant.interleaved`); the
one at place j of that order takes the class-k probe j mod n_k as its donor, the control donor of
:func:`control_donors` and the j-th of k's random draws for each arm. What the model predicts decides which
recipients a test takes (those it does not already predict as k) but not what a recipient is given, so a recipient's
transferred images are the same at every epoch end.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor

from .discovery_transplant import interleaved
from .image_properties import PROPERTIES, ImageSeeds, PixelSpace, PropertyName, centred_angles

__all__ = ["ARMS", "MAX_KEPT_BYTES", "Arm", "ProbeTransfers", "control_donors", "separability"]

#: The most bytes of transferred images a :class:`ProbeTransfers` keeps (past it, new ones are computed each time):
#: 28 px RGB inputs take 9.4 kB each, so about 7,000 of them; a fit of the main config kept about 1,000.
MAX_KEPT_BYTES = 64 * 2**20
#: An arm of a transfer test: a class-k donor's statistics ("test"), or a third class's ("control").
Arm = Literal["test", "control"]
ARMS: tuple[Arm, ...] = get_args(Arm)


def separability(statistics: Tensor, classes: Tensor, target: int) -> float:
    """AUROC (ties one half) of minus the distance of each probe's statistics (P, S) to class ``target``'s mean
    (leave one out for its own probes), in units of the pooled within-class deviation, telling class
    ``target`` from the rest; NaN with fewer than 2 probes of the class or none of another.

    Example:
        >>> statistics = torch.tensor([[0.0], [0.1], [1.0], [1.2], [0.05]], dtype=torch.float64)
        >>> separability(statistics, torch.tensor([0, 0, 1, 1, 1]), 0)  # probe 4 lies on class 0's mean
        0.6666666666666666
    """
    inside = classes == target
    count = int(inside.sum())
    if count < 2 or count == len(classes):
        return math.nan
    labels, group = classes.unique(return_inverse=True)
    sizes = torch.bincount(group, minlength=len(labels)).to(statistics)
    means = statistics.new_zeros(len(labels), statistics.shape[1]).index_add_(0, group, statistics) / sizes[:, None]
    dof = int((sizes - 1).sum())
    spread = ((statistics - means[group]).square().sum(dim=0) / max(dof, 1)).sqrt()
    scaled = statistics / torch.where(spread > 0, spread, 1.0)
    total = scaled[inside].sum(dim=0)
    centres = total.expand_as(scaled).clone()
    centres[inside] = (total - scaled[inside]) / (count - 1)
    centres[~inside] = total / count
    score = -(scaled - centres).norm(dim=1)
    difference = score[inside][:, None] - score[~inside][None, :]
    return float(((difference > 0).double() + 0.5 * (difference == 0).double()).mean())


def control_donors(classes: Tensor, recipients: Tensor, target: int) -> Tensor:
    """(n,) the control donor (a position) of each recipient (n,), -1 where there is none: the i-th recipient takes
    the (i mod m)-th of the m probes of a third class, or (none: two classes) of its own class but itself.

    Example:
        >>> control_donors(torch.tensor([0, 0, 1, 2, 2]), torch.tensor([0, 1, 2]), 2).tolist()
        [2, 2, 0]
    """
    own = classes[recipients]
    third = (classes[None] != target) & (classes[None] != own[:, None])  # (n, P)
    positions = torch.arange(len(classes), device=classes.device)
    same = (classes[None] == own[:, None]) & (positions[None] != recipients[:, None])
    candidates = torch.where(third.any(dim=1, keepdim=True), third, same)
    counts = candidates.sum(dim=1)
    turn = torch.arange(len(recipients), device=classes.device) % counts.clamp(min=1) + 1
    chosen = (candidates & (candidates.cumsum(dim=1) == turn[:, None])).int().argmax(dim=1)
    return torch.where(counts > 0, chosen, -1)


class _Pairing:
    """Class k's donors per probe position: ``donor`` (P,) and ``control`` (P,) (-1: none; k's own probes have
    none), and each recipient's draws ``seeds`` (2, P) int64 on the CPU (per arm of :data:`ARMS`)."""

    def __init__(self, classes: Tensor, target: int, seed: int) -> None:
        donors = (classes == target).nonzero()[:, 0]
        order = interleaved((classes != target).nonzero()[:, 0], classes)
        size = len(classes)
        self.donor = torch.full((size,), -1, dtype=torch.long, device=classes.device)
        self.control = self.donor.clone()
        self.seeds = torch.zeros(2, size, dtype=torch.long)
        if len(donors) and len(order):
            self.donor[order] = donors[torch.arange(len(order), device=classes.device) % len(donors)]
            self.control[order] = control_donors(classes, order, target)
            generator = torch.Generator().manual_seed(seed * 1_000_003 + target)
            self.seeds[:, order.cpu()] = torch.randint(2**62, (2, len(order)), generator=generator)


class ProbeTransfers:
    """The probes' side of the property tests (module docstring): computed when first needed, then kept.

    Args:
        images: (P, C, H, W) the probes, normalised as the model expects.
        classes: (P,) their classes.
        space: their :class:`~.image_properties.PixelSpace`.
        seed: of the recipients' random draws (the noise transfer's).
        max_bytes: the most bytes of transferred images kept.

    Example:
        >>> from gradskip_lightning.core.normalisation import Normalisation
        >>> images = torch.rand(6, 3, 8, 8, generator=torch.Generator().manual_seed(0))
        >>> classes = torch.tensor([0, 0, 1, 1, 2, 2])
        >>> probes = ProbeTransfers(images, classes, PixelSpace.of(images, Normalisation((0.0,), (1.0,))), seed=0)
        >>> given = probes.transferred("noise", 0, "test", torch.tensor([2, 4]))  # class 0's noise on two recipients
        >>> torch.equal(given, probes.transferred("noise", 0, "test", torch.tensor([2, 4]))), probes.kept_bytes
        (True, 1536)
    """

    def __init__(
        self, images: Tensor, classes: Tensor, space: PixelSpace, seed: int, max_bytes: int = MAX_KEPT_BYTES
    ) -> None:
        self.images, self.classes, self.space, self.seed, self.max_bytes = images, classes, space, seed, max_bytes
        self.pixels = space.pixels(images.detach())
        self.kept_bytes = 0
        self._statistics: dict[PropertyName, Tensor] = {}
        self._separability: dict[tuple[PropertyName, int], float] = {}
        self._pairings: dict[int, _Pairing] = {}
        self._transferred: dict[tuple[PropertyName, int, Arm, int], Tensor] = {}

    def holds(self, images: Tensor, classes: Tensor, space: PixelSpace, seed: int) -> bool:
        """Whether it was built for these probes, pixel space and seed."""
        return (
            self.seed == seed
            and self.images.shape == images.shape
            and self.images.device == images.device
            and torch.equal(self.images, images)
            and torch.equal(self.classes, classes)
            and self.space.normalisation == space.normalisation
            and torch.equal(self.space.low, space.low)
            and torch.equal(self.space.high, space.high)
        )

    def statistics(self, name: PropertyName) -> Tensor:
        """(P, S) float64: property ``name``'s statistics of every probe."""
        if name not in self._statistics:
            self._statistics[name] = PROPERTIES[name].statistic(self.pixels)
        return self._statistics[name]

    def separability(self, name: PropertyName, target: int) -> float:
        """:func:`separability` of class ``target`` by property ``name``'s statistics (an angle's centred on the
        probes' circular mean: :func:`~.image_properties.centred_angles`)."""
        if (name, target) not in self._separability:
            statistics = self.statistics(name)
            if PROPERTIES[name].angle:
                statistics = centred_angles(statistics)
            self._separability[name, target] = separability(statistics, self.classes, target)
        return self._separability[name, target]

    def pairing(self, target: int) -> _Pairing:
        """Class ``target``'s donors and draws per recipient (module docstring)."""
        if target not in self._pairings:
            self._pairings[target] = _Pairing(self.classes, target, self.seed)
        return self._pairings[target]

    def transferred(self, name: PropertyName, target: int, arm: Arm, recipients: Tensor) -> Tensor:
        """(n, C, H, W) model inputs: the ``recipients`` (n,) positions given property ``name``'s statistics of their
        donors for class ``target`` in ``arm`` ("test": a class-``target`` probe; "control": a third class's),
        clamped to the pixel space, in the probes' dtype. A recipient without a donor in that arm is a ValueError."""
        pairing = self.pairing(target)
        donors = pairing.donor if arm == "test" else pairing.control
        orphans = recipients[donors[recipients] < 0]
        if len(orphans):
            raise ValueError(f"probes {orphans.tolist()} have no {arm} donor for class {target}")
        wanted = recipients.tolist()
        if not wanted:
            return self.images[:0]
        missing = [p for p in dict.fromkeys(wanted) if (name, target, arm, p) not in self._transferred]
        computed: dict[int, Tensor] = {}
        if missing:
            chosen = torch.tensor(missing, device=self.pixels.device)
            draws = ImageSeeds(pairing.seeds[ARMS.index(arm), chosen.cpu()])
            given = PROPERTIES[name].transfer(self.pixels[chosen], self.statistics(name)[donors[chosen]], draws)
            inputs = self.space.inputs(given, self.images.dtype)
            computed = dict(zip(missing, inputs, strict=True))
            if self.kept_bytes + inputs.nbytes <= self.max_bytes:
                self.kept_bytes += inputs.nbytes
                self._transferred.update({(name, target, arm, p): image for p, image in computed.items()})
        return torch.stack([computed[p] if p in computed else self._transferred[name, target, arm, p] for p in wanted])
