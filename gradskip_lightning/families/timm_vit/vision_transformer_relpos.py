"""timm ``VisionTransformerRelPos``: relative position bias or MLP, pre-norm and res-post-norm blocks.

The bias enters before the softmax (captured attention holds it). In a res-post-norm block
(x + norm1(attn(x))) the attention branch is the normalised output, still what ``drop_path1``
adds to the residual stream, so the skip gates read it unchanged.
"""

from __future__ import annotations

from timm.models.vision_transformer_relpos import VisionTransformerRelPos

from gradskip_lightning.families.timm_vit import TimmViTAdapter


class RelPosAdapter(TimmViTAdapter):
    """Relative-position ViTs; pooling "token" or "avg".

    Example:
        >>> import timm
        >>> m = timm.create_model("vit_relpos_small_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=3)
        >>> RelPosAdapter(m).num_prefix_tokens, RelPosAdapter(m).backbone.global_pool
        (0, 'avg')
    """

    architecture = "vision_transformer_relpos"
    backbone_types = (VisionTransformerRelPos,)
