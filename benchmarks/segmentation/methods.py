"""The segmentation benchmark's methods as map functions ``(model, images, targets) -> maps (B, H, W)``:
every :data:`~gradskip_lightning.families.segformer.SEGFORMER_METHODS` entry of the
:class:`~gradskip_lightning.families.segformer.SegFormerExplainer`, and pytorch-grad-cam's GradCAM as
the external peer. Each explains, for image b, the sum of the logits of class ``targets[b]`` over
the positions predicted as that class (the whole grid where there are none).

Grad-CAM's target layer is the SegFormer decode head's fused feature map at stage-0 resolution
(H/4, W/4): the output of ``decode_head.activation``, i.e. ReLU(BatchNorm(linear_fuse(concatenated
upsampled stage features))), the input of the 1x1 classifier. Its target is pytorch-grad-cam's
``SemanticSegmentationTarget(class, region)``; its maps are the library's (ReLU, min-max normalised
per image, resized to the input).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from benchmarks.faithfulness.maps import MapFn
from gradskip_lightning.families.segformer import (
    SEGFORMER_METHODS,
    SegFormerExplainer,
    find_segformer,
    segmentation_logits,
    target_region,
)

from .records import MethodKind

#: The method every other method is compared with.
SUBJECT = "gradskip"
#: What the Grad-CAM target layer is, for the report.
GRAD_CAM_LAYER = "decode_head.activation (the decode head's fused features, ReLU output, stage-0 grid)"


@dataclass(frozen=True)
class SegmentationMethodSpec:
    """A method: its kind, the Python package it needs (None: none beyond this library), its maps."""

    kind: MethodKind
    package: str | None
    fn: MapFn


def engine_map(method: str) -> MapFn:
    """Map function of a :class:`~gradskip_lightning.families.segformer.SegFormerExplainer` method
    (default options, default region)."""

    def explain(model: nn.Module, images: Tensor, targets: Tensor) -> Tensor:
        return SegFormerExplainer(model, method).explain(images, targets).maps

    return explain


class SegmentationLogits(nn.Module):
    """``model`` (an HF SegFormer or a module around one) as images (B, C, H, W) -> logits tensor
    (B, K, h, w), what pytorch-grad-cam needs."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: Tensor) -> Tensor:
        return segmentation_logits(self.model, images)


def grad_cam_layer(model: nn.Module) -> nn.Module:
    """Grad-CAM's target layer in ``model``: the decode head's fused features (see :data:`GRAD_CAM_LAYER`)."""
    return find_segformer(model).decode_head.activation


def grad_cam(model: nn.Module, images: Tensor, targets: Tensor) -> Tensor:
    """pytorch-grad-cam GradCAM maps (B, H, W) of ``SemanticSegmentationTarget(targets[b], region_b)``,
    region_b = the positions predicted as ``targets[b]`` (the whole grid where there are none).

    The library's backward writes parameter ``.grad``; it is cleared afterwards.
    """
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import SemanticSegmentationTarget

    wrapped = SegmentationLogits(model)
    training = model.training
    try:
        with torch.no_grad():
            regions, _ = target_region(wrapped.eval()(images), targets, None)
        cam_targets = [
            SemanticSegmentationTarget(int(c), region.float().cpu().numpy()) for c, region in zip(targets, regions)
        ]
        with torch.enable_grad(), GradCAM(model=wrapped, target_layers=[grad_cam_layer(model)]) as cam:
            maps = cam(input_tensor=images, targets=cam_targets)
    finally:
        model.zero_grad(set_to_none=True)
        model.train(training)
    return torch.from_numpy(maps).float().reshape(images.shape[0], *images.shape[-2:])


#: Method name -> its spec: the explainer's methods, then the peer; a new method is one entry.
METHODS: dict[str, SegmentationMethodSpec] = {
    **{name: SegmentationMethodSpec("engine", None, engine_map(name)) for name in SEGFORMER_METHODS},
    "grad_cam": SegmentationMethodSpec("peer", "pytorch_grad_cam", grad_cam),
}


def available_methods(names: list[str]) -> list[str]:
    """The methods among ``names`` whose package is installed; prints a note for each one skipped."""
    found = []
    for name in names:
        package = METHODS[name].package
        if package is not None and importlib.util.find_spec(package) is None:
            print(f"note: {name} skipped: the optional package {package!r} is not installed")
        else:
            found.append(name)
    return found


@dataclass(frozen=True)
class SegmentationScore:
    """A score column: ``name`` (key in the records), ``label`` (column title), direction."""

    name: str
    label: str
    higher_is_better: bool

    @property
    def title(self) -> str:
        """The label with its direction arrow, e.g. "mIoU ↑"."""
        return f"{self.label} {'↑' if self.higher_is_better else '↓'}"


#: Per-image score columns, in table order: the localisation scores of
#: :func:`~gradskip_lightning.metrics.segmentation_scores_per_image`, then the region-logit
#: insertion/deletion of :func:`~gradskip_lightning.metrics.insertion_deletion` with its start's
#: own score (logit units).
SCORES: tuple[SegmentationScore, ...] = (
    SegmentationScore("pixel_accuracy", "PA", True),
    SegmentationScore("mean_iou", "mIoU", True),
    SegmentationScore("average_precision", "AP", True),
    SegmentationScore("insertion", "ins", True),
    SegmentationScore("deletion", "del", False),
    SegmentationScore("insertion_minus_deletion", "ins−del", True),
    # the start image's region logit: the same for every method; near the clean one, insertion is saturated
    SegmentationScore("insertion_start", "ins start", False),
)
#: Scores pooled over all pixels of the subset (the paper's PA and mIoU).
POOLED: tuple[SegmentationScore, ...] = (
    SegmentationScore("pixel_accuracy", "pooled PA", True),
    SegmentationScore("mean_iou", "pooled mIoU", True),
)
