"""timm ``VisionTransformer`` (vit_*, deit_*, hybrids, vitamin) and the distilled DeiT."""

from __future__ import annotations

from timm.models.deit import VisionTransformerDistilled
from timm.models.vision_transformer import VisionTransformer

from gradskip_lightning.core.adapter import UnsupportedModel
from gradskip_lightning.families.timm_vit import TimmViTAdapter


class VisionTransformerAdapter(TimmViTAdapter):
    """Pre-norm (and ``ResPostBlock`` post-norm) ViTs; pooling "token", "avg" or "map".

    Example:
        >>> import timm
        >>> deit = timm.create_model("deit_tiny_distilled_patch16_224", img_size=32, patch_size=8, depth=2)
        >>> VisionTransformerAdapter(deit).read_tokens  # the CLS and distillation heads are averaged
        2
    """

    architecture = "vision_transformer"
    backbone_types = (VisionTransformer, VisionTransformerDistilled)

    def check(self) -> None:
        for i, block in enumerate(self.blocks):
            attn = getattr(block, "attn", None)
            if attn is None:
                raise UnsupportedModel(
                    f"Cannot explain {type(self.backbone).__name__}: block {i} is a {type(block).__name__}, "
                    "a parallel block (attention branches beside the MLP, no single `attn` sub-module): "
                    "no one attention branch to gate."
                )
            if type(attn).__name__ == "DiffAttention":
                raise UnsupportedModel(
                    f"Cannot explain {type(self.backbone).__name__}: block {i} uses DiffAttention, a difference "
                    "of two softmax maps: its attention is signed, not a probability matrix to propagate through."
                )
        super().check()

    @property
    def read_tokens(self) -> int:
        distilled = getattr(self.backbone, "dist_token", None) is not None
        return 2 if distilled and not getattr(self.backbone, "distilled_training", False) else 1
