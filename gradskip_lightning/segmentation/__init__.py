"""GradSkip for semantic segmentation with HF ``transformers`` SegFormer (imported only here,
so the classification path never needs ``transformers``)."""
from gradskip_lightning.segmentation.capture import (
    SegmentationCapture,
    StageTensors,
    capture_segmentation,
)
from gradskip_lightning.segmentation.explain import SegmentationExplanation, explain_segmentation
from gradskip_lightning.segmentation.propagation import (
    CONSERVING,
    SEGMENTATION_METHODS,
    BlockRelevance,
    SegmentationMethod,
    SegmentationRelevance,
    StageRelevance,
    cell_spread,
    chefer_segmentation,
    decoder_starts,
    gradskip_segmentation,
    key_to_token,
    propagate,
    rollout_segmentation,
)

__all__ = [
    "CONSERVING",
    "SEGMENTATION_METHODS",
    "BlockRelevance",
    "SegmentationCapture",
    "SegmentationExplanation",
    "SegmentationMethod",
    "SegmentationRelevance",
    "StageRelevance",
    "StageTensors",
    "capture_segmentation",
    "cell_spread",
    "chefer_segmentation",
    "decoder_starts",
    "explain_segmentation",
    "gradskip_segmentation",
    "key_to_token",
    "propagate",
    "rollout_segmentation",
]
