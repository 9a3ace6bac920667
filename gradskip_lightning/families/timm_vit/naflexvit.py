"""timm ``NaFlexVit`` fed image batches (B, C, H, W) at the size of its position-embedding grid.

Its token grid and patch size live on ``embeds`` (not ``patch_embed``); the blocks are timm ViT
blocks. Variable-resolution patch dictionaries are not explained (maps need one fixed grid).
"""

from __future__ import annotations

from timm.models.naflexvit import NaFlexVit
from torch import nn

from gradskip_lightning.families.timm_vit import TimmViTAdapter


class NaFlexVitAdapter(TimmViTAdapter):
    """NaFlexViT backbones on images at their default size; pooling "token", "avg" or "map".

    Example:
        >>> import timm
        >>> m = timm.create_model("naflexvit_base_patch16_gap", patch_size=8, pos_embed_grid_size=(4, 4), depth=2)
        >>> NaFlexVitAdapter(m).grid_size, NaFlexVitAdapter(m).img_size
        ((4, 4), (32, 32))
    """

    architecture = "naflexvit"
    backbone_types = (NaFlexVit,)

    @property
    def grid_size(self) -> tuple[int, int]:
        return tuple(self.backbone.embeds.pos_embed_grid_size)

    @property
    def img_size(self) -> tuple[int, int]:
        return tuple(g * p for g, p in zip(self.grid_size, self.backbone.embeds.patch_size))

    @property
    def in_chans(self) -> int:
        proj = self.backbone.embeds.proj
        return proj.in_channels if isinstance(proj, nn.Conv2d) else int(self.backbone.embeds.in_chans)
