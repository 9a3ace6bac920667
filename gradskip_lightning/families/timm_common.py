"""What the timm families (ViTs and Swin) share: the hook points of a timm attention block, fused
attention and gradient checkpointing off for one call, timm's ViT initialisation.

A timm block (``Block``, ``ResPostBlock``, ``EvaBlock``, ``SwinTransformerBlock``, ...) has an
``attn`` whose ``attn_drop`` output is A^l (B, H, N, N) once ``attn.fused_attn`` is False, whose
``qkv`` (or ``v_proj``) output holds the value vectors, and a ``drop_path1`` whose output is the
attention branch a^l added to the residual stream (an ``nn.Identity`` when the rate is 0: its hooks
still fire). See ../shared/docs/facts.md.

Shapes: B images, H heads, N tokens, D channels, A = H * head width.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from typing import Any

import torch.nn.functional as F
from timm.models.vision_transformer import init_weights_vit_timm
from torch import Tensor, nn

from gradskip_lightning.core.adapter import PassAdapter, eval_mode
from gradskip_lightning.core.conservative import detached_outputs
from gradskip_lightning.core.streaming import BlockPoints

__all__ = ["TimmBlocksAdapter", "value_projection", "values_from_input", "values_from_projection"]


def value_projection(attn: Any) -> nn.Module:
    """The module whose output holds the value vectors: ``v_proj``, or the fused ``qkv``."""
    v_proj = getattr(attn, "v_proj", None)
    return attn.qkv if v_proj is None else v_proj


def values_from_projection(attn: Any, out: Tensor) -> Tensor:
    """The values (B, N, A) in the output of :func:`value_projection`, copied (some attentions add
    their bias in place afterwards); a bias-free ``qkv`` gets the attention's ``v_bias``."""
    if getattr(attn, "v_proj", None) is not None:
        return out.detach().clone()
    width = out.shape[-1] // 3
    v = out.detach()[..., 2 * width :].clone()
    v_bias = getattr(attn, "v_bias", None)
    return v + v_bias.detach() if attn.qkv.bias is None and v_bias is not None else v


def values_from_input(attn: Any, x: Tensor) -> Tensor:
    """The values (B, N, A) recomputed from the attention's input x (B, N, D), for attentions that
    apply their ``qkv`` weight functionally (BEiT, EVA with a separate q/v bias)."""
    weight = attn.qkv.weight
    width = weight.shape[0] // 3
    bias = attn.qkv.bias[2 * width :] if attn.qkv.bias is not None else getattr(attn, "v_bias", None)
    return F.linear(x.detach(), weight[2 * width :].detach(), None if bias is None else bias.detach())


class TimmBlocksAdapter(PassAdapter):
    """A :class:`~gradskip_lightning.core.adapter.PassAdapter` over timm attention blocks: their
    hook points, the per-call switches (fused attention, gradient checkpointing) and timm's init.

    Subclasses set :attr:`architecture` and define :attr:`blocks`, :attr:`num_prefix_tokens`,
    :meth:`readout`, :meth:`norm_scope` and :meth:`check`; the geometry is the patch embedding's
    (``patch_embed``) unless overridden.
    """

    def block_points(self, block: nn.Module) -> BlockPoints:
        attn: Any = block.get_submodule("attn")
        return BlockPoints(
            probabilities=attn.attn_drop,
            branch=block.get_submodule("drop_path1"),
            values=value_projection(attn),
            heads=attn.num_heads,
            value_vectors=partial(values_from_projection, attn),
            value_heads=getattr(attn, "num_kv_heads", None),
            attention=attn,
            values_from_input=partial(values_from_input, attn),
        )

    @property
    def grid_size(self) -> tuple[int, int]:
        """Patch grid (h, w)."""
        h, w = self.backbone.patch_embed.grid_size
        return (int(h), int(w))

    @property
    def img_size(self) -> tuple[int, int]:
        """Input size (H, W) in pixels."""
        h, w = self.backbone.patch_embed.img_size
        return (int(h), int(w))

    @property
    def in_chans(self) -> int:
        """Input channels: those of the first convolution or linear layer of the patch embedding."""
        first = next(m for m in self.backbone.patch_embed.modules() if isinstance(m, (nn.Conv2d, nn.Linear)))
        return first.in_channels if isinstance(first, nn.Conv2d) else first.in_features

    @property
    def num_classes(self) -> int:
        """Classes of the backbone's own head; 0 when it has none (the head is outside)."""
        return int(getattr(self.backbone, "num_classes", 0))

    @property
    def head(self) -> nn.Module | None:
        return self.backbone.head if self.num_classes > 0 else None

    def reinitialise(self, layer: nn.Module) -> None:
        """Re-initialise every submodule of ``layer`` with timm's ViT init (trunc-normal Linear,
        ``init_weights`` where a module has one), in place."""
        for module in layer.modules():
            init_weights_vit_timm(module)

    def constant_attention(self) -> AbstractContextManager[None]:
        """Every block's ``attn.attn_drop`` output (A^l) detached for the call."""
        attentions: list[Any] = [block.get_submodule("attn") for block in self.blocks]
        return detached_outputs([attn.attn_drop for attn in attentions])

    @contextmanager
    def explain_mode(self, model: nn.Module | None = None) -> Iterator[None]:
        """Eval mode (of ``model``, default the backbone), non-fused attention, no gradient
        checkpointing; everything restored on exit."""
        model = self.backbone if model is None else model
        attentions: list[Any] = [block.get_submodule("attn") for block in self.blocks]
        fused = [(attn, attn.fused_attn) for attn in attentions]
        checkpointing = getattr(self.backbone, "grad_checkpointing", None)
        try:
            for attn, _ in fused:
                attn.fused_attn = False
            if checkpointing is not None:
                self.backbone.grad_checkpointing = False
            with eval_mode(model, self.backbone):
                yield
        finally:
            for attn, flag in fused:
                attn.fused_attn = flag
            if checkpointing is not None:
                self.backbone.grad_checkpointing = checkpointing
