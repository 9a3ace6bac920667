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

from collections.abc import Iterator
from functools import cached_property
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from gradskip_lightning.adapters import ADAPTERS, Adapter, UnsupportedModel, find_adapter
from gradskip_lightning.explanation import ExplainerBase, Explanation, Task, all_finite, relevance_maps
from gradskip_lightning.families import explainer_for, register_family
from gradskip_lightning.methods import METHODS, MethodName, method_spec
from gradskip_lightning.validation import check_image_batch, check_logits

__all__ = ["METHODS", "Explainer", "Explanation", "MethodName", "explainer_for", "holds_timm_backbone"]


class Explainer(ExplainerBase):
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

    family: ClassVar[str] = "timm_vit"
    task: ClassVar[Task] = "classification"
    methods: ClassVar[tuple[str, ...]] = METHODS

    def __init__(self, model: nn.Module, method: str = "gradskip", **options: Any) -> None:
        self.adapter = self._adapter_of(model)
        if self.adapter.backbone is model and self.adapter.num_classes <= 0:
            raise UnsupportedModel(
                f"{type(model).__name__} has no classifier head (num_classes=0): nothing to explain. "
                "Pass the module that applies the head (its forward must return logits)."
            )
        self.model = self._logits_module(model)  # images -> logits; what the metrics run
        self.method = method
        self._use_method(method, options)

    def _adapter_of(self, model: nn.Module) -> Adapter:
        """The adapter of the backbone in ``model`` (a family on the timm pass overrides it)."""
        return find_adapter(model)

    def _logits_module(self, model: nn.Module) -> nn.Module:
        """The module whose forward returns the logits (B, K): ``model`` itself here."""
        return model

    def _use_method(self, method: str, options: dict[str, Any]) -> None:
        """Set the method's spec and its options dataclass."""
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
        parameter = next(self.model.parameters())
        blank = torch.zeros(1, self.in_chans, *self.img_size, device=parameter.device, dtype=parameter.dtype)
        with self.adapter.explain_mode(self.model), torch.no_grad():
            logits = self.model(blank)
        check_logits(self.model, logits, 1)
        return logits.shape[1]

    def check_images(self, images: Tensor) -> None:
        """Raise unless ``images`` is a finite float (B, C, H, W) batch of the model's size."""
        check_image_batch(images)
        c, h, w = images.shape[1:]
        if c != self.in_chans or (h, w) != self.img_size:
            expected = ", ".join(str(d) for d in (self.in_chans, *self.img_size))
            raise ValueError(f"images must be (B, {expected}); got {tuple(images.shape)}")

    def _parameters(self) -> Iterator[nn.Parameter]:
        return self.adapter.backbone.parameters()

    def _explain(self, images: Tensor, targets: Tensor | None, regions: Tensor | None) -> Explanation:
        """One pass of the adapter (each block reduced by the method as soon as its tensors exist)."""
        visitor = self.spec.visitor(self.options)
        top = self.adapter.run(self.model, images, targets, visitor)
        if top.logits.shape[1] != self.num_classes:
            raise ValueError(
                f"{type(self.model).__name__}.forward returned {top.logits.shape[1]} logits; its backbone's "
                f"head has {self.num_classes} classes. Pass the module whose forward returns them."
            )
        out = visitor.result()
        token_maps = out.patch_relevance.reshape(-1, *top.grid_size)
        finite = all_finite(out.head_weights, out.gates, token_maps)
        maps, token_maps, valid = relevance_maps(token_maps, finite, (images.shape[2], images.shape[3]))
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


def holds_timm_backbone(model: nn.Module) -> bool:
    """True when ``model`` is, or holds, a backbone of a registered timm adapter (exact class)."""
    types = {t for adapter in ADAPTERS.values() for t in adapter.backbone_types}
    return any(type(m) in types for m in model.modules())


register_family(
    matches=holds_timm_backbone,
    explainer=Explainer,
    describe="timm Vision Transformers (" + ", ".join(ADAPTERS) + ")",
)
