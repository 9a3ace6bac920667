"""The HF ViT family: ``transformers`` ViT, DeiT (with the distillation token), DINOv2 (register
tokens where present) and BEiT, as classifiers or base models, explained by :class:`HFViTExplainer`."""

from gradskip_lightning.families.hf_vit.adapter import HF_MODELS, HFViTAdapter, LogitsOf, is_hf_vit
from gradskip_lightning.families.hf_vit.explainer import FAMILY, HFViTExplainer

__all__ = ["FAMILY", "HF_MODELS", "HFViTAdapter", "HFViTExplainer", "LogitsOf", "is_hf_vit"]
