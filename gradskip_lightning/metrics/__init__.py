"""Faithfulness, localisation, class-sensitivity and drift metrics for relevance maps, as torchmetrics and functions.

Perturbation metrics take ``(model, images, targets, maps)``: model images (B, C, H, W) -> logits,
targets (B,) classes, maps (B, H, W) at input resolution, and a required ``patch_size`` that the
caller finds once (``explainer.patch_size``). Metrics depend on tensors and callables only, never on
a model family; input mistakes raise as :mod:`gradskip_lightning.core.validation` says (wrong type or
dtype: TypeError; wrong shape or value: ValueError). Pass an eval-mode model; its mode is
left as it is and it is run under ``torch.no_grad()``. For a segmentation model (logits
(B, K, h, w)) they also take ``regions`` (B, h, w) bool and score the mean region logit.
"""

from .drift import ExplanationDrift, average_ranks, drift, spearman, topk_iou
from .insertion_deletion import InsertionDeletion, insertion_deletion, trapezoid_auc
from .perturbation import (
    CountingModel,
    PerturbationMetric,
    gaussian_blur,
    make_baseline,
    perturbed_probabilities,
    region_scores,
)
from .pointing import PointingGame, default_tolerance, pointing_game
from .randomisation import RandomisationCurve, parameter_randomisation
from .regions import RelevanceMassAccuracy, RelevanceRankAccuracy, relevance_mass_accuracy, relevance_rank_accuracy
from .segmentation import (
    SegmentationScores,
    average_precision,
    segmentation_confusion,
    segmentation_scores,
    segmentation_scores_per_image,
)
from .sensitivity import ClassSensitivity, class_sensitivity, explain_class_sensitivity
from .violation import FaithfulnessViolation, faithfulness_violation

__all__ = [
    "ClassSensitivity",
    "CountingModel",
    "ExplanationDrift",
    "FaithfulnessViolation",
    "InsertionDeletion",
    "PerturbationMetric",
    "PointingGame",
    "RandomisationCurve",
    "RelevanceMassAccuracy",
    "RelevanceRankAccuracy",
    "SegmentationScores",
    "average_precision",
    "average_ranks",
    "class_sensitivity",
    "default_tolerance",
    "drift",
    "explain_class_sensitivity",
    "faithfulness_violation",
    "gaussian_blur",
    "insertion_deletion",
    "make_baseline",
    "parameter_randomisation",
    "perturbed_probabilities",
    "pointing_game",
    "region_scores",
    "relevance_mass_accuracy",
    "relevance_rank_accuracy",
    "segmentation_confusion",
    "segmentation_scores",
    "segmentation_scores_per_image",
    "spearman",
    "topk_iou",
    "trapezoid_auc",
]
