"""timm ``SwinTransformer``: where its windows put each token, and the timm pass through its blocks.

A Swin block's attention runs per window: A^l is (B * nW, H, w, w) over the w = Ws^2 tokens of each
of the nW windows of the stage's (cyclically shifted) grid, windows image-major as timm's
``window_partition`` orders them. :class:`BlockWindows` maps a block's windows to the tokens of its
stage's grid (h_s, w_s) and back; stage s > 0 starts with a ``PatchMerging`` that concatenates each
2 x 2 cell of stage s-1 tokens into one token. Everything else the shared pass gives unchanged
(:class:`~gradskip_lightning.core.streaming.StreamedPass`, at the timm blocks' hook points:
``attn.attn_drop``, ``drop_path1``, ``attn.qkv``), with block tensors on the grid: x^{l-1}, a^l,
dy/du^l (B, h_s, w_s, D).

Shapes: B images, s a stage, (h_s, w_s) its token grid, N_s = h_s * w_s, nW its windows, w tokens
per window, H heads, D channels.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import torch
from timm.models.swin_transformer import PatchMerging, SwinTransformerBlock, window_partition
from torch import Tensor, nn

from gradskip_lightning.core.adapter import UnsupportedModel, parameter_holders_outside
from gradskip_lightning.families.timm_common import TimmBlocksAdapter
from gradskip_lightning.methods.grids import spread_to_cells

__all__ = ["BlockWindows", "SwinAdapter", "SwinLayout"]


@dataclass(frozen=True)
class BlockWindows:
    """Where one block's windows lie on its stage's grid.

    Attributes:
        layer: the block's index over all stages (0 = bottom); stage: its stage.
        order: (nW * w,) long, the grid token (row-major) at each window slot, windows first.
        inverse: (N_s,) long, the window slot of each grid token.
        windows: nW.
    """

    layer: int
    stage: int
    order: Tensor
    inverse: Tensor
    windows: int

    def split(self, tokens: Tensor) -> Tensor:
        """(B, N_s) per token -> (B * nW, w) per window slot."""
        return tokens[:, self.order].reshape(tokens.shape[0] * self.windows, -1)

    def merge(self, slots: Tensor) -> Tensor:
        """(B * nW, w) per window slot -> (B, N_s) per token."""
        return slots.reshape(-1, self.order.shape[0])[:, self.inverse]

    def per_image(self, attn: Tensor) -> Tensor:
        """(B * nW, H, w, w) -> (B, H, nW * w, w): every query row of an image's windows, per head."""
        return attn.reshape(-1, self.windows, *attn.shape[1:]).transpose(1, 2).flatten(2, 3)


@dataclass(frozen=True)
class SwinLayout:
    """The stages' grids, bottom first, and every block's windows, bottom first."""

    grids: tuple[tuple[int, int], ...]
    blocks: tuple[BlockWindows, ...]

    def descend(self, relevance: Tensor, above: int, below: int) -> Tensor:
        """Relevance (B, N_above) on stage ``above``'s grid carried down to stage ``below``'s, (B, N_below):
        through each patch merging, a token's relevance spread evenly over the 2 x 2 cell it merged
        (``spread_to_cells``, clipped where a merging padded an odd grid)."""
        for s in range(above, below, -1):
            relevance = spread_to_cells(relevance, self.grids[s], self.grids[s - 1], 2)
        return relevance


def window_order(
    grid: tuple[int, int], window: tuple[int, int], shift: tuple[int, int], device: torch.device
) -> Tensor:
    """(nW * w,) long: the grid token at each window slot, made by the block's own shift and partition."""
    tokens = torch.arange(grid[0] * grid[1], device=device).reshape(1, *grid, 1)
    if any(shift):
        tokens = torch.roll(tokens, shifts=(-shift[0], -shift[1]), dims=(1, 2))
    return window_partition(tokens, window).flatten()


class SwinAdapter(TimmBlocksAdapter):
    """A timm ``SwinTransformer`` (v1: pre-norm window attention, relative position bias, shifted
    windows, patch merging, average pooling); the maps live on the stage-0 grid.

    Example:
        >>> import timm
        >>> swin = timm.create_model("swin_tiny_patch4_window7_224", img_size=32, patch_size=2, window_size=4,
        ...                          embed_dim=32, depths=(2, 2), num_heads=(2, 4), num_classes=3)
        >>> adapter = SwinAdapter(swin)
        >>> adapter.grid_size, adapter.layout(torch.device("cpu")).grids, len(adapter.blocks)
        ((16, 16), ((16, 16), (8, 8)), 4)
    """

    architecture = "swin_transformer"
    pools = ("avg",)
    backbone: Any

    def check(self) -> None:
        name = type(self.backbone).__name__
        pool = self.backbone.global_pool
        if pool != "avg":
            reason = {
                "": "global_pool='' returns the token grid: the pooling is outside the backbone and unknown",
            }.get(pool, f"global_pool={pool!r} reads a different token per channel: no token distribution")
            raise UnsupportedModel(f"Cannot explain {name}: {reason}. Supported pooling: {self.pools}.")
        for s, stage in enumerate(self.backbone.layers):
            merging = isinstance(stage.downsample, PatchMerging)
            if merging != (s > 0) or (s == 0 and not isinstance(stage.downsample, nn.Identity)):
                raise UnsupportedModel(
                    f"Cannot explain {name}: stage {s} starts with a {type(stage.downsample).__name__}; expected "
                    "PatchMerging between stages and none before stage 0."
                )
            for j, block in enumerate(stage.blocks):
                if type(block) is not SwinTransformerBlock:
                    raise UnsupportedModel(f"Cannot explain {name}: stage {s} block {j} is a {type(block).__name__}.")
                grid, window = cast(Any, block).input_resolution, cast(Any, block).window_size  # 2-tuples
                if any(r % w for r, w in zip(grid, window)):
                    raise UnsupportedModel(
                        f"Cannot explain {name}: stage {s}'s grid {tuple(grid)} is not a multiple "
                        f"of its window {tuple(window)}: padded tokens would take attention relevance."
                    )

    @property
    def blocks(self) -> list[nn.Module]:
        return [block for stage in self.backbone.layers for block in stage.blocks]

    @property
    def num_prefix_tokens(self) -> int:
        return 0

    def layout(self, device: torch.device) -> SwinLayout:
        """The stage grids and every block's :class:`BlockWindows`, index tensors on ``device``."""
        grids: list[tuple[int, int]] = []
        windows: list[BlockWindows] = []
        for s, stage in enumerate(self.backbone.layers):
            grids.append(tuple(stage.output_resolution))
            for block in stage.blocks:
                order = window_order(grids[-1], tuple(block.window_size), tuple(block.shift_size), device)
                count = order.shape[0] // (block.window_size[0] * block.window_size[1])
                windows.append(BlockWindows(len(windows), s, order, order.argsort(), count))
        return SwinLayout(tuple(grids), tuple(windows))

    def readout(
        self, batch: int, pool_input: Tensor | None, device: torch.device, dtype: torch.dtype = torch.float32
    ) -> Tensor:
        """Average pooling of the top stage: uniform over its N_L tokens, (B, N_L)."""
        h, w = self.backbone.layers[-1].output_resolution
        return torch.full((batch, h * w), 1.0 / (h * w), device=device, dtype=dtype)

    def cascade(self, model: nn.Module) -> list[tuple[str, list[nn.Module]]]:
        """``"head"`` (the backbone's head and the modules of ``model`` outside it holding
        parameters), then ``"layers.{s}.blocks.{j}"`` from the top stage's last block down."""
        outside = parameter_holders_outside(model, self.backbone)
        head = [self.backbone.head] if self.num_classes > 0 else []
        blocks = [
            (f"layers.{s}.blocks.{j}", [block])
            for s, stage in enumerate(self.backbone.layers)
            for j, block in enumerate(stage.blocks)
        ]
        return [("head", head + outside), *blocks[::-1]]

    def norm_scope(self) -> list[nn.Module]:
        """The stages (with the patch mergings' norms), the final norm and the head."""
        return [self.backbone.layers, self.backbone.norm, self.backbone.head]

    @contextmanager
    def explain_mode(self, model: nn.Module | None = None) -> Iterator[None]:
        """As :meth:`TimmBlocksAdapter.explain_mode`, with every stage's gradient checkpointing off too."""
        stages = [(stage, stage.grad_checkpointing) for stage in self.backbone.layers]
        try:
            for stage, _ in stages:
                stage.grad_checkpointing = False
            with super().explain_mode(model):
                yield
        finally:
            for stage, flag in stages:
                stage.grad_checkpointing = flag
