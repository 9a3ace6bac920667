"""Per-class summary of token maps (P, h, w): class means, hotspots, consistency and SpRAy strategies.

Each map's positive part is normalised to sum 1 (a map without positive relevance counts as
uniform); per class the mean of those maps, its hotspot (the fewest patches holding
``hotspot_share`` of the mean's mass), the consistency of the maps (mean pairwise Spearman
correlation) and their strategies (:mod:`.discovery_strategies`), as a function
(:func:`summarise_classes`) and as a metric over batches and processes (:class:`ClassMapSummary`).
The groups whose hotspot the transplant tests (:class:`MapGroup`) are each class, for a class
with two strategies or more each of its strategies (a subgroup that may use a shortcut the rest
of the class does not), and its shared-patch group (the maps that share a patch off the class's hotspot among
their most relevant: a stamp on part of a class that SpRAy does not separate). The knobs of the whole
discovery are one :class:`DiscoverySettings`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from gradskip_lightning.core.validation import check_class_targets, check_maps
from gradskip_lightning.metrics.drift import average_ranks

from .discovery_strategies import Strategies, find_strategies
from .discovery_transplant import MIN_TESTED_PROBES

_ROUNDING = 1e-9  # relative slack so a float64 cumulative mass that should reach the share does
_SETTING_TYPES: dict[str, tuple[type, ...]] = {
    "hotspot_share": (int, float),
    "neighbours": (int,),
    "min_strategy_distance": (int, float),
    "max_strategies": (int,),
    "kmeans_restarts": (int,),
    "alert_threshold": (int, float),
    "seed": (int,),
    "consistency": (bool,),
    "alpha": (int, float),
    "neighbour_relevance": (type(None), int, float),
    "top_patches": (type(None), int),
    "copy_permutations": (type(None), int),
}


@dataclass(frozen=True)
class DiscoverySettings:
    """Knobs of the discovery. ``hotspot_share``, ``alert_threshold`` and ``consistency`` were set by the
    discovery benchmark (docs/discovery.md); ``alpha`` and ``neighbour_relevance`` are
    the calibrated test's and the grown hotspot's (:mod:`~gradskip_lightning.shortcuts.discovery`); the
    others are the SpRAy clustering's.

    Attributes:
        hotspot_share: share of a class-mean map's mass its hotspot holds, in (0, 1].
        neighbours: k of the self-tuning affinity (distance to the k-th nearest map), >= 1.
        min_strategy_distance: L1 distance between normalised maps (twice the share of mass that differs)
            below which maps are one strategy: the floor of the affinity's scales, in (0, 2].
        max_strategies: most strategies the eigengap may find, >= 1.
        kmeans_restarts: k-means runs (the lowest inertia is kept), >= 1.
        alert_threshold: the effect-size floor: a class is flagged when a test's suspicion is at or above it
            and its p-value passes ``alpha``, in [0, 1].
        seed: of k-means and of the random placements of the transplant control.
        consistency: whether the suspicion score's map cues include the consistency (see
            :mod:`~gradskip_lightning.shortcuts.discovery`).
        alpha: family-wise error rate of the calibrated test, over every class and test of one run
            (:func:`~.multiplicity.gated_holm`), in (0, 1]; 1 leaves the floor alone. The discovery stage's
            property transplants use it too, over their own (class, property) tests (Holm).
        neighbour_relevance: a patch touching a hotspot (8-neighbourhood) joins its grown hotspot, tested
            beside it, when its mean relevance is at least this share of the hotspot's weakest patch's, in
            [0, 1] (0: every neighbour); None tests the hotspot alone.
        top_patches: each map's most relevant patches a class's shared-patch group reads (:class:`MapGroup`: the
            probes whose maps share a patch off the class's hotspot among theirs, a stamp on part of a class), >= 1;
            None (the default): no shared-patch groups. The copy group found every partial stamp they did, and a
            few probes of a class defocused on half of every class agree by chance at a shared patch (with 3: 3
            false alarms in 12 model-epochs of such controls; docs/discovery.md).
        copy_permutations: shufflings of the classes behind the copy test's p-value (the pixel sample's copied patch,
            :class:`~.discovery_pixels.CopiedPatch`: the smallest p-value is ``1 / (1 + copy_permutations)``), >= 1;
            None: no copy test.
    """

    hotspot_share: float = 0.1
    neighbours: int = 5
    min_strategy_distance: float = 0.1
    max_strategies: int = 4
    kmeans_restarts: int = 10
    alert_threshold: float = 0.15
    seed: int = 0
    consistency: bool = False
    alpha: float = 0.05
    neighbour_relevance: float | None = 0.5
    top_patches: int | None = None
    copy_permutations: int | None = 999

    def __post_init__(self) -> None:
        for name, kinds in _SETTING_TYPES.items():
            value = getattr(self, name)
            if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
                raise TypeError(f"{name} must be {kinds[-1].__name__}; got {type(value).__name__}")
        if not 0 < self.alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1]; got {self.alpha}")
        if self.neighbour_relevance is not None and not 0 <= self.neighbour_relevance <= 1:
            raise ValueError(f"neighbour_relevance must be None or in [0, 1]; got {self.neighbour_relevance}")
        if not 0 < self.hotspot_share <= 1:
            raise ValueError(f"hotspot_share must be in (0, 1]; got {self.hotspot_share}")
        if not 0 < self.min_strategy_distance <= 2:
            raise ValueError(f"min_strategy_distance must be in (0, 2]; got {self.min_strategy_distance}")
        if not 0 <= self.alert_threshold <= 1:
            raise ValueError(f"alert_threshold must be in [0, 1]; got {self.alert_threshold}")
        for name in ("neighbours", "max_strategies", "kmeans_restarts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
        for name in ("top_patches", "copy_permutations"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be None or >= 1; got {getattr(self, name)}")


@dataclass(frozen=True, eq=False)
class MapGroup:
    """Probes of one class whose hotspot is tested: every map of the class, one of its SpRAy strategies, its
    shared-patch group (the maps that share a patch off the class's hotspot among their ``top_patches`` most
    relevant ones, the patch most of them share: the probes that carry a stamp on part of a class, where too few for
    the class mean or SpRAy to single out), or its copy group (found by pixels, not maps: the probes that carry the
    pixel sample's copied patch, :class:`~.discovery_pixels.CopiedPatch`, a stamp no map points at).

    Attributes:
        label: the class.
        strategy: the strategy's index in ``ClassMaps.strategies[label]``; None for the whole class and a
            shared-patch group.
        members: (n,) int64 positions of the group's maps (the numbering the summary was given), ascending,
            on the CPU.
        share: n / the class's maps (1.0 for the whole class; NaN for a class without maps).
        mean_map: (h, w) float64 mean of the group's normalised maps (a copy group's: its patch, no maps chose it).
        hotspot: (h, w) bool its hotspot (the fewest patches holding ``hotspot_share`` of its mass; a shared-patch
            or copy group's: its patch).
        concentration: ``clamp(1 - hotspot patches / (hotspot_share * h * w), 0, 1)``; NaN without maps.
        consistency: mean pairwise Spearman correlation of the group's maps; NaN with fewer than 2 (and for a copy
            group).
        shared_patch: a shared-patch or copy group's patch (row, column); None for the others.
        copied: whether the group is a copy group.
    """

    label: int
    strategy: int | None
    members: Tensor
    share: float
    mean_map: Tensor
    hotspot: Tensor
    concentration: float
    consistency: float
    shared_patch: tuple[int, int] | None = None
    copied: bool = False

    @property
    def whole(self) -> bool:
        """Whether the group is the whole class."""
        return self.strategy is None and self.shared_patch is None

    def describe(self) -> str:
        """The group in words: ``"the class"``, ``"strategy 1 (40% of its probes)"``, ``"the probes whose maps share
        patch (0, 6) (40% of them)"``, ``"the probes whose pixels at patch (6, 6) are copies (50% of them)"``."""
        if self.strategy is not None:
            return f"strategy {self.strategy} ({self.share:.0%} of its probes)"
        if self.copied:
            return f"the probes whose pixels at patch {self.shared_patch} are copies ({self.share:.0%} of them)"
        if self.shared_patch is not None:
            return f"the probes whose maps share patch {self.shared_patch} ({self.share:.0%} of them)"
        return "the class"


@dataclass(frozen=True)
class ClassMaps:
    """Per-class summary of token maps, K classes on an (h, w) grid.

    Attributes:
        counts: (K,) int64 maps per class; 0 marks a class without maps.
        mean_maps: (K, h, w) float64 class means of the normalised maps (each sums to 1; zeros when empty).
        hotspots: (K, h, w) bool the fewest patches holding ``settings.hotspot_share`` of the mean's mass.
        boxes: (K, 4) int64 hotspot bounding boxes in patches: top, left, bottom, right (exclusive);
            zeros when empty.
        concentration: (K,) float64 ``clamp(1 - patches / (hotspot_share * h * w), 0, 1)``; NaN when empty.
        consistency: (K,) float64 mean pairwise Spearman correlation of the class's maps; NaN with < 2.
        strategies: K SpRAy :class:`Strategies` (on the CPU; assignments in the order of the maps' positions).
        groups: per class the :class:`MapGroup` s whose hotspots are tested: the whole class first, then
            each strategy when the class has two or more, then its shared-patch group when it has one.
        settings: those the summary was made with.
    """

    counts: Tensor
    mean_maps: Tensor
    hotspots: Tensor
    boxes: Tensor
    concentration: Tensor
    consistency: Tensor
    strategies: tuple[Strategies, ...]
    groups: tuple[tuple[MapGroup, ...], ...]
    settings: DiscoverySettings


def normalise_maps(maps: Tensor) -> Tensor:
    """(P, h, w) float64: each map's positive part divided by its sum; uniform where nothing is positive.

    Example:
        >>> normalise_maps(torch.tensor([[[3.0, -1.0], [1.0, 0.0]], [[0.0, -2.0], [0.0, 0.0]]]))
        tensor([[[0.7500, 0.0000],
                 [0.2500, 0.0000]],
        <BLANKLINE>
                [[0.2500, 0.2500],
                 [0.2500, 0.2500]]], dtype=torch.float64)
    """
    positive = maps.double().clamp(min=0)
    total = positive.sum(dim=(1, 2), keepdim=True)
    return torch.where(total > 0, positive / total, 1 / maps[0].numel())


def _class_sums_update(maps: Tensor, classes: Tensor, num_classes: int) -> tuple[Tensor, Tensor, Tensor]:
    """Normalised maps (P, h, w), their class sums (K, h, w) and counts (K,), from maps (P, h, w) of classes (P,)."""
    normalised, classes = normalise_maps(maps), classes.to(maps.device)
    sums = normalised.new_zeros(num_classes, *maps.shape[1:]).index_add_(0, classes, normalised)
    return normalised, sums, torch.bincount(classes, minlength=num_classes)


def hotspots(mean_maps: Tensor, share: float) -> tuple[Tensor, Tensor]:
    """Hotspots (K, h, w) bool and their boxes (K, 4) int64 (top, left, bottom, right; exclusive) of maps (K, h, w).

    A hotspot is the fewest patches whose mass reaches ``share`` of the map's (ties: row-major order);
    empty (box of zeros) for a map without mass.

    Example:
        >>> masks, boxes = hotspots(torch.tensor([[[0.1, 0.6], [0.1, 0.2]]]), 0.75)
        >>> masks[0].tolist(), boxes.tolist()
        ([[False, True], [False, True]], [[0, 1, 2, 2]])
    """
    count, height, width = mean_maps.shape
    flat = mean_maps.flatten(1)
    order = torch.argsort(flat, dim=1, descending=True, stable=True)
    mass = flat.gather(1, order).cumsum(dim=1)
    needed = (mass < share * mass[:, -1:] * (1 - _ROUNDING)).sum(dim=1) + 1
    needed = needed.masked_fill(mass[:, -1] <= 0, 0)
    masks = (torch.argsort(order, dim=1) < needed[:, None]).reshape(count, height, width)
    boxes = torch.zeros(count, 4, dtype=torch.long, device=mean_maps.device)
    for axis, (start, stop) in enumerate(((0, 2), (1, 3))):
        occupied = masks.any(dim=2 - axis)  # (K, h) rows, then (K, w) columns
        boxes[:, start] = occupied.int().argmax(dim=1)
        boxes[:, stop] = occupied.shape[1] - occupied.flip(1).int().argmax(dim=1)
    return masks, boxes.masked_fill(~masks.flatten(1).any(1, keepdim=True), 0)


def grown_hotspot(hotspot: Tensor, mean_map: Tensor, relevance: float) -> Tensor:
    """(h, w) bool: ``hotspot`` (h, w) bool plus each patch touching it (8-neighbourhood) whose value in
    ``mean_map`` (h, w) is at least ``relevance`` x the hotspot's weakest patch's (an artefact across a patch
    boundary: the hotspot may hold one side of it only).

    Example:
        >>> mean_map = torch.tensor([[0.0, 0.5, 0.3], [0.1, 0.0, 0.0], [0.0, 0.0, 0.1]])
        >>> grown_hotspot(mean_map == 0.5, mean_map, 0.5).int().tolist()
        [[0, 1, 1], [0, 0, 0], [0, 0, 0]]
    """
    if not hotspot.any():
        return hotspot
    ring = torch.nn.functional.max_pool2d(hotspot[None, None].double(), 3, stride=1, padding=1)[0, 0] > 0
    return hotspot | (ring & (mean_map >= relevance * mean_map[hotspot].min()))


def consistency(maps: Tensor) -> Tensor:
    """Mean pairwise Spearman correlation (float64 scalar) of maps (n, h, w); NaN for n < 2.

    Pairs with a constant map (no ranking) are left out. On :func:`normalise_maps` output the negative
    relevance ties at 0.

    Example:
        >>> maps = torch.arange(8.0).reshape(2, 2, 2)
        >>> consistency(maps), consistency(torch.stack([maps[0], -maps[0]]))
        (tensor(1., dtype=torch.float64), tensor(-1., dtype=torch.float64))
    """
    ranks = average_ranks(maps.flatten(1))
    centred = ranks - ranks.mean(dim=1, keepdim=True)
    unit = centred / centred.norm(dim=1, keepdim=True)  # NaN rows for constant maps
    upper = torch.triu_indices(len(maps), len(maps), offset=1, device=maps.device)
    return (unit @ unit.T)[upper[0], upper[1]].nanmean()


def concentration(masks: Tensor, share: float) -> Tensor:
    """(K,) float64 ``clamp(1 - patches / (share * h * w), 0, 1)`` of hotspots (K, h, w) bool.

    Example:
        >>> concentration(torch.eye(4, dtype=torch.bool)[None], 0.5).tolist()
        [0.5]
    """
    patches = masks.flatten(1).sum(dim=1).double()
    return (1 - patches / (share * masks[0].numel())).clamp(0, 1)


def _strategy_groups(
    label: int, found: Strategies, maps: Tensor, positions: Tensor, settings: DiscoverySettings
) -> list[MapGroup]:
    """One :class:`MapGroup` per strategy of class ``label`` (none with fewer than 2), from its maps (n, h, w) at
    ``positions`` (n,) in the order of ``found.assignments``."""
    if len(found.sizes) < 2:
        return []
    masks, _ = hotspots(found.mean_maps, settings.hotspot_share)
    cues = concentration(masks, settings.hotspot_share)
    assignments = found.assignments.to(maps.device)
    return [
        MapGroup(
            label=label,
            strategy=strategy,
            members=positions[assignments == strategy].cpu(),
            share=int(size) / len(maps),
            mean_map=found.mean_maps[strategy],
            hotspot=masks[strategy],
            concentration=float(cues[strategy]),
            consistency=float(consistency(maps[assignments == strategy])),
        )
        for strategy, size in enumerate(found.sizes.tolist())
    ]


def _shared_patch_group(
    label: int, maps: Tensor, positions: Tensor, hotspot: Tensor, settings: DiscoverySettings
) -> list[MapGroup]:
    """Class ``label``'s shared-patch group (:class:`MapGroup`) from its normalised maps (n, h, w) at ``positions``
    (n,) and its hotspot (h, w): the patch off the hotspot that the most maps have among their
    ``settings.top_patches`` most relevant (ties: the most relevance there), and those maps; none with fewer than
    :data:`~.discovery_transplant.MIN_TESTED_PROBES` such maps, or ``top_patches`` None."""
    if settings.top_patches is None or len(maps) < MIN_TESTED_PROBES:
        return []
    flat = maps.flatten(1)
    top = flat.topk(min(settings.top_patches, flat.shape[1]), dim=1).indices
    hits = torch.zeros_like(flat, dtype=torch.bool).scatter_(1, top, True) & ~hotspot.flatten().to(flat.device)[None]
    sizes = hits.sum(dim=0)
    best = int((sizes + (flat * hits).sum(dim=0) / (len(maps) + 1)).argmax())  # mass < 1 per map: size decides
    chosen = hits[:, best]
    if int(sizes[best]) < MIN_TESTED_PROBES:
        return []
    region = torch.zeros_like(hotspot, dtype=torch.bool).flatten()
    region[best] = True
    region = region.reshape(hotspot.shape)
    return [
        MapGroup(
            label=label,
            strategy=None,
            members=positions[chosen.to(positions.device)].cpu(),
            share=int(sizes[best]) / len(maps),
            mean_map=maps[chosen].mean(dim=0),
            hotspot=region,
            concentration=float(concentration(region[None], settings.hotspot_share)[0]),
            consistency=float(consistency(maps[chosen])),
            shared_patch=divmod(best, hotspot.shape[1]),
        )
    ]


def _summary_compute(
    sums: Tensor, counts: Tensor, normalised: Tensor, classes: Tensor, positions: Tensor, settings: DiscoverySettings
) -> ClassMaps:
    """The summary from class sums (K, h, w), counts (K,) and every normalised map (P, h, w) with its class (P,)
    and position (P,) (the maps are put in the order of their positions first: one process and a DDP gather agree)."""
    order = torch.argsort(positions, stable=True)
    normalised, classes, positions = normalised[order], classes[order], positions[order]
    mean_maps = sums / counts.clamp(min=1)[:, None, None]
    masks, boxes = hotspots(mean_maps, settings.hotspot_share)
    cues = concentration(masks, settings.hotspot_share).masked_fill(counts == 0, math.nan)
    per_class = [normalised[classes == label] for label in range(len(counts))]
    strategies = tuple(
        find_strategies(
            maps,
            neighbours=settings.neighbours,
            min_distance=settings.min_strategy_distance,
            max_strategies=settings.max_strategies,
            restarts=settings.kmeans_restarts,
            seed=settings.seed,
        )
        for maps in per_class
    )
    agreement = torch.stack([consistency(maps) for maps in per_class])
    groups = []
    for label, maps in enumerate(per_class):
        members = positions[classes == label]
        whole = MapGroup(
            label=label,
            strategy=None,
            members=members.cpu(),
            share=1.0 if len(maps) else math.nan,
            mean_map=mean_maps[label],
            hotspot=masks[label],
            concentration=float(cues[label]),
            consistency=float(agreement[label]),
        )
        groups.append((
            whole,
            *_strategy_groups(label, strategies[label], maps, members, settings),
            *_shared_patch_group(label, maps, members, masks[label], settings),
        ))  # fmt: skip
    return ClassMaps(
        counts=counts,
        mean_maps=mean_maps,
        hotspots=masks,
        boxes=boxes,
        concentration=cues,
        consistency=agreement,
        strategies=strategies,
        groups=tuple(groups),
        settings=settings,
    )


def summarise_classes(
    maps: Tensor,
    classes: Tensor,
    num_classes: int,
    settings: DiscoverySettings | None = None,
    positions: Tensor | None = None,
) -> ClassMaps:
    """Per-class summary (see :class:`ClassMaps`) of token maps (P, h, w) of probes of classes (P,) at
    ``positions`` (P,) distinct ints (default 0..P-1: the maps are the probes, in order).

    Example:
        >>> maps = torch.full((4, 3, 3), 0.1)
        >>> maps[:2, 0, 0] = 5.0  # class 1: a stamp in the corner
        >>> summary = summarise_classes(maps, torch.tensor([1, 1, 0, 0]), 3)
        >>> summary.counts.tolist(), summary.hotspots[1, 0, 0].item(), summary.boxes[1].tolist()
        ([2, 2, 0], True, [0, 0, 1, 1])
        >>> [s.sizes.tolist() for s in summary.strategies], summary.concentration[2].isnan().item()
        ([[2], [2], []], True)
    """
    check_maps(maps)
    check_class_targets(classes, len(maps), num_classes)
    positions = _positions(positions, len(maps), 0).to(maps.device)
    normalised, sums, counts = _class_sums_update(maps, classes, num_classes)
    return _summary_compute(
        sums, counts, normalised, classes.to(maps.device), positions, settings or DiscoverySettings()
    )


def _positions(positions: Tensor | None, count: int, start: int) -> Tensor:
    """(count,) int64 positions: ``positions`` checked, or start..start+count-1."""
    if positions is None:
        return torch.arange(start, start + count)
    if not isinstance(positions, Tensor) or positions.dtype != torch.long or positions.shape != (count,):
        raise ValueError(
            f"positions must be a ({count},) int64 tensor, one per map; got "
            f"{tuple(positions.shape) if isinstance(positions, Tensor) else type(positions).__name__}"
        )
    return positions


class _Box:
    """Carries a :class:`ClassMaps` through torchmetrics' compute wrapper untouched."""

    __slots__ = ("value",)

    def __init__(self, value: ClassMaps) -> None:
        self.value = value


class ClassMapSummary(Metric):
    """:func:`summarise_classes` over batches and processes.

    States: per-class sums of the normalised maps (K, h, w) and counts (K,), reduced with "sum" (the
    mean maps and hotspots), and every normalised map with its class and position, "cat" (consistency,
    strategies and the groups' members: they need each map). The maps are put in the order of their
    positions before use, so a DDP sync gives one process's result on the union of the data when each
    map's ``positions`` are given (the probe it explains); without them a map's position is its index
    among this process's maps, which repeats across processes (:func:`~.discovery.discover` refuses that).

    Example:
        >>> metric = ClassMapSummary(num_classes=2, grid_size=(2, 2))
        >>> metric.update(torch.tensor([[[1.0, 0.0], [0.0, 0.0]]]), torch.tensor([1]))
        >>> metric.update(torch.tensor([[[3.0, 1.0], [0.0, 0.0]]]), torch.tensor([1]))
        >>> metric.compute().mean_maps[1]
        tensor([[0.8750, 0.1250],
                [0.0000, 0.0000]], dtype=torch.float64)
    """

    is_differentiable = False
    full_state_update = False
    map_sums: Tensor
    counts: Tensor
    maps: list[Tensor]
    classes: list[Tensor]
    positions: list[Tensor]

    def __init__(
        self,
        num_classes: int,
        grid_size: tuple[int, int],
        *,
        settings: DiscoverySettings | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(num_classes, bool) or not isinstance(num_classes, int):
            raise TypeError(f"num_classes must be an int; got {type(num_classes).__name__}")
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1; got {num_classes}")
        if len(grid_size) != 2 or min(grid_size) < 1:
            raise ValueError(f"grid_size must be (h, w) patches, both >= 1; got {grid_size!r}")
        self.num_classes, self.grid_size = num_classes, (int(grid_size[0]), int(grid_size[1]))
        self.settings = settings or DiscoverySettings()
        sums = torch.zeros(num_classes, *self.grid_size, dtype=torch.float64)
        self.add_state("map_sums", sums, dist_reduce_fx="sum")
        self.add_state("counts", torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("maps", [], dist_reduce_fx="cat")
        self.add_state("classes", [], dist_reduce_fx="cat")
        self.add_state("positions", [], dist_reduce_fx="cat")

    def update(self, maps: Tensor, classes: Tensor, positions: Tensor | None = None) -> None:
        """Add token maps (B, h, w) on the metric's grid, of probes of classes (B,) at ``positions`` (B,) int64
        (default: the next indices among this process's maps)."""
        check_maps(maps)
        if tuple(maps.shape[1:]) != self.grid_size:
            raise ValueError(
                f"maps must have shape (B, {self.grid_size[0]}, {self.grid_size[1]}); got {tuple(maps.shape)}"
            )
        check_class_targets(classes, len(maps), self.num_classes)
        positions = _positions(positions, len(maps), sum(len(p) for p in self.positions))
        normalised, sums, counts = _class_sums_update(maps, classes, self.num_classes)
        self.map_sums += sums.to(self.map_sums.device)
        self.counts += counts.to(self.counts.device)
        self.maps.append(normalised)
        self.classes.append(classes.to(normalised.device))
        self.positions.append(positions.to(normalised.device))

    def compute(self) -> ClassMaps:
        """The :class:`ClassMaps` of every map seen (NaN consistency and no strategies before any)."""
        device = self.map_sums.device
        maps = dim_zero_cat(self.maps) if len(self.maps) else self.map_sums.new_zeros(0, *self.grid_size)
        classes = dim_zero_cat(self.classes) if len(self.classes) else self.counts.new_zeros(0)
        positions = dim_zero_cat(self.positions) if len(self.positions) else self.counts.new_zeros(0)
        return _summary_compute(
            self.map_sums, self.counts.clone(), maps.to(device), classes.to(device), positions.to(device), self.settings
        )

    def _wrap_compute(self, compute: Callable[[], ClassMaps]) -> Callable[[], ClassMaps]:
        # torchmetrics rebuilds what compute returns field by field (to squeeze and clone tensors), which a
        # frozen dataclass refuses: the summary passes its wrapper (sync, cache) in an opaque box
        wrapped = super()._wrap_compute(lambda: _Box(compute()))

        @functools.wraps(compute)
        def unboxed() -> ClassMaps:
            return wrapped().value

        return unboxed
