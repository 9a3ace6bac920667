"""What the streamed pass needs from a network: :class:`PassAdapter`, and the :class:`BlockPoints`
where each block's tensors appear.

A family whose network is a stack of residual attention blocks (timm's ViTs and Swin,
torchvision's ViT, HF's ViTs) writes one :class:`PassAdapter` subclass: its blocks, where each
block's attention probabilities, attention branch and value vectors appear (:meth:`~PassAdapter.block_points`),
its token grid, its read-out, and how to make the probabilities exist on the path to the output for
one call (:meth:`~PassAdapter.explain_mode`) and hold them constant in the backward
(:meth:`~PassAdapter.constant_attention`, for CP-LRP). The pass itself (hooks, streaming, the
backward, the checks) is :class:`~gradskip_lightning.core.streaming.StreamedPass`, the same for
every family. Hooks exist only during one call; modes and switches are restored on exit, and no
parameter ``.grad`` is written.

Shapes: B images, H heads, N tokens (prefix tokens first), D channels, A = H * head width.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from gradskip_lightning.core.explanation import UnsupportedModel
from gradskip_lightning.core.streaming import BlockPoints, StreamedPass
from gradskip_lightning.core.tensors import BlockVisitor, Capture, CaptureMode, Recorder, Top

__all__ = ["BlockPoints", "PassAdapter", "UnsupportedModel", "eval_mode", "parameter_holders_outside"]


@contextmanager
def eval_mode(*models: nn.Module) -> Iterator[None]:
    """Every module of ``models`` in eval mode inside the block; each module's own mode restored on
    exit (``model.train()`` afterwards would flip modules a user froze in eval)."""
    modules = {id(m): m for model in models for m in model.modules()}.values()
    modes = [(m, m.training) for m in modules]
    try:
        for module, _ in modes:
            module.training = False
        yield
    finally:
        for module, training in modes:
            module.training = training


def parameter_holders_outside(model: nn.Module, inner: nn.Module) -> list[nn.Module]:
    """The modules of ``model`` outside ``inner`` that hold parameters of their own (e.g. a head in
    the LightningModule around a backbone): what the randomisation test re-initialises with the head."""
    inside = {id(m) for m in inner.modules()}
    return [m for m in model.modules() if id(m) not in inside and next(m.parameters(recurse=False), None) is not None]


class PassAdapter:
    """Access to one network of a family: its blocks, token grid, prefix tokens and read-out.

    Subclasses set :attr:`architecture` and define :meth:`check` (raise :class:`UnsupportedModel`
    with the reason for a configuration they cannot explain), :attr:`blocks`, :meth:`block_points`,
    the geometry properties, :attr:`head`, :attr:`num_classes`, :meth:`readout`, :meth:`norm_scope`,
    :meth:`reinitialise` and :meth:`constant_attention`; :meth:`explain_mode` where the attention
    needs a per-call switch.

    Args:
        backbone: the network (found in the model by the family, see
            :func:`~gradskip_lightning.core.family.find_network`).
    """

    #: The network's architecture, in words the error messages and tests use ("vision_transformer").
    architecture: ClassVar[str]

    def __init__(self, backbone: nn.Module) -> None:
        self.backbone: Any = backbone  # the family's network class: its attributes are checked by check()
        self.check()

    # -- what a family's adapter defines ---------------------------------------------------------
    def check(self) -> None:
        """Raise :class:`UnsupportedModel` when this backbone's configuration cannot be explained."""

    @property
    def blocks(self) -> list[nn.Module]:
        """The transformer blocks, bottom first."""
        raise NotImplementedError

    def block_points(self, block: nn.Module) -> BlockPoints:
        """Where ``block``'s tensors appear."""
        raise NotImplementedError

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: CLS, distillation, register tokens."""
        raise NotImplementedError

    @property
    def grid_size(self) -> tuple[int, int]:
        """Token grid (h, w) of the maps."""
        raise NotImplementedError

    @property
    def img_size(self) -> tuple[int, int]:
        """Input size (H, W) in pixels."""
        raise NotImplementedError

    @property
    def in_chans(self) -> int:
        """Input channels C."""
        raise NotImplementedError

    @property
    def head(self) -> nn.Module | None:
        """The backbone's own classifier head, None when it has none (the head is outside)."""
        raise NotImplementedError

    @property
    def num_classes(self) -> int:
        """Classes of the backbone's own head; 0 when it has none."""
        raise NotImplementedError

    def readout(
        self, batch: int, pool_input: Tensor | None, device: torch.device, dtype: torch.dtype = torch.float32
    ) -> Tensor:
        """The token distribution the pooling reads, (B, N), each row summing to 1; ``pool_input``:
        the tokens entering :attr:`pool_input_module` (B, N or P, D), when it has one."""
        raise NotImplementedError

    @property
    def pool_input_module(self) -> nn.Module | None:
        """A pooling module whose input the read-out needs (attention pooling), or None."""
        return None

    def norm_scope(self) -> list[nn.Module]:
        """Where a conservative pass holds norm denominators constant: the blocks and what follows them."""
        raise NotImplementedError

    def reinitialise(self, layer: nn.Module) -> None:
        """Re-initialise every submodule of ``layer`` in place (the randomisation test)."""
        raise NotImplementedError

    def constant_attention(self) -> AbstractContextManager[None]:
        """Inside :meth:`explain_mode`: the attention probabilities held constant in the backward
        (their forward value unchanged), for one conservative pass."""
        raise NotImplementedError

    @contextmanager
    def explain_mode(self, model: nn.Module | None = None) -> Iterator[None]:
        """Eval mode of ``model`` (default the backbone) and the backbone, restored on exit."""
        with eval_mode(self.backbone if model is None else model, self.backbone):
            yield

    # -- derived ---------------------------------------------------------------------------------
    @property
    def patch_size(self) -> tuple[int, int]:
        """Pixels per token (ph, pw): image size over grid size (a hybrid stem counts as its stride)."""
        (h, w), (gh, gw) = self.img_size, self.grid_size
        return (h // gh, w // gw)

    def cascade(self, model: nn.Module) -> list[tuple[str, list[nn.Module]]]:
        """Layers of the parameter-randomisation test, top first: ``"head"`` (:attr:`head` and every
        module of ``model`` outside the backbone that holds parameters), then ``"blocks.{L-1}"`` down
        to ``"blocks.0"``."""
        outside = parameter_holders_outside(model, self.backbone)
        head = [] if self.head is None else [self.head]
        blocks = [(f"blocks.{i}", [block]) for i, block in reversed(list(enumerate(self.blocks)))]
        return [("head", head + outside), *blocks]

    def capture(
        self,
        model: nn.Module,
        images: Tensor,
        targets: Tensor | None = None,
        with_gradients: bool = True,
        conservative: bool = False,
    ) -> Capture:
        """Every block's tensors of one pass (:meth:`run` into a :class:`Recorder`): for tests and
        property checks; the explainers stream instead.

        Args:
            with_gradients: False: mode "forward" (no backward); True: mode "gradients".
            conservative: mode "conservative" (CP-LRP; ``with_gradients`` is then ignored).

        Other arguments and errors as in :meth:`run`.
        """
        mode: CaptureMode = "conservative" if conservative else "gradients" if with_gradients else "forward"
        recorder = Recorder(mode)
        self.run(model, images, targets, recorder)
        return recorder.capture()

    def run(self, model: nn.Module, images: Tensor, targets: Tensor | None, visitor: BlockVisitor) -> Top:
        """Run ``model(images)`` once, and in modes "gradients" and "conservative" one
        activation-only backward of y = sum_b logit[b, target_b], streaming into ``visitor``.

        Each block's tensors go to ``visitor.block`` as soon as they exist and are dropped right
        after (order: :mod:`gradskip_lightning.core.tensors`); mode "forward" runs without autograd
        graph. Hooks exist only during this call, whose state is a fresh
        :class:`~gradskip_lightning.core.streaming.StreamedPass`.

        Args:
            model: the module whose forward maps images to logits (B, num_classes); it holds
                :attr:`backbone`.
            images: (B, C, H, W), validated and normalised as the model expects.
            targets: (B,) class indices, or None for the predicted classes.
            visitor: the consumer; its ``mode`` picks the pass.

        Returns:
            The :class:`Top` also given to ``visitor.start``.

        Raises:
            ValueError: the forward does not return logits (B, C), or does not run the backbone
                once, or a block's attention gets no gradient.

        Works inside ``torch.no_grad()`` and ``torch.inference_mode()``.
        """
        return StreamedPass(self, model, visitor).run(images, targets)
