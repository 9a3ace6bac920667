"""``explain_segmentation``: one capture, one propagation, maps over the image's pixels."""
from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

import torch.nn.functional as F
from torch import Tensor, nn

from gradskip_lightning.methods.gradskip import GradSkipOptions
from gradskip_lightning.segmentation.capture import capture_segmentation
from gradskip_lightning.segmentation.propagation import SEGMENTATION_METHODS, SegmentationMethod


@dataclass
class SegmentationExplanation:
    """Maps of one batch and what they explain.

    Attributes:
        maps: relevance over pixels, (B, H, W) (the token map bilinearly upsampled).
        token_maps: relevance over the stage-0 token grid, (B, h, w), summing to 1 per image.
        targets: (B,) classes; region: (B, h, w) bool, the explained logit positions.
        valid: (B,) False where the default region was empty and the whole grid was explained.
        logits: (B, K, h, w); method: the method's name.
    """

    maps: Tensor
    token_maps: Tensor
    targets: Tensor
    region: Tensor
    valid: Tensor
    logits: Tensor
    method: SegmentationMethod


def explain_segmentation(
    model: nn.Module,
    images: Tensor,
    targets_class: Tensor,
    region: Tensor | None = None,
    method: SegmentationMethod = "gradskip",
    options: GradSkipOptions | None = None,
) -> SegmentationExplanation:
    """Explain y = sum over the region of logit_c for each image of a batch.

    Args:
        model: an HF ``SegformerForSemanticSegmentation``.
        images: (B, C, H, W) float, normalised as the model expects.
        targets_class: (B,) long, c per image.
        region: (B, h, w) bool on the logits grid, or None for the positions predicted as c.
        method: "gradskip", "rollout" or "chefer".
        options: GradSkip's options (default :class:`GradSkipOptions`).

    Returns:
        The :class:`SegmentationExplanation`.

    Raises:
        ValueError: unknown method, bad targets or region. TypeError: not a SegFormer model.
    """
    if method not in SEGMENTATION_METHODS:
        raise ValueError(f"method must be one of {get_args(SegmentationMethod)}, got {method!r}")
    capture = capture_segmentation(model, images, targets_class, region)
    relevance = SEGMENTATION_METHODS[method](capture, options or GradSkipOptions())
    token_maps = relevance.token_map
    maps = F.interpolate(token_maps[:, None], size=images.shape[-2:], mode="bilinear", align_corners=False)[:, 0]
    return SegmentationExplanation(
        maps, token_maps, capture.targets, capture.region, capture.valid, capture.logits, method
    )
