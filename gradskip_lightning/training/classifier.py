"""ViTClassifier: a LightningModule around a timm Vision Transformer (a plain ViT or a Swin)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import timm
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig
from timm.optim import create_optimizer_v2
from torch import Tensor, nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassAUROC, MultilabelAccuracy, MultilabelAUROC

from gradskip_lightning.data.base import Task


def warmup_cosine(step: int, total_steps: int, warmup_steps: int) -> float:
    """Learning-rate factor at ``step``: linear warm-up from ~0 to 1, then cosine decay to 0."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


class TrainedModule(LightningModule):
    """What the project's LightningModules share: ``self.model`` trained with AdamW (no weight
    decay on biases, norms and position embeddings) and a per-step :func:`warmup_cosine` schedule
    over all the Trainer's optimiser steps (hyperparameters ``lr``, ``weight_decay``,
    ``warmup_fraction``), and one ``_step(batch, stage)`` for the train, val and test batches."""

    model: nn.Module

    def _step(self, batch: tuple[Tensor, ...], stage: str) -> Tensor:
        """The loss of one batch of ``stage`` ("train", "val", "test"), its metrics logged."""
        raise NotImplementedError

    def training_step(self, batch: tuple[Tensor, ...], batch_idx: int) -> Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: tuple[Tensor, ...], batch_idx: int) -> Tensor:
        return self._step(batch, "val")

    def test_step(self, batch: tuple[Tensor, ...], batch_idx: int) -> Tensor:
        return self._step(batch, "test")

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        optimizer = create_optimizer_v2(
            self.model, opt="adamw", lr=self.hparams["lr"], weight_decay=self.hparams["weight_decay"]
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = int(self.hparams["warmup_fraction"] * total)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_cosine(step, total, warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def multiclass_loss(logits: Tensor, labels: Tensor, label_smoothing: float) -> Tensor:
    """Cross-entropy of logits (B, K) against class indices (B,) int64."""
    return F.cross_entropy(logits, labels, label_smoothing=label_smoothing)


def multilabel_loss(logits: Tensor, labels: Tensor, label_smoothing: float) -> Tensor:
    """Binary cross-entropy with logits (B, C) against multi-hot labels (B, C), smoothed to
    ``label_smoothing / 2`` and ``1 - label_smoothing / 2``."""
    targets = labels.float() * (1.0 - label_smoothing) + 0.5 * label_smoothing
    return F.binary_cross_entropy_with_logits(logits, targets)


def multiclass_metrics(num_classes: int) -> MetricCollection:
    """Top-1 accuracy and macro one-vs-rest AUROC, fed softmax probabilities."""
    return MetricCollection(
        {
            "acc": MulticlassAccuracy(num_classes, average="micro"),
            "auroc": MulticlassAUROC(num_classes, average="macro"),
        }
    )


def multilabel_metrics(num_labels: int) -> MetricCollection:
    """Accuracy over all (image, label) decisions at 0.5 and macro AUROC, fed sigmoid probabilities."""
    return MetricCollection(
        {"acc": MultilabelAccuracy(num_labels, average="micro"), "auroc": MultilabelAUROC(num_labels, average="macro")}
    )


def softmax(logits: Tensor) -> Tensor:
    """Logits (B, K) -> class probabilities (B, K), rows summing to 1."""
    return logits.softmax(dim=-1)


#: What changes with the task: loss, metrics, and logits -> probabilities for the metrics.
LOSSES: dict[Task, Callable[[Tensor, Tensor, float], Tensor]] = {
    "multiclass": multiclass_loss,
    "multilabel": multilabel_loss,
}
METRICS: dict[Task, Callable[[int], MetricCollection]] = {
    "multiclass": multiclass_metrics,
    "multilabel": multilabel_metrics,
}
PROBABILITIES: dict[Task, Callable[[Tensor], Tensor]] = {
    "multiclass": softmax,
    "multilabel": torch.sigmoid,
}


class ViTClassifier(TrainedModule):
    """Image classifier: a timm Vision Transformer (a plain ViT, or a hierarchical Swin) trained with AdamW.

    ``task="multiclass"``: cross-entropy; logs ``{train,val,test}/loss``, ``/acc`` (top-1 accuracy)
    and ``/auroc`` (macro one-vs-rest AUROC), the two figures MedMNIST reports.
    ``task="multilabel"`` (e.g. ChestMNIST): binary cross-entropy with logits on (B, C) multi-hot
    labels; ``/acc`` is the accuracy of all label decisions at sigmoid 0.5, ``/auroc`` the macro
    AUROC over labels. The learning rate warms up linearly over the first
    ``warmup_fraction`` of the optimiser steps, then follows a cosine decay to zero (per step).

    Args:
        model_name: a ``timm.create_model`` name, e.g. ``vit_tiny_patch16_224``.
        pretrained: load timm's pretrained weights (needs a download).
        num_classes: output classes (labels, for multi-label).
        task: ``"multiclass"`` (one class per image) or ``"multilabel"`` (any subset of labels).
        img_size: input image side in pixels.
        patch_size: patch side in pixels.
        in_chans: input channels.
        embed_dim: token width (a Swin's first stage); None keeps the named model's.
        depth: number of transformer blocks (a ViT); None keeps the named model's.
        num_heads: attention heads per block (a Swin: one per stage); None keeps the named model's.
        depths: blocks per stage (a Swin); None keeps the named model's.
        window_size: attention window side in tokens (a Swin); None keeps the named model's.
        drop_path_rate: stochastic-depth rate.
        lr: peak AdamW learning rate.
        weight_decay: AdamW weight decay (not applied to biases, norms and position embeddings).
        warmup_fraction: fraction of all optimiser steps spent warming up, in [0, 1).
        label_smoothing: label smoothing of the loss (multi-label: targets in
            [label_smoothing / 2, 1 - label_smoothing / 2]).

    Example::

        model = ViTClassifier(num_classes=8, img_size=28, patch_size=4, embed_dim=96, depth=4, num_heads=3)
        logits = model(torch.randn(2, 3, 28, 28))  # (2, 8)
        swin = ViTClassifier("swin_tiny_patch4_window7_224", num_classes=4, img_size=32, patch_size=2,
                             embed_dim=48, depths=[2, 2], num_heads=[3, 6], window_size=4)
    """

    def __init__(
        self,
        model_name: str = "vit_tiny_patch16_224",
        pretrained: bool = False,
        num_classes: int = 8,
        task: Task = "multiclass",
        img_size: int = 28,
        patch_size: int = 4,
        in_chans: int = 3,
        embed_dim: int | None = None,
        depth: int | None = None,
        num_heads: int | list[int] | None = None,
        depths: list[int] | None = None,
        window_size: int | None = None,
        drop_path_rate: float = 0.0,
        lr: float = 1e-3,
        weight_decay: float = 0.05,
        warmup_fraction: float = 0.05,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__()
        if task not in LOSSES:
            raise ValueError(
                f"task must be one of {tuple(LOSSES)} (ViTClassifier classifies images), got {task!r}: for "
                "segmentation data use gradskip_lightning.training.segmentation.SegmentationModule"
            )
        if num_classes < (2 if task == "multiclass" else 1):
            raise ValueError(f"num_classes must be >= 2 (>= 1 for multilabel), got {num_classes} for {task}")
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        if img_size % patch_size:
            raise ValueError(f"img_size ({img_size}) must be a multiple of patch_size ({patch_size})")
        if not 0.0 <= warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {warmup_fraction}")
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        self.save_hyperparameters()
        sizes = {
            "embed_dim": embed_dim,
            "depth": depth,
            "num_heads": num_heads,
            "depths": depths,
            "window_size": window_size,
        }
        overrides: dict[str, Any] = {name: value for name, value in sizes.items() if value is not None}
        self.model = timm.create_model(
            model_name,
            pretrained=pretrained,
            num_classes=num_classes,
            img_size=img_size,
            patch_size=patch_size,
            in_chans=in_chans,
            drop_path_rate=drop_path_rate,
            **overrides,
        )
        self.loss = LOSSES[task]
        self.probabilities = PROBABILITIES[task]
        metrics = METRICS[task](num_classes)
        self.train_metrics = metrics.clone(prefix="train/")
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")

    def forward(self, x: Tensor) -> Tensor:
        """Images (B, C, H, W) -> logits (B, num_classes)."""
        return self.model(x)

    def _step(self, batch: tuple[Tensor, ...], stage: str) -> Tensor:
        images, labels = batch[0], batch[1]  # items may add regions: (image, label, mask or {name: mask})
        logits = self(images)
        loss = self.loss(logits, labels, self.hparams["label_smoothing"])
        metrics = getattr(self, f"{stage}_metrics")
        metrics.update(self.probabilities(logits.detach()), labels.long())
        self.log(f"{stage}/loss", loss, on_step=stage == "train", on_epoch=True, prog_bar=True, sync_dist=True)
        self.log_dict(metrics, on_step=False, on_epoch=True, prog_bar=stage != "train")
        return loss


#: Datamodule attributes the model takes (data.<name> -> model.<name>): train.py links them, the
#: benchmarks pass them.
LINKED_FROM_DATA = ("num_classes", "img_size", "in_chans", "task")

#: The model of a LightningCLI config whose ``model`` section names no ``class_path`` (train.py's
#: default; the benchmarks read the configs the same way).
DEFAULT_MODEL = f"{ViTClassifier.__module__}.{ViTClassifier.__qualname__}"
