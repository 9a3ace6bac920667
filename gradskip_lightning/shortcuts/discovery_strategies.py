"""SpRAy-style strategies (Lapuschkin et al., Nat. Commun. 2019): spectral clustering of one class's maps.

The maps (n, h, w), each summing to 1, are flattened and compared by L1 distance (twice the share
of mass that differs, in [0, 2] whatever the grid). The affinity is a self-tuning Gaussian kernel
(Zelnik-Manor & Perona 2004): ``exp(-d_ij^2 / (s_i s_j))`` with ``s_i`` the distance from map i to
its ``neighbours``-th nearest neighbour, so it needs no global bandwidth, but at least
``min_distance``: maps closer than that are one strategy, not clusters of rounding noise.
The number of strategies is the argmax of the eigengap of the normalised graph Laplacian
``I - D^-1/2 A D^-1/2`` over 1..min(max_strategies, n - 1) (ties: the fewest), and the maps are
grouped by k-means (k-means++ seeding, restarts, the lowest inertia) on the row-normalised leading
eigenvectors (Ng, Jordan & Weiss 2001). The maps are put in a canonical (lexicographic) order first,
so the result does not depend on the order they come in (one process and a DDP gather agree).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

_KMEANS_ITERATIONS = 100


@dataclass(frozen=True)
class Strategies:
    """The strategies found in one class's maps.

    Attributes:
        assignments: (n,) int64 strategy of each map, in the order the maps were given.
        sizes: (S,) int64 maps per strategy, largest first (ties: the strategy of the lexicographically
            smallest map first); S = 0 for a class without maps.
        mean_maps: (S, h, w) float64 mean of each strategy's maps.
        eigenvalues: (m,) float64 smallest eigenvalues of the normalised Laplacian, ascending,
            m = min(n, max_strategies + 1): those the eigengap was read from.
    """

    assignments: Tensor
    sizes: Tensor
    mean_maps: Tensor
    eigenvalues: Tensor


def canonical_order(rows: Tensor) -> Tensor:
    """Permutation (n,) that sorts rows (n, N) lexicographically (stable: equal rows keep their order)."""
    order = torch.arange(rows.shape[0], device=rows.device)
    for column in range(rows.shape[1] - 1, -1, -1):
        order = order[torch.argsort(rows[order, column], stable=True)]
    return order


def self_tuning_affinity(points: Tensor, neighbours: int, min_distance: float) -> Tensor:
    """Affinity (n, n) float64 of points (n, N), n >= 2: the self-tuning Gaussian kernel on L1 distances.

    Each point's scale is its distance to its ``neighbours``-th nearest neighbour, at least ``min_distance`` (> 0).
    """
    distances = torch.cdist(points, points, p=1)
    k = min(neighbours, points.shape[0] - 1)
    scales = distances.sort(dim=1).values[:, k].clamp(min=min_distance)  # column 0 is the point itself
    return torch.exp(-distances.square() / (scales[:, None] * scales[None, :]))


def laplacian_spectrum(affinity: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (n,) ascending and eigenvectors (n, n) of the normalised Laplacian of ``affinity`` (n, n)."""
    scale = affinity.sum(dim=1).rsqrt()
    laplacian = torch.eye(len(affinity), dtype=affinity.dtype) - scale[:, None] * affinity * scale[None, :]
    return torch.linalg.eigh(laplacian)


def eigengap_count(eigenvalues: Tensor, max_count: int) -> int:
    """Number of clusters in 1..max_count whose following eigengap is the largest (ties: the fewest)."""
    gaps = eigenvalues[1 : max_count + 1] - eigenvalues[:max_count]
    return int(gaps.argmax()) + 1 if len(gaps) else 1


def kmeans(points: Tensor, count: int, *, restarts: int, generator: torch.Generator) -> Tensor:
    """Cluster labels (n,) in [0, count) of points (n, d): Lloyd's k-means from k-means++ seeds.

    The best of ``restarts`` runs (lowest inertia; ties: the first) is kept.
    """
    best, best_inertia = None, float("inf")
    for _ in range(restarts):
        centres = _kmeans_plus_plus(points, count, generator)
        labels = torch.cdist(points, centres).argmin(dim=1)
        for _ in range(_KMEANS_ITERATIONS):
            for cluster in range(count):
                members = labels == cluster
                if members.any():  # an emptied cluster keeps its centre
                    centres[cluster] = points[members].mean(dim=0)
            updated = torch.cdist(points, centres).argmin(dim=1)
            if torch.equal(updated, labels):
                break
            labels = updated
        inertia = (points - centres[labels]).square().sum().item()
        if inertia < best_inertia:
            best, best_inertia = labels, inertia
    assert best is not None
    return best


def _kmeans_plus_plus(points: Tensor, count: int, generator: torch.Generator) -> Tensor:
    first = int(torch.randint(len(points), (1,), generator=generator))
    centres = [points[first]]
    for _ in range(1, count):
        nearest = torch.cdist(points, torch.stack(centres)).min(dim=1).values.square()
        weights = nearest if nearest.sum() > 0 else torch.ones_like(nearest)
        centres.append(points[int(torch.multinomial(weights, 1, generator=generator))])
    return torch.stack(centres)


def find_strategies(
    maps: Tensor, *, neighbours: int, min_distance: float, max_strategies: int, restarts: int, seed: int
) -> Strategies:
    """SpRAy strategies (on the CPU) of one class's normalised maps (n, h, w); see the module docstring.

    Fewer than 3 maps form at most one strategy (an eigengap needs 2 eigenvalues after the count).

    Example:
        >>> left, right = torch.zeros(3, 1, 2), torch.zeros(3, 1, 2)
        >>> left[:, 0, 0] = right[:, 0, 1] = 1.0
        >>> maps = torch.cat([left, right[:2]])
        >>> found = find_strategies(maps, neighbours=1, min_distance=0.1, max_strategies=3, restarts=2, seed=0)
        >>> found.sizes.tolist(), found.assignments.tolist()
        ([3, 2], [0, 0, 0, 1, 1])
    """
    count, height, width = maps.shape
    flat = maps.double().cpu().flatten(1)
    if count == 0:
        empty = torch.zeros(0, dtype=torch.long)
        return Strategies(empty, empty, flat.new_zeros(0, height, width), flat.new_zeros(0))
    order = canonical_order(flat)
    points = flat[order]
    if count == 1:
        eigenvalues = flat.new_zeros(1)
        labels = torch.zeros(1, dtype=torch.long)
    else:
        eigenvalues, eigenvectors = laplacian_spectrum(self_tuning_affinity(points, neighbours, min_distance))
        eigenvalues = eigenvalues[: max_strategies + 1]
        clusters = eigengap_count(eigenvalues, min(max_strategies, count - 1))
        if clusters == 1:
            labels = torch.zeros(count, dtype=torch.long)
        else:
            embedding = torch.nn.functional.normalize(eigenvectors[:, :clusters], dim=1)
            generator = torch.Generator().manual_seed(seed)
            labels = kmeans(embedding, clusters, restarts=restarts, generator=generator)
    # relabel: largest first, ties by the first (lexicographically smallest) member; drop empty clusters
    sizes = torch.bincount(labels)
    first = torch.full_like(sizes, count).scatter_reduce(0, labels, torch.arange(count), "amin")
    kept = sorted((label for label in range(len(sizes)) if sizes[label]), key=lambda c: (-sizes[c], first[c]))
    relabel = torch.empty_like(sizes)
    relabel[kept] = torch.arange(len(kept))
    canonical = relabel[labels]
    assignments = torch.empty_like(canonical)
    assignments[order] = canonical
    new_sizes = torch.bincount(canonical, minlength=len(kept))
    sums = flat.new_zeros(len(kept), height * width).index_add_(0, canonical, points)
    mean_maps = (sums / new_sizes[:, None]).reshape(-1, height, width)
    return Strategies(assignments, new_sizes, mean_maps, eigenvalues)
