"""What every model family's explainer returns and promises: :class:`Explanation`,
the :class:`ModelExplainer` protocol the callback, the metrics and the benchmarks rely on, and
:class:`ExplainerBase`, the one ``explain`` that every family's explainer shares.

A family implements one step, :meth:`ExplainerBase._explain` (checked, device-placed inputs in,
an :class:`Explanation` out, built with :func:`relevance_maps`); the input checks, the device and
precision rules and the zeroing of non-finite maps are the base's. The family index is
:mod:`gradskip_lightning.families`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gradskip_lightning.core.validation import check_class_targets, check_image_batch

__all__ = ["Explanation", "ExplainerBase", "ModelExplainer", "Task", "UnsupportedModel", "relevance_maps"]


class UnsupportedModel(TypeError):
    """A model (or one of its settings) no family can explain; the message says which and why."""


Task = Literal["classification", "segmentation"]
"""What a family's logits mean: one score per class of the image, or one per class and position."""


@dataclass
class Explanation:
    """Maps and internals of one batched explain call. Heights/widths in pixels.

    Attributes:
        maps: (B, H, W) float32 relevance at input resolution.
        token_maps: (B, h, w) float32 relevance per token of the family's grid.
        targets: (B,) long, the explained classes.
        logits: (B, K) float32 the model's class scores (a segmentation family: their mean over
            ``region``).
        valid: (B,) bool; False where gradients or relevance were not finite (map zeroed).
        method: the method's name.
        head_weights, grad_flow, sparsity: (B, L, H) GradSkip's head importance omega and its parts
            g~ and s~ (NaN-padded where layers differ in heads); None for the baselines.
        gates: (B, L, N) beta_main per propagated token (NaN-padded where layers differ in tokens).
        region: (B, h, w) bool, the positions whose mean logit is explained (segmentation
            families); None when the image's logits are explained. The perturbation scores score
            the same region.
    """

    maps: Tensor
    token_maps: Tensor
    targets: Tensor
    logits: Tensor
    valid: Tensor
    method: str
    head_weights: Tensor | None = None
    grad_flow: Tensor | None = None
    sparsity: Tensor | None = None
    gates: Tensor | None = None
    region: Tensor | None = None

    @property
    def probabilities(self) -> Tensor:
        """Softmax probability of each explained class, (B,)."""
        return self.logits.softmax(dim=1).gather(1, self.targets[:, None])[:, 0]

    @property
    def predictions(self) -> Tensor:
        """Predicted class per image, (B,)."""
        return self.logits.argmax(dim=1)


class ModelExplainer(Protocol):
    """What the callback, the metrics and the benchmarks may rely on, whatever the model family.

    Attributes:
        model: the module whose forward the family runs (what the perturbation metrics call).
        method: the explained method's name, one of :attr:`methods`.
        family: the registered family's name (:mod:`gradskip_lightning.families`).
        task: what the logits mean (see :data:`Task`).
        methods: every method name the family implements.
    """

    model: nn.Module
    method: str
    family: ClassVar[str]
    task: ClassVar[Task]
    methods: ClassVar[tuple[str, ...]]

    @property
    def in_chans(self) -> int:
        """Input channels C."""
        ...

    @property
    def num_classes(self) -> int:
        """Width K of the logits."""
        ...

    @property
    def patch_size(self) -> tuple[int, int]:
        """Pixels per token of the maps' grid (ph, pw): the perturbation metrics' patch."""
        ...

    @property
    def img_size(self) -> tuple[int, int] | None:
        """The input size (H, W) the model takes, or None when it takes several (see :meth:`check_images`)."""
        ...

    def check_images(self, images: Tensor) -> None:
        """Raise (see :mod:`gradskip_lightning.core.validation`) unless the model can explain ``images``."""
        ...

    def check_targets(self, targets: Tensor, batch: int) -> None:
        """Raise unless ``targets`` is (batch,) of class indices in [0, num_classes)."""
        ...

    def explain(self, images: Tensor, targets: Tensor | None = None, regions: Tensor | None = None) -> Explanation:
        """Explain a batch (B, C, H, W); ``targets`` (B,) classes (None: the predicted ones);
        ``regions`` (B, h, w) bool positions for segmentation families (None: their default)."""
        ...


def relevance_maps(token_maps: Tensor, finite: Tensor, size: tuple[int, int]) -> tuple[Tensor, Tensor, Tensor]:
    """(maps (B, H, W), token_maps (B, h, w), valid (B,)) of raw relevance per token (B, h, w):
    float32, zeroed where the relevance or the family's internals (``finite`` (B,) bool) were not
    finite, and bilinearly upsampled to ``size`` (H, W).

    Example:
        >>> maps, tokens, valid = relevance_maps(torch.tensor([[[1.0, float("nan")]]]), torch.tensor([True]), (2, 4))
        >>> maps.shape, tokens.tolist(), valid.tolist()
        (torch.Size([1, 2, 4]), [[[0.0, 0.0]]], [False])
    """
    token_maps = token_maps.float()  # float32 maps, also from a float64 model
    valid = torch.isfinite(token_maps).flatten(1).all(dim=1) & finite.to(token_maps.device)
    token_maps = torch.where(valid[:, None, None], token_maps, torch.zeros_like(token_maps))
    maps = F.interpolate(token_maps[:, None], size=size, mode="bilinear", align_corners=False)[:, 0]
    return maps, token_maps, valid


def all_finite(*tensors: Tensor | None) -> Tensor:
    """(B,) True where every given (B, ...) tensor is finite in all its entries; None entries are skipped."""
    present = [t for t in tensors if t is not None]
    return torch.stack([torch.isfinite(t).flatten(1).all(dim=1) for t in present]).all(dim=0)


class ExplainerBase:
    """The shared part of every family's explainer: input checks, device and precision, one
    ``explain``.

    Subclasses set :attr:`family`, :attr:`task` and :attr:`methods`, the :attr:`model`,
    :attr:`method` and :attr:`options` in ``__init__``, the geometry properties of
    :class:`ModelExplainer`, :meth:`check_images`, :meth:`_parameters` and :meth:`_explain`.
    """

    family: ClassVar[str]
    task: ClassVar[Task]
    methods: ClassVar[tuple[str, ...]]
    model: nn.Module
    method: str
    options: Any

    @property
    def num_classes(self) -> int:
        raise NotImplementedError

    @staticmethod
    def check_model(model: object) -> None:
        """Raise :class:`UnsupportedModel` unless ``model`` is a module with a forward of its own (a
        ``ModuleDict`` or ``ModuleList`` holding networks has none: name one of them)."""
        if not isinstance(model, nn.Module):
            raise UnsupportedModel(f"Cannot explain a {type(model).__name__}: not a torch.nn.Module.")
        if type(model).forward is nn.Module.forward:
            raise UnsupportedModel(
                f"Cannot explain a {type(model).__name__}: it is a container with no forward of its own. Explain "
                "the network inside it whose forward returns the logits (backbone='<its module path>')."
            )

    def check_images(self, images: Tensor) -> None:
        check_image_batch(images)

    def check_targets(self, targets: Tensor, batch: int) -> None:
        """Raise unless ``targets`` is (batch,) of class indices in [0, num_classes)."""
        check_class_targets(targets, batch, self.num_classes)

    def check_regions(self, regions: Tensor, images: Tensor) -> None:
        """Raise unless the family takes ``regions`` for ``images``; classifiers take none."""
        raise ValueError(
            f"{type(self).__name__} explains a {self.task} model's image-level logits: regions are for "
            "segmentation models; pass regions=None"
        )

    def _parameters(self) -> Iterator[nn.Parameter]:
        """The parameters whose device and dtype the inputs are moved to (the explained network's)."""
        return self.model.parameters()

    def _explain(self, images: Tensor, targets: Tensor | None, regions: Tensor | None) -> Explanation:
        """The family's step: explain checked inputs on the model's device and in its precision."""
        raise NotImplementedError

    def explain(self, images: Tensor, targets: Tensor | None = None, regions: Tensor | None = None) -> Explanation:
        """Explain a batch in one forward (and one activation-only backward for gradient methods).

        Raises:
            ValueError: an empty batch (B = 0), or images, targets or regions the family cannot take.

        Args:
            images: (B, C, H, W), B >= 1, normalised as the model expects; moved to the model's device,
                in float32 (float64 for a float64 model; never half precision, autocast off).
            targets: (B,) class indices; None explains the predicted classes (a segmentation
                family: the class predicted at the most positions).
            regions: (B, h, w) bool on the logits grid, for segmentation families (None: the
                positions predicted as the class).
        """
        images, targets, regions = self._inputs(images, targets, regions)
        with torch.autocast(images.device.type, enabled=False):
            return self._explain(images, targets, regions)

    def _inputs(
        self, images: Tensor, targets: Tensor | None, regions: Tensor | None
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """The checked inputs of :meth:`explain` on the model's device, the images in its precision."""
        self.check_images(images)
        if images.shape[0] == 0:
            raise ValueError(
                f"images is an empty batch {tuple(images.shape)}: there is nothing to explain; pass at least one image"
            )
        parameter = next(self._parameters())
        device = parameter.device
        dtype = torch.float64 if parameter.dtype == torch.float64 else torch.float32
        if targets is not None:
            self.check_targets(targets, images.shape[0])
            targets = targets.to(device=device, dtype=torch.long)
        if regions is not None:
            self.check_regions(regions, images)
            regions = regions.to(device)
        return images.to(device=device, dtype=dtype), targets, regions
