"""The timm ViT family: ``VisionTransformer`` (ViT, DeiT, hybrids, vitamin), ``Eva``, ``Beit``,
``VisionTransformerRelPos`` and ``NaFlexVit``, one adapter per class, explained by
:class:`TimmViTExplainer`."""

from gradskip_lightning.families.timm_vit.adapter import TimmViTAdapter
from gradskip_lightning.families.timm_vit.explainer import ARCHITECTURES, FAMILY, TimmViTExplainer, adapter_for

__all__ = ["ARCHITECTURES", "FAMILY", "TimmViTAdapter", "TimmViTExplainer", "adapter_for"]
