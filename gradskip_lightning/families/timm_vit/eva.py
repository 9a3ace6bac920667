"""timm ``Eva`` (EVA, EVA-02, and the rope ViTs built on it): rotary embeddings, SwiGLU MLPs.

Rotary embeddings enter the queries and keys only, so the captured post-softmax attention already
holds them; SwiGLU is token-wise. Neither needs anything beyond the generic capture.
"""

from __future__ import annotations

from timm.models.eva import Eva

from gradskip_lightning.families.timm_vit import TimmViTAdapter


class EvaAdapter(TimmViTAdapter):
    """EVA/EVA-02 backbones; pooling "token", "avg" or "map".

    Example:
        >>> import timm
        >>> eva = timm.create_model("eva02_tiny_patch14_224", img_size=28, depth=2, num_classes=3)
        >>> EvaAdapter(eva).grid_size
        (2, 2)
    """

    architecture = "eva"
    backbone_types = (Eva,)
