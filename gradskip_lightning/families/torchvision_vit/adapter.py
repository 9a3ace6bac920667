"""torchvision ``VisionTransformer`` (vit_b_16, vit_l_32, ...): ``EncoderBlock`` with an
``nn.MultiheadAttention``, a class token read by ``heads``.

The block calls its attention with ``need_weights=False`` (no probabilities, and the weights MHA
can return are not on the path to its output). For one call, :func:`explicit_attention` gives each
block's ``self_attention`` an instance ``forward`` that computes the same output from explicit
probabilities, softmax(q k^T / sqrt(d)) from its input and ``in_proj`` weights, routed through two
identity probes of the adapter (the probabilities (B, H, N, N) and the values (B, N, D)): the hook
points of the pass. Nothing stays patched: the instance attribute is removed on exit.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import cast

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import init_weights_vit_timm
from torch import Tensor, nn
from torchvision.models.vision_transformer import EncoderBlock, VisionTransformer

from gradskip_lightning.core.adapter import PassAdapter, UnsupportedModel
from gradskip_lightning.core.conservative import detached_outputs
from gradskip_lightning.core.streaming import BlockPoints

__all__ = ["TorchvisionViTAdapter", "explicit_attention"]


@contextmanager
def explicit_attention(attention: nn.MultiheadAttention, probabilities: nn.Module, values: nn.Module) -> Iterator[None]:
    """``attention`` computes its self-attention output from explicit probabilities inside the
    block: query = key = value = x (B, N, D), batch first, no mask, eval mode.

    ``probabilities`` gets A (B, H, N, N) and ``values`` the value vectors (B, N, D); their outputs
    are what the attention mixes (identity modules: hook points).
    """
    heads = attention.num_heads

    def forward(query: Tensor, key: Tensor, value: Tensor, *args: object, **kwargs: object) -> tuple[Tensor, None]:
        b, n, d = query.shape
        q, k, v = F.linear(query, attention.in_proj_weight, attention.in_proj_bias).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, heads, d // heads).transpose(1, 2) for t in (q, k, values(v)))
        attn = probabilities((q * (d // heads) ** -0.5 @ k.transpose(-2, -1)).softmax(dim=-1))
        return attention.out_proj((attn @ v).transpose(1, 2).reshape(b, n, d)), None

    attention.forward = forward  # type: ignore[method-assign] # an instance attribute, found first by __call__
    try:
        yield
    finally:
        del attention.forward


class TorchvisionViTAdapter(PassAdapter):
    """torchvision ViTs (class-token read-out; a conv stem counts as the patch embedding).

    Example:
        >>> from torchvision.models import VisionTransformer
        >>> vit = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64)
        >>> adapter = TorchvisionViTAdapter(vit)
        >>> adapter.grid_size, adapter.num_prefix_tokens, adapter.num_classes
        ((4, 4), 1, 1000)
    """

    architecture = "torchvision_vision_transformer"
    backbone: VisionTransformer

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__(backbone)
        self.probabilities = [nn.Identity() for _ in self.blocks]  # per-block hook points, not in the model
        self.values = [nn.Identity() for _ in self.blocks]

    def check(self) -> None:
        name = type(self.backbone).__name__
        for i, block in enumerate(self.blocks):
            attention = getattr(block, "self_attention", None)
            if type(block) is not EncoderBlock or not isinstance(attention, nn.MultiheadAttention):
                raise UnsupportedModel(
                    f"Cannot explain {name}: encoder layer {i} is a {type(block).__name__}, not an EncoderBlock "
                    "with an nn.MultiheadAttention `self_attention`."
                )
            if not (attention.batch_first and attention.in_proj_weight is not None) or attention.bias_k is not None:
                raise UnsupportedModel(
                    f"Cannot explain {name}: encoder layer {i}'s attention is not a batch-first self-attention "
                    "with one in_proj and no bias_k/bias_v."
                )
            if attention.add_zero_attn:
                raise UnsupportedModel(
                    f"Cannot explain {name}: encoder layer {i} adds a zero key (add_zero_attn): its attention rows "
                    "have a key that is no token."
                )

    @property
    def blocks(self) -> list[nn.Module]:
        return list(self.backbone.encoder.layers)

    def block_points(self, block: nn.Module) -> BlockPoints:
        i, layer = self.blocks.index(block), cast(EncoderBlock, block)
        return BlockPoints(self.probabilities[i], layer.dropout, self.values[i], layer.self_attention.num_heads)

    @property
    def num_prefix_tokens(self) -> int:
        return 1

    @property
    def grid_size(self) -> tuple[int, int]:
        side = self.backbone.image_size // self.backbone.patch_size
        return (side, side)

    @property
    def img_size(self) -> tuple[int, int]:
        return (self.backbone.image_size, self.backbone.image_size)

    @property
    def in_chans(self) -> int:
        return next(m for m in self.backbone.conv_proj.modules() if isinstance(m, nn.Conv2d)).in_channels

    @property
    def head(self) -> nn.Module | None:
        """``heads``, unless it holds no Linear (replaced by an identity for an external head)."""
        heads = self.backbone.heads
        return heads if any(isinstance(m, nn.Linear) for m in heads.modules()) else None

    @property
    def num_classes(self) -> int:
        """Outputs of the last Linear of ``heads``; 0 when it has none (the head is outside)."""
        linears = [m for m in self.backbone.heads.modules() if isinstance(m, nn.Linear)]
        return linears[-1].out_features if linears else 0

    def readout(
        self, batch: int, pool_input: Tensor | None, device: torch.device, dtype: torch.dtype = torch.float32
    ) -> Tensor:
        """One-hot on the class token, (B, N)."""
        r = torch.zeros(batch, 1 + self.grid_size[0] * self.grid_size[1], device=device, dtype=dtype)
        r[:, 0] = 1.0
        return r

    def norm_scope(self) -> list[nn.Module]:
        return [self.backbone.encoder.layers, self.backbone.encoder.ln, self.backbone.heads]

    def reinitialise(self, layer: nn.Module) -> None:
        """timm's ViT init of every Linear; an ``nn.MultiheadAttention``'s in_proj by its own reset.

        Private API, kept on purpose: ``MultiheadAttention._reset_parameters`` is torch's own init of
        the fused in_proj (no public method re-runs it); tests/callbacks/test_private_apis.py fails if it goes.
        """
        for module in layer.modules():
            if isinstance(module, nn.MultiheadAttention):
                module._reset_parameters()
            else:
                init_weights_vit_timm(module)

    @contextmanager
    def explain_mode(self, model: nn.Module | None = None) -> Iterator[None]:
        """Eval mode, and every block's attention explicit (:func:`explicit_attention`); restored."""
        with ExitStack() as stack:
            stack.enter_context(super().explain_mode(model))
            for block, probabilities, values in zip(self.blocks, self.probabilities, self.values):
                attention = cast(EncoderBlock, block).self_attention
                stack.enter_context(explicit_attention(attention, probabilities, values))
            yield

    def constant_attention(self) -> AbstractContextManager[None]:
        """The probabilities' probes detached for the call."""
        return detached_outputs(self.probabilities)
