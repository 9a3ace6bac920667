"""timm ``Beit``: relative position bias (per block or shared), added to the attention logits.

The bias enters before the softmax, so the captured attention probabilities already hold it; the
value vectors come from the fused ``qkv`` weight with BEiT's separate ``v_bias``.
"""

from __future__ import annotations

from timm.models.beit import Beit

from gradskip_lightning.families.timm_vit import TimmViTAdapter


class BeitAdapter(TimmViTAdapter):
    """BEiT backbones; pooling "token" or "avg".

    Example:
        >>> import timm
        >>> beit = timm.create_model("beit_base_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=3)
        >>> BeitAdapter(beit).num_prefix_tokens
        1
    """

    architecture = "beit"
    backbone_types = (Beit,)
