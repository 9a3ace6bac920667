"""The SegFormer family: HF ``transformers`` ``SegformerForSemanticSegmentation``, its capture
(:mod:`.capture`), its methods (:mod:`.propagation`) and :class:`SegFormerExplainer`.

``transformers`` is imported only when a SegFormer is explained, so the classification path never
needs it; the training module is :class:`gradskip_lightning.training.SegmentationModule`.
"""

from gradskip_lightning.families.segformer.capture import (
    SEGFORMER,
    SegformerCascade,
    SegmentationCapture,
    StageTensors,
    capture_segmentation,
    explain_mode,
    find_segformer,
    is_segformer,
    most_predicted_class,
    segmentation_logits,
    target_region,
)
from gradskip_lightning.families.segformer.explainer import FAMILY, SegFormerExplainer, SegmentationExplanation
from gradskip_lightning.families.segformer.propagation import (
    CONSERVING,
    SEGFORMER_METHODS,
    BlockRelevance,
    SegFormerMethod,
    SegmentationRelevance,
    StageRelevance,
    chefer_segmentation,
    decoder_starts,
    gradskip_segmentation,
    key_to_token,
    propagate,
    random_segmentation,
    raw_attention_segmentation,
    rollout_segmentation,
)

__all__ = [
    "CONSERVING",
    "FAMILY",
    "SEGFORMER",
    "SEGFORMER_METHODS",
    "BlockRelevance",
    "SegFormerExplainer",
    "SegFormerMethod",
    "SegformerCascade",
    "SegmentationCapture",
    "SegmentationExplanation",
    "SegmentationRelevance",
    "StageRelevance",
    "StageTensors",
    "capture_segmentation",
    "chefer_segmentation",
    "decoder_starts",
    "explain_mode",
    "find_segformer",
    "gradskip_segmentation",
    "is_segformer",
    "key_to_token",
    "most_predicted_class",
    "propagate",
    "random_segmentation",
    "raw_attention_segmentation",
    "rollout_segmentation",
    "segmentation_logits",
    "target_region",
]
