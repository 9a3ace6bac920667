"""SegmentationModule: a LightningModule around a random-initialised HF SegFormer."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy
from transformers import SegformerConfig, SegformerForSemanticSegmentation

from gradskip_lightning.data.base import Task
from gradskip_lightning.training.classifier import TrainedModule

#: Label-map value of pixels that count for neither the loss nor the metrics.
IGNORE_INDEX = 255
#: SegFormer's total downsampling (stage strides 4, 2, 2, 2): image sides must be multiples of it.
SEGFORMER_STRIDE = 32


def upsample_logits(logits: Tensor, size: tuple[int, int]) -> Tensor:
    """Logits (B, K, h, w) -> (B, K, H, W) at ``size`` = (H, W), bilinearly (as SegFormer's own loss)."""
    return F.interpolate(logits, size=size, mode="bilinear", align_corners=False)


def segmentation_loss(logits: Tensor, label_maps: Tensor) -> Tensor:
    """Pixel cross-entropy of logits (B, K, H, W) against label maps (B, H, W) int64, the same size;
    pixels labelled ``IGNORE_INDEX`` do not count."""
    return F.cross_entropy(logits, label_maps, ignore_index=IGNORE_INDEX)


class PooledMeanIoU(Metric):
    """Segmentation mIoU: each class's IoU over all pixels seen (DDP-synchronised sums), averaged
    over the classes present in the predictions or the labels; pixels labelled ``ignore_index``
    do not count.

    (torchmetrics' ``MeanIoU`` averages per image and ``MulticlassJaccardIndex`` counts an absent
    class as 0; both update their states in place, which fails in ``fit`` after a ``validate``
    made them under inference mode. These states are replaced, not updated in place.)

    Example:
        >>> metric = PooledMeanIoU(3)
        >>> metric.update(torch.tensor([[0, 1], [1, 1]]), torch.tensor([[0, 1], [1, 255]]))
        >>> round(float(metric.compute()), 3)  # background 1/1, class 1 2/2; class 2 absent
        1.0
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, num_classes: int, ignore_index: int = IGNORE_INDEX, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_classes, self.ignore_index = num_classes, ignore_index
        self.intersection: Tensor  # (K,) pixels in both, per class
        self.union: Tensor  # (K,) pixels in either, per class
        self.add_state("intersection", torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("union", torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, predictions: Tensor, label_maps: Tensor) -> None:
        """Add predicted and true label maps (B, H, W) int64."""
        valid = label_maps != self.ignore_index
        predicted, true = predictions[valid], label_maps[valid]
        count = lambda x: torch.bincount(x, minlength=self.num_classes)  # noqa: E731 - pixels per class
        intersection = count(true[predicted == true])
        self.intersection = self.intersection + intersection
        self.union = self.union + count(predicted) + count(true) - intersection

    def compute(self) -> Tensor:
        present = self.union > 0
        return (self.intersection[present].double() / self.union[present]).mean()


def segmentation_metrics(num_classes: int) -> nn.ModuleDict:
    """``miou``: :class:`PooledMeanIoU`; ``pixel_acc``: the fraction of labelled pixels predicted
    right. Both fed index maps (B, H, W); pixels labelled ``IGNORE_INDEX`` do not count."""
    return nn.ModuleDict(
        {
            "miou": PooledMeanIoU(num_classes),
            "pixel_acc": MulticlassAccuracy(num_classes, average="micro", ignore_index=IGNORE_INDEX),
        }
    )


class SegmentationModule(TrainedModule):
    """Semantic segmentation: a random-initialised HF ``SegformerForSemanticSegmentation`` trained
    with AdamW (warm-up, then cosine decay, per step; as
    :class:`~gradskip_lightning.training.classifier.ViTClassifier`).

    The loss is the pixel cross-entropy of the logits bilinearly upsampled to the label maps
    (label ``IGNORE_INDEX`` = 255 ignored); logs ``{train,val,test}/loss``, ``/miou`` (mean IoU)
    and ``/pixel_acc`` (pixel accuracy), per epoch. Batches are ``(images (B, C, H, W), label_maps
    (B, H, W) int64, ...)``. ``self.model`` is the HF model (what the explainers take).

    Args:
        num_classes: classes K, the background included.
        in_chans: input channels.
        img_size: input image side in pixels, a multiple of 32.
        task: must be ``"segmentation"`` (the CLI links it from the datamodule).
        hidden_sizes: token width of each encoder stage.
        depths: transformer blocks of each stage.
        num_attention_heads: attention heads of each stage (dividing its width).
        sr_ratios: spatial reduction of each stage's keys and values.
        mlp_ratios: MLP width over token width, per stage.
        decoder_hidden_size: width of the all-MLP decode head.
        drop_path_rate: stochastic-depth rate of the encoder.
        lr: peak AdamW learning rate.
        weight_decay: AdamW weight decay (not applied to biases and norms).
        warmup_fraction: fraction of all optimiser steps spent warming up, in [0, 1).

    Example:
        >>> import torch
        >>> model = SegmentationModule(num_classes=5, img_size=64)
        >>> tuple(model(torch.zeros(2, 3, 64, 64)).shape)
        (2, 5, 16, 16)
    """

    def __init__(
        self,
        num_classes: int = 5,
        in_chans: int = 3,
        img_size: int = 64,
        task: Task = "segmentation",
        hidden_sizes: tuple[int, ...] = (16, 32, 48, 64),
        depths: tuple[int, ...] = (1, 2, 2, 1),
        num_attention_heads: tuple[int, ...] = (1, 2, 2, 4),
        sr_ratios: tuple[int, ...] = (4, 2, 1, 1),
        mlp_ratios: tuple[int, ...] = (2, 2, 2, 2),
        decoder_hidden_size: int = 64,
        drop_path_rate: float = 0.0,
        lr: float = 2e-3,
        weight_decay: float = 0.01,
        warmup_fraction: float = 0.05,
    ) -> None:
        super().__init__()
        if task != "segmentation":
            raise ValueError(
                f"task must be 'segmentation' (SegmentationModule segments images), got {task!r}: for "
                "classification data use gradskip_lightning.training.classifier.ViTClassifier"
            )
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2 (the background included), got {num_classes}")
        if img_size < SEGFORMER_STRIDE or img_size % SEGFORMER_STRIDE:
            raise ValueError(f"img_size must be a positive multiple of {SEGFORMER_STRIDE} (SegFormer), got {img_size}")
        stages = {
            "depths": depths,
            "num_attention_heads": num_attention_heads,
            "sr_ratios": sr_ratios,
            "mlp_ratios": mlp_ratios,
        }
        for name, values in stages.items():
            if len(values) != len(hidden_sizes):
                raise ValueError(
                    f"{name} needs one value per stage ({len(hidden_sizes)}, as hidden_sizes), got {list(values)}"
                )
        if any(width % heads for width, heads in zip(hidden_sizes, num_attention_heads)):
            raise ValueError(
                f"each of hidden_sizes {list(hidden_sizes)} must be a multiple of its num_attention_heads "
                f"{list(num_attention_heads)}"
            )
        if not 0.0 <= warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {warmup_fraction}")
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        self.save_hyperparameters()
        config = SegformerConfig(  # type: ignore[call-arg]  # num_labels: a PretrainedConfig keyword
            num_channels=in_chans,
            num_labels=num_classes,
            num_encoder_blocks=len(hidden_sizes),
            hidden_sizes=list(hidden_sizes),
            depths=list(depths),
            num_attention_heads=list(num_attention_heads),
            sr_ratios=list(sr_ratios),
            mlp_ratios=list(mlp_ratios),
            decoder_hidden_size=decoder_hidden_size,
            drop_path_rate=drop_path_rate,
            semantic_loss_ignore_index=IGNORE_INDEX,
        )
        self.model = SegformerForSemanticSegmentation(config)
        self.num_classes = num_classes
        self.img_size = img_size
        self.in_chans = in_chans
        self.train_metrics = segmentation_metrics(num_classes)
        self.val_metrics = segmentation_metrics(num_classes)
        self.test_metrics = segmentation_metrics(num_classes)

    def forward(self, images: Tensor) -> Tensor:
        """Images (B, C, H, W) -> logits (B, num_classes, H / 4, W / 4)."""
        return self.model(pixel_values=images).logits

    def _step(self, batch: tuple[Tensor, ...], stage: str) -> Tensor:
        images, label_maps = batch[0], batch[1]
        logits = upsample_logits(self(images), (label_maps.shape[-2], label_maps.shape[-1]))  # (B, K, H, W)
        loss = segmentation_loss(logits, label_maps)
        predictions = logits.detach().argmax(dim=1)  # (B, H, W)
        metrics: dict[str, Metric] = getattr(self, f"{stage}_metrics")
        for metric in metrics.values():
            metric.update(predictions, label_maps)
        self.log(f"{stage}/loss", loss, on_step=stage == "train", on_epoch=True, prog_bar=True, sync_dist=True)
        for name, metric in metrics.items():
            self.log(f"{stage}/{name}", metric, on_step=False, on_epoch=True, prog_bar=stage != "train")
        return loss
