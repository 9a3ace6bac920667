"""The torchvision ViT family: ``torchvision.models.VisionTransformer``, explained by
:class:`TorchvisionViTExplainer`."""

from gradskip_lightning.families.torchvision_vit.adapter import TorchvisionViTAdapter, explicit_attention
from gradskip_lightning.families.torchvision_vit.explainer import FAMILY, TorchvisionViTExplainer

__all__ = ["FAMILY", "TorchvisionViTAdapter", "TorchvisionViTExplainer", "explicit_attention"]
