"""timm's Vision Transformers: :class:`TimmViTAdapter`, the base of every timm ViT architecture's
adapter (:mod:`.vision_transformer`, :mod:`.beit`, :mod:`.eva`, :mod:`.naflexvit`,
:mod:`.vision_transformer_relpos`), and :func:`adapter_for`, which picks the architecture's adapter.

The pass is the shared one (:mod:`gradskip_lightning.core.streaming`) at the hook points every timm
block has (:class:`~gradskip_lightning.families.timm_common.TimmBlocksAdapter`); this module adds what
timm's ViT classes share: pooling ("token", "avg", attention pooling "map"), the patch embedding's
geometry and the norms after the blocks.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gradskip_lightning.core.adapter import UnsupportedModel
from gradskip_lightning.families.timm_common import TimmBlocksAdapter

__all__ = ["TimmViTAdapter", "latent_attention"]


class TimmViTAdapter(TimmBlocksAdapter):
    """Access to one timm ViT backbone class: its blocks, token grid, prefix tokens and pooling.

    Subclasses set :attr:`architecture` and :attr:`backbone_types`, and override :meth:`check` and
    the geometry properties whose attribute names differ from timm's ``VisionTransformer``.

    Args:
        backbone: an instance of one of :attr:`backbone_types`.
    """

    #: The timm classes this adapter explains (exactly these classes, not subclasses).
    backbone_types: ClassVar[tuple[type[nn.Module], ...]]
    #: Pooling modes the family's ``global_pool`` may take that this adapter explains.
    pools: ClassVar[tuple[str, ...]] = ("token", "avg", "map")

    def check(self) -> None:
        """Raise :class:`UnsupportedModel` when this backbone's configuration cannot be explained."""
        name = type(self.backbone).__name__
        pool = self.backbone.global_pool
        if pool not in self.pools:
            reason = {
                "": "global_pool='' returns all tokens: the pooling is outside the backbone and unknown",
                "max": "max pooling reads a different token per channel: no token distribution to start from",
                "avgmax": "avg+max pooling reads a different token per channel: no token distribution to start from",
            }.get(pool, f"global_pool={pool!r} is not a known pooling")
            raise UnsupportedModel(f"Cannot explain {name}: {reason}. Supported pooling: {self.pools}.")
        for i, block in enumerate(self.blocks):
            attn = getattr(block, "attn", None)
            needed = ("attn_drop", "fused_attn", "num_heads")
            if attn is None or not all(hasattr(attn, n) for n in needed) or not hasattr(block, "drop_path1"):
                raise UnsupportedModel(
                    f"Cannot explain {name}: block {i} ({type(block).__name__}) is not a residual block "
                    f"with one softmax attention (attn.attn_drop, attn.fused_attn, drop_path1)."
                )

    @property
    def blocks(self) -> list[Any]:
        """The transformer blocks, bottom first."""
        return list(self.backbone.blocks)

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: CLS, distillation, register tokens."""
        return int(self.backbone.num_prefix_tokens)

    @property
    def read_tokens(self) -> int:
        """How many leading tokens a ``"token"`` pooling averages (2 for a distilled DeiT)."""
        return 1

    def readout(
        self, batch: int, pool_input: Tensor | None, device: torch.device, dtype: torch.dtype = torch.float32
    ) -> Tensor:
        """The token distribution the pooling reads, (B, N), each row summing to 1.

        ``"token"`` reads the first :attr:`read_tokens` tokens; ``"avg"`` the patch tokens
        uniformly (all tokens when the backbone pools prefix tokens too); ``"map"`` (attention
        pooling) what its latent queries attend to, head and query mean, from ``pool_input``
        (B, N or P, D), the tokens entering the pool.
        """
        pool = self.backbone.global_pool
        prefix = self.num_prefix_tokens
        n = prefix + self.grid_size[0] * self.grid_size[1]
        if pool == "map":  # a pool fed the patches only reads 0 from the prefix tokens
            if pool_input is None:
                raise ValueError("attention pooling reads the tokens entering the pool: pass pool_input")
            read = latent_attention(self.backbone.attn_pool, pool_input)
            return F.pad(read, (n - read.shape[1], 0))
        r = torch.zeros(batch, n, device=device, dtype=dtype)
        if pool == "token":
            r[:, : self.read_tokens] = 1.0 / self.read_tokens
        else:
            first = 0 if getattr(self.backbone, "pool_include_prefix", False) else prefix
            r[:, first:] = 1.0 / (n - first)
        return r

    @property
    def pool_input_module(self) -> nn.Module | None:
        """The attention pool of pooling "map" (its input: the tokens it reads), else None."""
        return self.backbone.attn_pool if self.backbone.global_pool == "map" else None

    def norm_scope(self) -> list[nn.Module]:
        """The backbone's children from the blocks on (blocks, final norms, pooling, head): where a
        conservative capture holds norm denominators constant."""
        children = list(self.backbone.children())
        first = next(i for i, child in enumerate(children) if child is self.backbone.blocks)
        return children[first:]


def latent_attention(pool: Any, x: Tensor) -> Tensor:
    """What timm's ``AttentionPoolLatent`` reads: softmax(q k^T) of its latent queries over the
    tokens x (B, N, D), mean over heads and queries, (B, N), rows summing to 1."""
    b, n, _ = x.shape
    if pool.pos_embed is not None:
        x = x + pool.pos_embed.unsqueeze(0).to(x.dtype)
    q = pool.q(pool.latent.expand(b, -1, -1)).reshape(b, pool.latent_len, pool.num_heads, pool.head_dim)
    k = pool.kv(x).reshape(b, n, 2, pool.num_heads, pool.head_dim)[:, :, 0]
    q, k = pool.q_norm(q.transpose(1, 2)), pool.k_norm(k.transpose(1, 2))
    attn = (q * pool.scale @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, H, latent_len, N)
    return attn.mean(dim=(1, 2))
