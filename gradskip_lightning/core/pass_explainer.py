"""PassExplainer: the explainer of every family whose networks run through the streamed pass.

A family subclasses it with its ``family`` name, its method table (``method_specs``: visitors of the
pass, :data:`~gradskip_lightning.methods.PASS_METHODS` for the ViTs) and :meth:`_adapter_of`, which
finds its network in the model and wraps it in the family's
:class:`~gradskip_lightning.core.adapter.PassAdapter`. The model's own forward runs (logits =
model(images)), with hooks on the network the adapter wraps: preprocessing in ``forward`` and a
head outside the network are honoured.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from gradskip_lightning.core.adapter import PassAdapter
from gradskip_lightning.core.explanation import (
    ExplainerBase,
    Explanation,
    ModelExplainer,
    Task,
    UnsupportedModel,
    all_finite,
    relevance_maps,
)
from gradskip_lightning.core.methods import MethodSpec
from gradskip_lightning.core.registry import Registry
from gradskip_lightning.core.tensors import BlockTensors, BlockVisitor, CaptureMode, Top
from gradskip_lightning.core.validation import check_image_batch, check_logits

__all__ = ["PassExplainer", "explain_each"]


class PassExplainer(ExplainerBase):
    """Explain a classifier's decisions through one streamed pass of its network.

    Args:
        model: the module whose forward maps images to logits (B, num_classes) and that is, or
            holds exactly one, network of the family: the network with its head, or a
            LightningModule with ``self.head(self.backbone(x))``.
        method: one of :attr:`methods`.
        **options: the fields of the method's options dataclass.

    Raises:
        UnsupportedModel (a TypeError): no network of the family, several, or a network without
            head passed alone.
        ValueError: unknown method or option.
    """

    task: ClassVar[Task] = "classification"
    #: The family's methods: name -> the visitor class of the pass and the options dataclass.
    method_specs: ClassVar[Registry[MethodSpec[Any]]]
    adapter: PassAdapter

    def __init__(self, model: nn.Module, method: str = "gradskip", **options: Any) -> None:
        self.check_model(model)
        self.adapter = self._adapter_of(model)
        if self.adapter.backbone is model and self.adapter.num_classes <= 0:
            raise UnsupportedModel(
                f"{type(model).__name__} has no classifier head (num_classes=0): nothing to explain. "
                "Pass the module that applies the head (its forward must return logits)."
            )
        self.model = self._logits_module(model)  # images -> logits; what the metrics run
        self.method = method
        self.spec = self.method_specs[method]
        self.options = self.spec.make_options(method, **options)

    def _adapter_of(self, model: nn.Module) -> PassAdapter:
        """The family's adapter of the one network in ``model``."""
        raise NotImplementedError

    def _logits_module(self, model: nn.Module) -> nn.Module:
        """The module whose forward returns the logits (B, K): ``model`` itself unless the family's
        network returns an output object."""
        return model

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
        """Width of the model's logits: the network's head, or one forward of a blank image when
        the head is outside the network."""
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

    def _check_width(self, logits: Tensor) -> None:
        """Raise ValueError unless the forward's logits (B, K) are as wide as the network's head."""
        if logits.shape[1] != self.num_classes:
            raise ValueError(
                f"{type(self.model).__name__}.forward returned {logits.shape[1]} logits; its backbone's "
                f"head has {self.num_classes} classes. Pass the module whose forward returns them."
            )

    def _explain(self, images: Tensor, targets: Tensor | None, regions: Tensor | None) -> Explanation:
        """One pass of the adapter (each block reduced by the method as soon as its tensors exist)."""
        visitor = self.spec.step(self.options)
        top = self.adapter.run(self.model, images, targets, visitor)
        self._check_width(top.logits)
        return self._explanation(visitor.result(), top, images)

    def explain_together(
        self, others: Sequence[PassExplainer], images: Tensor, targets: Tensor | None = None
    ) -> list[Explanation]:
        """This explainer's :meth:`explain` of a batch and each of ``others``', from one pass: one forward and one
        backward, each method's visitor fed the same blocks (the explanations equal each explainer's own).

        Raises:
            ValueError: an explainer of another network, or a method that captures in another mode (a
                conservative LRP pass and a gradient pass cannot be shared); and as :meth:`explain`.
        """
        explainers = (self, *others)
        visitors = [explainer.spec.step(explainer.options) for explainer in explainers]
        foreign = [
            e.method for e in others if e.model is not self.model or e.adapter.backbone is not self.adapter.backbone
        ]
        modes = {visitor.mode for visitor in visitors}
        if foreign or len(modes) > 1:
            raise ValueError(
                f"explain_together shares one pass of one network in one capture mode; got {len(explainers)} methods "
                f"in modes {sorted(modes)}{f', {foreign} of another network' if foreign else ''}"
            )
        images, targets, _ = self._inputs(images, targets, None)
        with torch.autocast(images.device.type, enabled=False):
            top = self.adapter.run(self.model, images, targets, _SharedPass(visitors))
        self._check_width(top.logits)
        return [e._explanation(visitor.result(), top, images) for e, visitor in zip(explainers, visitors, strict=True)]

    def _explanation(self, out: Any, top: Top, images: Tensor) -> Explanation:
        """The :class:`Explanation` of a method visitor's result ``out`` (its patch relevance (B, P) and, for
        GradSkip, its internals) from the pass whose top is ``top``."""
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


class _SharedPass:
    """Several visitors of one capture mode fed by one pass: each gets the top and every block, in order."""

    def __init__(self, visitors: Sequence[BlockVisitor]) -> None:
        self.visitors = tuple(visitors)
        self.mode: CaptureMode = self.visitors[0].mode
        self.needs_value_norm = any(visitor.needs_value_norm for visitor in self.visitors)
        self.needs_branch = any(visitor.needs_branch for visitor in self.visitors)

    def start(self, top: Top) -> None:
        for visitor in self.visitors:
            visitor.start(top)

    def block(self, tensors: BlockTensors) -> None:
        for visitor in self.visitors:
            visitor.block(tensors)


def explain_each(
    explainers: Sequence[ModelExplainer], images: Tensor, targets: Tensor | None = None
) -> list[Explanation]:
    """Each explainer's :meth:`~gradskip_lightning.core.explanation.ModelExplainer.explain` of one batch (B, C, H, W):
    the :class:`PassExplainer` s of one network whose methods capture in one mode share a pass
    (:meth:`PassExplainer.explain_together`), the others explain alone; in the order given."""
    shared: dict[tuple[int, int, str], list[int]] = {}
    explained: dict[int, Explanation] = {}
    for position, explainer in enumerate(explainers):
        if isinstance(explainer, PassExplainer):
            mode = explainer.spec.step(explainer.options).mode
            shared.setdefault((id(explainer.model), id(explainer.adapter.backbone), mode), []).append(position)
        else:
            explained[position] = explainer.explain(images, targets)
    for positions in shared.values():
        first, *others = (explainers[position] for position in positions)
        assert isinstance(first, PassExplainer)
        together = first.explain_together([e for e in others if isinstance(e, PassExplainer)], images, targets)
        explained.update(zip(positions, together, strict=True))
    return [explained[position] for position in range(len(explainers))]
