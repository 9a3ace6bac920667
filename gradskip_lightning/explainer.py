"""Explainer: one interface over GradSkip and the baselines, batched, with input checks.

The model's own forward runs (logits = model(images)), with hooks on the backbone its adapter
found: preprocessing in ``forward`` and a head outside the backbone are honoured.

Example:
    >>> import timm, torch
    >>> model = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=3)
    >>> explanation = Explainer(model, method="gradskip", alpha=0.5).explain(torch.randn(2, 3, 32, 32))
    >>> explanation.maps.shape, explanation.token_maps.shape  # relevance at input and patch resolution
    (torch.Size([2, 32, 32]), torch.Size([2, 4, 4]))
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gradskip_lightning.adapters import find_adapter
from gradskip_lightning.adapters.base import check_logits
from gradskip_lightning.methods import METHODS, MethodName, method_spec

if TYPE_CHECKING:
    from gradskip_lightning.segmentation.explainer import SegmentationExplainer

__all__ = ["METHODS", "Explainer", "Explanation", "MethodName", "explainer_for"]


@dataclass
class Explanation:
    """Maps and internals of one batched explain call. Heights/widths in pixels."""

    maps: Tensor  # (B, H, W) float32 relevance at input resolution
    token_maps: Tensor  # (B, h, w) float32 relevance per patch
    targets: Tensor  # (B,) long, the explained classes
    logits: Tensor  # (B, num_classes) float32
    valid: Tensor  # (B,) bool; False where gradients or relevance were not finite (map zeroed)
    method: str
    head_weights: Tensor | None = None  # omega (B, L, H)
    grad_flow: Tensor | None = None  # g~ (B, L, H)
    sparsity: Tensor | None = None  # s~ (B, L, H)
    gates: Tensor | None = None  # beta_main (B, L, N), N the tokens propagated

    @property
    def probabilities(self) -> Tensor:
        """Softmax probability of each explained class, (B,)."""
        return self.logits.softmax(dim=1).gather(1, self.targets[:, None])[:, 0]

    @property
    def predictions(self) -> Tensor:
        """Predicted class per image, (B,)."""
        return self.logits.argmax(dim=1)


def check_image_batch(images: Tensor) -> None:
    """Raise ValueError unless ``images`` is a finite float tensor (B, C, H, W)."""
    if not isinstance(images, Tensor) or images.ndim != 4 or not images.is_floating_point():
        got = f"{type(images).__name__} {getattr(images, 'dtype', '')} {tuple(getattr(images, 'shape', ()))}"
        raise ValueError(f"images must be a float tensor (B, C, H, W); got {got}")
    if not torch.isfinite(images).all():
        raise ValueError("images contain NaN or infinite values")


def check_class_targets(targets: Tensor, batch: int, num_classes: int) -> None:
    """Raise ValueError unless ``targets`` is an integer tensor (batch,) of classes in [0, num_classes)."""
    if not isinstance(targets, Tensor) or targets.shape != (batch,) or targets.is_floating_point():
        raise ValueError(f"targets must be an integer tensor of shape ({batch},); got {targets!r}")
    if batch and (targets.min() < 0 or targets.max() >= num_classes):
        raise ValueError(f"targets must be in [0, {num_classes}); got {targets.tolist()}")


class Explainer:
    """Explain a ViT classifier's decisions with GradSkip or a baseline.

    Args:
        model: the module whose forward maps images to logits (B, num_classes) and that is, or
            holds exactly one, supported backbone (see :mod:`gradskip_lightning.adapters`): a timm
            model with its head, or a LightningModule with ``self.head(self.backbone(x))``.
        method: one of :data:`METHODS`.
        **options: the fields of the method's options dataclass (for "gradskip"
            :class:`~gradskip_lightning.methods.GradSkipOptions`, for "random" ``seed``).

    Raises:
        TypeError: no supported backbone, or a backbone without head passed alone.
        ValueError: unknown method or option.
    """

    def __init__(self, model: nn.Module, method: MethodName = "gradskip", **options) -> None:
        self.model = model  # images -> logits; what the metrics run
        self.adapter = find_adapter(model)
        if self.adapter.backbone is model and self.adapter.num_classes <= 0:
            raise TypeError(
                f"{type(model).__name__} has no classifier head (num_classes=0): nothing to explain. "
                "Pass the module that applies the head (its forward must return logits)."
            )
        self.method = method
        self.spec = method_spec(method)
        self.options = self.spec.make_options(method, **options)

    @property
    def patch_size(self) -> tuple[int, int]:
        return self.adapter.patch_size

    @property
    def grid_size(self) -> tuple[int, int]:
        return self.adapter.grid_size

    @property
    def img_size(self) -> tuple[int, int]:
        return self.adapter.img_size

    @property
    def in_chans(self) -> int:
        return self.adapter.in_chans

    @property
    def num_prefix_tokens(self) -> int:
        return self.adapter.num_prefix_tokens

    @cached_property
    def num_classes(self) -> int:
        """Width of the model's logits: the backbone's head, or one forward of a blank image when
        the head is outside the backbone."""
        if self.adapter.num_classes > 0:
            return self.adapter.num_classes
        device = next(self.model.parameters()).device
        blank = torch.zeros(1, self.in_chans, *self.img_size, device=device)
        with self.adapter.explain_mode(self.model), torch.no_grad():
            logits = self.model(blank)
        check_logits(self.model, logits, 1)
        return logits.shape[1]

    def check_images(self, images: Tensor) -> None:
        """Raise ValueError unless ``images`` is a finite float (B, C, H, W) batch the model accepts."""
        check_image_batch(images)
        c, h, w = images.shape[1:]
        if c != self.in_chans or (h, w) != self.img_size:
            expected = ", ".join(str(d) for d in (self.in_chans, *self.img_size))
            raise ValueError(f"images must be (B, {expected}); got {tuple(images.shape)}")

    def check_targets(self, targets: Tensor, batch: int) -> None:
        """Raise ValueError unless ``targets`` is (batch,) of class indices in [0, num_classes)."""
        check_class_targets(targets, batch, self.num_classes)

    def explain(self, images: Tensor, targets: Tensor | None = None) -> Explanation:
        """Explain a batch in one forward (and one activation-only backward for gradient methods),
        each block reduced by the method as soon as its tensors exist.

        Args:
            images: (B, C, H, W), normalised as the model expects; moved to the model's device.
            targets: (B,) class indices; None explains the predicted classes.
        """
        self.check_images(images)
        parameter = next(self.adapter.backbone.parameters())
        device = parameter.device
        dtype = torch.float64 if parameter.dtype == torch.float64 else torch.float32  # never half precision
        images = images.to(device)
        if targets is not None:
            self.check_targets(targets, images.shape[0])
            targets = targets.to(device=device, dtype=torch.long)
        visitor = self.spec.visitor(self.options)
        with torch.autocast(device.type, enabled=False):
            top = self.adapter.run(self.model, images.to(dtype), targets, visitor)
            if top.logits.shape[1] != self.num_classes:
                raise ValueError(
                    f"{type(self.model).__name__}.forward returned {top.logits.shape[1]} logits; its backbone's "
                    f"head has {self.num_classes} classes. Pass the module whose forward returns them."
                )
            out = visitor.result()
        h, w = top.grid_size
        patch = out.patch_relevance.float()  # float32 maps, also from a float64 model
        valid = torch.isfinite(patch).all(dim=1)
        for extra in (out.head_weights, out.gates):
            if extra is not None:
                valid &= torch.isfinite(extra).flatten(1).all(dim=1)
        token_maps = torch.where(valid[:, None], patch, torch.zeros_like(patch)).reshape(-1, h, w)
        maps = F.interpolate(token_maps[:, None], size=images.shape[-2:], mode="bilinear", align_corners=False)[:, 0]
        return Explanation(
            maps=maps,
            token_maps=token_maps,
            targets=top.targets,
            logits=top.logits.float(),
            valid=valid,
            method=self.method,
            head_weights=out.head_weights,
            grad_flow=out.grad_flow,
            sparsity=out.sparsity,
            gates=out.gates,
        )


def explainer_for(model: nn.Module, method: str = "gradskip", **options) -> Union[Explainer, "SegmentationExplainer"]:
    """The explainer of ``model``'s family: a
    :class:`~gradskip_lightning.segmentation.SegmentationExplainer` when it is or holds an HF
    SegFormer, an :class:`Explainer` (timm ViT classifiers) otherwise. Arguments as for both."""
    from gradskip_lightning.segmentation.capture import holds_segformer

    if holds_segformer(model):
        from gradskip_lightning.segmentation.explainer import SegmentationExplainer

        return SegmentationExplainer(model, method, **options)
    return Explainer(model, method, **options)
