"""The LightningModules that train the example models: :class:`ViTClassifier` (any timm model,
classification or multi-label) and, in :mod:`.segmentation` (it needs ``transformers``), the
SegFormer ``SegmentationModule``."""

from gradskip_lightning.training.classifier import DEFAULT_MODEL, LINKED_FROM_DATA, TrainedModule, ViTClassifier

__all__ = ["DEFAULT_MODEL", "LINKED_FROM_DATA", "TrainedModule", "ViTClassifier"]
