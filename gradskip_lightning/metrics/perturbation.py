"""Patch ranking, perturbation baselines, the batched perturbed-forward runner and the metrics' base class.

Shared by insertion/deletion and the faithfulness violation test (their base: :class:`PerturbationMetric`).
A perturbation is described at patch level: a bool mask (B, S, h, w) says, for each image and each
of S perturbation steps, which patches are taken from ``fill`` instead of ``base``. The runner
builds the B * S images chunk by chunk (``batch_size`` images per forward, by default
:func:`default_batch_size` of the device) so memory stays bounded; a step whose mask is all False
(the image ``base``) or all True (``fill``) is not forwarded when its score is given
(``base_scores`` / ``fill_scores``), so a caller that knows those scores (the clean image's, from the
explain forward; a start image shared by several methods) forwards no image twice.
A classifier's score is the target's probability; a segmentation model's (``regions`` given) is the
mean of the target's logit over the object's region on its logits grid.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, ClassVar, Literal, Union

import torch
import torchvision.transforms.v2.functional as TF
from torch import Tensor, nn
from torchmetrics import Metric

from gradskip_lightning.core.validation import (
    as_patch_size,
    check_choice,
    check_class_targets,
    check_int,
    check_regions,
)

Baseline = Union[str, Tensor]
"""``"zeros"`` (zeros of the normalised input: the mean colour), ``"blur"`` or a tensor broadcastable to the images."""

Activation = Literal["softmax", "sigmoid"]
"""How logits become the scored probability: ``"softmax"`` over classes (multi-class) or each
class's own ``"sigmoid"`` (multi-label)."""

ACTIVATIONS: tuple[str, ...] = ("softmax", "sigmoid")

Precision = Literal["full", "bfloat16"]
"""The perturbed forwards' precision: ``"full"`` (the model's dtype) or ``"bfloat16"`` autocast (where
the device supports it; see docs/results/cost.md for the measured score change)."""

PRECISIONS: tuple[str, ...] = ("full", "bfloat16")

#: Perturbed images per forward by device type, measured with ``python -m benchmarks metrics``
#: (docs/results/cost.md): on CPU larger batches fall out of the cache (0.57 ms per image at 64 against
#: 0.85 at 256 for the main config's ViT); accelerators want large batches.
DEFAULT_BATCH_SIZES: dict[str, int] = {"cpu": 64, "cuda": 1024, "mps": 256}

PatchSize = Union[int, tuple[int, int]]
"""Pixels per patch: one side, or (ph, pw); the explainer's ``patch_size`` (the model's token grid)."""


def default_batch_size(device: torch.device | str) -> int:
    """Perturbed images per forward on ``device``: :data:`DEFAULT_BATCH_SIZES` (256 for other types).

    Example:
        >>> default_batch_size("cpu"), default_batch_size(torch.device("cuda", 1))
        (64, 1024)
    """
    return DEFAULT_BATCH_SIZES.get(torch.device(device).type, 256)


def resolve_batch_size(batch_size: int | None, device: torch.device | str) -> int:
    """``batch_size`` checked, or :func:`default_batch_size` of ``device`` when None."""
    if batch_size is None:
        return default_batch_size(device)
    check_int(batch_size, "batch_size")
    return batch_size


def autocast(device: torch.device, precision: Precision) -> Any:
    """The context of the perturbed forwards: nothing for ``"full"``, bfloat16 autocast otherwise
    (ValueError where the device type has no autocast)."""
    check_choice(precision, PRECISIONS, "precision")
    if precision == "full":
        return contextlib.nullcontext()
    if not torch.amp.is_autocast_available(device.type):
        raise ValueError(f'precision="bfloat16" needs autocast, which {device.type} does not support')
    return torch.autocast(device.type, dtype=torch.bfloat16)


def class_probabilities(logits: Tensor, targets: Tensor, activation: Activation = "softmax") -> Tensor:
    """Probability (n,) of each row's target class from logits (n, num_classes) (ValueError otherwise).

    Example:
        >>> logits = torch.tensor([[2.0, 0.0], [2.0, 0.0]])
        >>> class_probabilities(logits, torch.tensor([0, 1])).round(decimals=3)
        tensor([0.8810, 0.1190])
        >>> class_probabilities(logits, torch.tensor([0, 1]), "sigmoid").round(decimals=3)
        tensor([0.8810, 0.5000])
    """
    check_choice(activation, ACTIVATIONS, "activation")
    if not isinstance(logits, Tensor) or logits.ndim != 2 or logits.shape[0] != len(targets):
        got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"model must return logits (n, num_classes) for n = {len(targets)} images, got {got}")
    check_class_targets(targets, len(targets), logits.shape[1])
    probabilities = logits.softmax(dim=1) if activation == "softmax" else logits.sigmoid()
    return probabilities.gather(1, targets[:, None])[:, 0]


def region_scores(logits: Tensor, targets: Tensor, regions: Tensor) -> Tensor:
    """Mean (n,) over each row's region of its target class's logit, from logits (n, K, h, w).

    The score of a segmentation model for one object: no activation, in logit units.

    Args:
        logits: per-pixel class logits (n, K, h, w).
        targets: classes (n,).
        regions: bool (n, h, w) on the logits grid, at least one pixel each.

    Example:
        >>> logits = torch.arange(8.0).reshape(1, 2, 2, 2)  # class 1: [[4, 5], [6, 7]]
        >>> region_scores(logits, torch.tensor([1]), torch.tensor([[[True, False], [True, False]]]))
        tensor([5.])
    """
    check_regions(regions, len(targets))
    if not isinstance(logits, Tensor) or logits.ndim != 4 or logits.shape[:1] + logits.shape[2:] != regions.shape:
        got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(
            f"with regions (n, h, w) = {tuple(regions.shape)} the model must return logits (n, K, h, w) "
            f"on the same grid, got {got}"
        )
    check_class_targets(targets, len(targets), logits.shape[1])
    target_logits = logits[torch.arange(len(targets), device=logits.device), targets.to(logits.device)]
    regions = regions.to(logits.device)
    inside = torch.where(regions, target_logits, torch.zeros((), dtype=logits.dtype, device=logits.device))
    return inside.sum(dim=(1, 2)) / regions.sum(dim=(1, 2))


def target_scores(
    logits: Tensor, targets: Tensor, activation: Activation = "softmax", regions: Tensor | None = None
) -> Tensor:
    """Each row's score (n,): :func:`class_probabilities` of logits (n, K), or with ``regions``
    (n, h, w) :func:`region_scores` of logits (n, K, h, w); half-precision logits are scored in float32."""
    if isinstance(logits, Tensor) and logits.dtype in (torch.bfloat16, torch.float16):
        logits = logits.float()
    if regions is None:
        return class_probabilities(logits, targets, activation)
    return region_scores(logits, targets, regions)


def forward_logits(
    model: Callable[[Tensor], Tensor], images: Tensor, *, batch_size: int | None = None, precision: Precision = "full"
) -> Tensor:
    """The model's logits (n, ...) on images (n, C, H, W), ``batch_size`` at a time under no_grad."""
    batch_size = resolve_batch_size(batch_size, images.device)
    with torch.no_grad(), autocast(images.device, precision):
        logits = [model(images[start : start + batch_size]) for start in range(0, len(images), batch_size)]
    return torch.cat([x.float() if x.dtype in (torch.bfloat16, torch.float16) else x for x in logits])


class CountingModel(nn.Module):
    """Wraps a classifier and counts its forward calls and the images they carried.

    Example:
        >>> from gradskip_lightning.metrics import insertion_deletion
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 4)).eval()
        >>> images, maps = torch.randn(2, 3, 16, 16), torch.rand(2, 16, 16)
        >>> counted = CountingModel(model)
        >>> scores = insertion_deletion(counted, images, torch.tensor([0, 3]), maps, patch_size=8, steps=4)
        >>> counted.calls, counted.images  # the starts, one zeros image, the clean ones; 2 x 2 x (K - 1) inner steps
        (4, 17)
    """

    def __init__(self, model: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.model = model
        self.calls = 0
        self.images = 0

    def forward(self, images: Tensor) -> Tensor:
        self.calls += 1
        self.images += images.shape[0]
        return self.model(images)


def patch_relevance(maps: Tensor, patch_size: tuple[int, int]) -> Tensor:
    """Sum of each (B, H, W) map over each patch: (B, P) float64, patches in row-major order."""
    batch, height, width = maps.shape
    ph, pw = patch_size
    grid = maps.double().reshape(batch, height // ph, ph, width // pw, pw)
    return grid.sum(dim=(2, 4)).reshape(batch, -1)


def rank_patches(relevance: Tensor) -> Tensor:
    """Patch indices (B, P), highest relevance first; ties keep row-major order (stable sort)."""
    return torch.argsort(relevance, dim=1, descending=True, stable=True)


def ranked_masks(order: Tensor, counts: Tensor) -> Tensor:
    """Masks (B, S, P) bool: step s selects the first ``counts[s]`` patches of ``order`` (B, P)."""
    position = torch.argsort(order, dim=1)  # rank of each patch
    return position[:, None, :] < counts.to(order.device)[None, :, None]


def gaussian_blur(images: Tensor, kernel_size: int | None = None, sigma: float | None = None) -> Tensor:
    """Gaussian-blurred copy of images (B, C, H, W), reflect-padded.

    Defaults follow Petsiuk et al.: kernel 11 and sigma 5 at 224 px, scaled with each side
    (sigma = 5 * side / 224, kernel = 2 * round(sigma) + 1, at least 3).
    """
    sizes = images.shape[-2:]
    sigmas = [sigma if sigma is not None else 5.0 * side / 224 for side in sizes]
    kernels = [kernel_size if kernel_size is not None else max(3, 2 * round(s) + 1) for s in sigmas]
    kernels = [min(k, 2 * ((side - 1) // 2) + 1) for k, side in zip(kernels, sizes)]  # reflect pad < side
    # torchvision expects (x, y) order: width first.
    return TF.gaussian_blur(images, kernel_size=kernels[::-1], sigma=sigmas[::-1])


def make_baseline(images: Tensor, baseline: Baseline) -> Tensor:
    """The replacement images (B, C, H, W) for ``baseline``: "zeros", "blur" or a broadcastable tensor."""
    if isinstance(baseline, Tensor):
        try:
            return torch.broadcast_to(baseline.to(images), images.shape)
        except RuntimeError as err:
            raise ValueError(
                f"baseline tensor {tuple(baseline.shape)} does not broadcast to images {tuple(images.shape)}"
            ) from err
    if not isinstance(baseline, str):
        raise TypeError(f'baseline must be "zeros", "blur" or a tensor, got {type(baseline).__name__}')
    if baseline == "zeros":
        return torch.zeros_like(images)
    if baseline == "blur":
        return gaussian_blur(images)
    raise ValueError(f'baseline must be "zeros", "blur" or a tensor, got {baseline!r}')


def step_counts(num_patches: int, steps: int) -> Tensor:
    """Patches perturbed at each of the K + 1 steps (K + 1,): round(k * P / K), halves rounded up."""
    check_int(steps, "steps", high=num_patches, unit=" (one per patch at most)")
    return torch.tensor([math.floor(k * num_patches / steps + 0.5) for k in range(steps + 1)])


def perturbed_probabilities(
    model: Callable[[Tensor], Tensor],
    base: Tensor,
    fill: Tensor,
    masks: Tensor,
    targets: Tensor,
    *,
    batch_size: int | None = None,
    activation: Activation = "softmax",
    regions: Tensor | None = None,
    base_scores: Tensor | None = None,
    fill_scores: Tensor | None = None,
    precision: Precision = "full",
) -> Tensor:
    """Score of each target class on every perturbed image: its probability, or its mean region logit.

    Without ``regions`` the score is the target's softmax or sigmoid probability; with ``regions``
    (segmentation) it is :func:`region_scores`, the mean of the target's logit over the image's
    region (logit units, ``activation`` unused).

    Args:
        model: images (n, C, H, W) -> logits (n, num_classes), or (n, K, h, w) with ``regions``;
            called under ``torch.no_grad()`` in whatever mode it is in (pass an eval-mode model).
        base: images (B, C, H, W) that unselected patches come from.
        fill: images (B, C, H, W) that selected patches come from.
        masks: patch selections (B, S, h, w) bool; patches are (H / h) x (W / w) pixels.
        targets: classes (B,).
        batch_size: images per forward call; None: :func:`default_batch_size` of the images' device.
        activation: "softmax" (multi-class) or "sigmoid" (multi-label), see :data:`Activation`.
        regions: None, or bool (B, h, w) on the model's logits grid: the pixels each image's score
            averages over.
        base_scores: None, or the known scores (B,) of ``base``: steps selecting no patch take them
            instead of a forward.
        fill_scores: None, or the known scores (B,) of ``fill``: steps selecting every patch take
            them instead of a forward.
        precision: "full", or "bfloat16" autocast for the forwards (:data:`Precision`).

    Returns:
        Scores (B, S) float32 (float64 for a float64 model): probabilities, or mean logits with ``regions``.
    """
    check_choice(activation, ACTIVATIONS, "activation")
    check_regions(regions, base.shape[0])
    batch_size = resolve_batch_size(batch_size, base.device)
    batch, steps, grid_h, grid_w = masks.shape
    ph, pw = base.shape[-2] // grid_h, base.shape[-1] // grid_w
    flat = masks.reshape(batch * steps, grid_h, grid_w).to(base.device)
    targets = targets.to(base.device)
    known = torch.zeros(batch * steps, dtype=torch.bool, device=base.device)
    values: Tensor | None = None
    for given, chosen in ((base_scores, ~flat.flatten(1).any(dim=1)), (fill_scores, flat.flatten(1).all(dim=1))):
        if given is None:
            continue
        given = given.to(base.device).reshape(batch)
        values = torch.zeros(batch * steps, dtype=given.dtype, device=base.device) if values is None else values
        chosen = chosen & ~known
        values[chosen] = given.repeat_interleave(steps)[chosen].to(values.dtype)
        known |= chosen
    todo = (~known).nonzero()[:, 0]
    chunks = []
    with torch.no_grad(), autocast(base.device, precision):
        for start in range(0, len(todo), batch_size):
            index = todo[start : start + batch_size]
            sample = index // steps
            pixel_mask = flat[index].repeat_interleave(ph, dim=1).repeat_interleave(pw, dim=2)
            logits = model(torch.where(pixel_mask[:, None], fill[sample], base[sample]))
            chunks.append(
                target_scores(logits, targets[sample], activation, None if regions is None else regions[sample])
            )
    if values is None:
        return torch.cat(chunks).reshape(batch, steps)
    computed = torch.cat(chunks) if chunks else values[:0]
    result = torch.zeros(batch * steps, dtype=torch.promote_types(values.dtype, computed.dtype), device=base.device)
    result[known] = values[known].to(result.dtype)
    result[todo] = computed.to(result.dtype)
    return result.reshape(batch, steps)


class PerturbationMetric(Metric):
    """Base of the perturbation metrics: per-image scores of each batch summed over images, with their count.

    The model (and, for a segmentation model, ``regions``) is passed to ``update``, not held: the
    metric never moves, saves or syncs it. Every state is reduced with "sum", so the synced
    figures equal one process's over the union of the data. A subclass names its sums and their
    dtypes in :attr:`sums`, returns a batch's per-image (B,) values for each from :meth:`_scores`
    (with :attr:`options`, the patch size, batch size, activation and its own options) and
    computes its result from :meth:`_mean`.
    """

    is_differentiable = False
    full_state_update = False
    sums: ClassVar[dict[str, torch.dtype]]
    """State name -> dtype of each per-image score summed over images."""

    def __init__(
        self,
        *,
        patch_size: PatchSize,
        batch_size: int | None,
        activation: Activation,
        options: dict[str, Any],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if batch_size is not None:
            check_int(batch_size, "batch_size")
        check_choice(activation, ACTIVATIONS, "activation")
        self.options = dict(
            patch_size=as_patch_size(patch_size), batch_size=batch_size, activation=activation, **options
        )
        for name, dtype in self.sums.items():
            self.add_state(name, torch.zeros((), dtype=dtype), dist_reduce_fx="sum")
        self.count: Tensor  # long scalar, the images seen
        self.add_state("count", torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def _scores(
        self, model: Callable[[Tensor], Tensor], images: Tensor, targets: Tensor, maps: Tensor, regions: Tensor | None
    ) -> dict[str, Tensor]:
        """Per-image values (B,) of a batch for each state of :attr:`sums`."""
        raise NotImplementedError

    def update(
        self,
        model: Callable[[Tensor], Tensor],
        images: Tensor,
        targets: Tensor,
        maps: Tensor,
        regions: Tensor | None = None,
    ) -> None:
        """Score a batch: images (B, C, H, W), targets (B,), maps (B, H, W), regions None or (B, h, w) bool."""
        for name, scores in self._scores(model, images, targets, maps, regions).items():
            state = getattr(self, name)
            state += scores.sum().to(state)
        self.count += len(images)

    def _mean(self, name: str) -> Tensor:
        """The mean (float64 scalar) over all images seen of the scores summed in state ``name``."""
        return getattr(self, name).double() / self.count
