"""GradSkip for semantic segmentation with HF ``transformers`` SegFormer: the explainer, the
methods and :class:`~gradskip_lightning.segmentation.module.SegmentationModule`.

``transformers`` is imported only when a SegFormer is used (``SegmentationModule`` is loaded on
first access), so the classification path never needs it.
"""

from gradskip_lightning.segmentation.capture import (
    SegformerCascade,
    SegmentationCapture,
    StageTensors,
    capture_segmentation,
    find_segformer,
    most_predicted_class,
)
from gradskip_lightning.segmentation.explainer import (
    SegmentationExplainer,
    SegmentationExplanation,
    explain_segmentation,
)
from gradskip_lightning.segmentation.propagation import (
    CONSERVING,
    SEGMENTATION_METHODS,
    BlockRelevance,
    SegmentationMethod,
    SegmentationRelevance,
    SegmentationSpec,
    StageRelevance,
    cell_spread,
    chefer_segmentation,
    decoder_starts,
    gradskip_segmentation,
    key_to_token,
    propagate,
    random_segmentation,
    raw_attention_segmentation,
    rollout_segmentation,
    segmentation_spec,
    spread_to_cells,
)

__all__ = [
    "CONSERVING",
    "SEGMENTATION_METHODS",
    "BlockRelevance",
    "SegformerCascade",
    "SegmentationModule",
    "SegmentationCapture",
    "SegmentationExplainer",
    "SegmentationExplanation",
    "SegmentationMethod",
    "SegmentationRelevance",
    "SegmentationSpec",
    "StageRelevance",
    "StageTensors",
    "capture_segmentation",
    "cell_spread",
    "chefer_segmentation",
    "decoder_starts",
    "explain_segmentation",
    "find_segformer",
    "gradskip_segmentation",
    "key_to_token",
    "most_predicted_class",
    "propagate",
    "random_segmentation",
    "raw_attention_segmentation",
    "rollout_segmentation",
    "segmentation_spec",
    "spread_to_cells",
]


def __getattr__(name: str):
    """``SegmentationModule`` on first access (it imports ``transformers``)."""
    if name == "SegmentationModule":
        from gradskip_lightning.segmentation.module import SegmentationModule

        return SegmentationModule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
