"""Class sensitivity: does a map depend on the class explained?

The Spearman rank correlation between the maps of an image's top-1 and top-2 classes: 1 for a
class-agnostic method (raw attention and rollout by construction), lower for a more class-specific
one.
"""

from __future__ import annotations

from torch import Tensor

from gradskip_lightning.core.explanation import ModelExplainer

from ._mean import ImageMean
from .drift import spearman


def class_sensitivity(maps_top1: Tensor, maps_top2: Tensor) -> Tensor:
    """Spearman correlation (B,) float64 between the maps (B, H, W) of the top-1 and top-2 classes.

    In [-1, 1], lower = more class-specific; NaN where a map is constant.

    Example:
        >>> import torch
        >>> top1 = torch.arange(16.0).reshape(1, 4, 4)
        >>> class_sensitivity(top1, 2 * top1 + 1)  # same ranking: class-agnostic
        tensor([1.], dtype=torch.float64)
    """
    return spearman(maps_top1, maps_top2)


def runner_up_classes(logits: Tensor, top1: Tensor) -> Tensor:
    """(B,) long: each row's highest-scoring class other than ``top1`` (B,), from logits (B, C)."""
    return logits.scatter(1, top1[:, None], float("-inf")).argmax(dim=1)


def explain_class_sensitivity(explainer: ModelExplainer, images: Tensor) -> Tensor:
    """Explain each image's top-1 and top-2 classes and return their :func:`class_sensitivity` (B,).

    Two explain calls: the predicted class first, then the runner-up from the same logits.

    Args:
        explainer: any :class:`~gradskip_lightning.core.explanation.ModelExplainer` of a model with >= 2 classes.
        images: (B, C, H, W), normalised as the model expects.

    Returns:
        Spearman correlation (B,) float64 on the explainer's device; NaN where a map is constant
        (e.g. zeroed as not valid).
    """
    if explainer.num_classes < 2:
        raise ValueError(f"class sensitivity needs a model with >= 2 classes, got num_classes={explainer.num_classes}")
    first = explainer.explain(images)
    second = explainer.explain(images, runner_up_classes(first.logits, first.targets))
    return class_sensitivity(first.maps, second.maps)


class ClassSensitivity(ImageMean):
    """Mean :func:`class_sensitivity` over images, DDP-synchronised; NaN images left out.

    ``update(maps_top1, maps_top2)`` with the two map batches (B, H, W); ``compute()`` returns the
    mean Spearman correlation (lower = more class-specific).

    Example:
        >>> import torch
        >>> metric = ClassSensitivity()
        >>> top1 = torch.arange(16.0).reshape(1, 4, 4)
        >>> metric.update(top1, top1.flip(-1))
        >>> metric.compute().round(decimals=4)
        tensor(0.8824, dtype=torch.float64)
    """

    higher_is_better = False

    def update(self, maps_top1: Tensor, maps_top2: Tensor) -> None:
        """Add a batch of map pairs (B, H, W)."""
        self.add_scores(class_sensitivity(maps_top1, maps_top2))
