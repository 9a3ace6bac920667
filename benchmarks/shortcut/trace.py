"""The record of one training run at trace points (at each epoch's end, or more often): every method's
tag mass and rank on fixed probes, the spurious score and the validation accuracy (:class:`TagTrace`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from typing_extensions import override

from gradskip_lightning.data.base import ImageClassificationDataModule
from gradskip_lightning.metrics import relevance_mass_accuracy, relevance_rank_accuracy
from gradskip_lightning.shortcuts.tags import spurious_score

from ..faithfulness.maps import MapFn

#: Images per forward when scoring a whole split (validation accuracy, spurious score).
EVAL_BATCH = 512


@dataclass(frozen=True)
class Probes:
    """Validation images that carry the tag: images (n, C, H, W) normalised, tag masks (n, H, W) bool,
    explained for ``target_class`` (the tag's class)."""

    images: Tensor
    masks: Tensor
    target_class: int

    @property
    def targets(self) -> Tensor:
        """(n,) long: the tag's class for every probe."""
        return torch.full((len(self.images),), self.target_class, dtype=torch.long)


def tagged_probes(datamodule: ImageClassificationDataModule, count: int) -> Probes:
    """The first ``count`` validation items of ``datamodule`` (which has a tag) that carry the tag."""
    if datamodule.tag is None:
        raise ValueError("the probes need a datamodule with a tag (its tag is None)")
    datamodule.setup("fit")
    if datamodule.val_dataset is None:
        raise RuntimeError(f"{type(datamodule).__name__}.setup('fit') made no val_dataset")
    chosen = []
    for item in map(datamodule.val_dataset.__getitem__, range(len(datamodule.val_dataset))):
        if item[2]["tag"].any():
            chosen.append(item)
            if len(chosen) == count:
                break
    if len(chosen) < count:
        raise ValueError(f"asked for {count} tagged probes, the validation split has only {len(chosen)}")
    images = torch.stack([item[0] for item in chosen])
    masks = torch.stack([item[2]["tag"] for item in chosen])
    return Probes(images, masks, datamodule.tag.target_class)


@dataclass
class Trace:
    """Results of one run at each trace point: ``epochs`` (T,) training progress in epochs (1.0 = after
    the first epoch), ``mass`` and ``rank`` {method: (T, n)} (relevance mass and rank accuracy on the
    tag, per probe), ``spurious`` (T,) spurious score, ``val_accuracy`` (T,)."""

    epochs: list[float] = field(default_factory=list)
    mass: dict[str, list[Tensor]] = field(default_factory=dict)
    rank: dict[str, list[Tensor]] = field(default_factory=dict)
    spurious: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)

    def masses(self, method: str) -> Tensor:
        """(T, n) tag masses of ``method``."""
        return torch.stack(self.mass[method])

    def ranks(self, method: str) -> Tensor:
        """(T, n) tag rank accuracies of ``method``."""
        return torch.stack(self.rank[method])

    def times(self) -> Tensor:
        """(T,) float64: the trace points in epochs."""
        return torch.tensor(self.epochs, dtype=torch.double)


class TagTrace(Callback):
    """``traces_per_epoch`` times per training epoch, evenly over its batches (the last at its end), with
    the model in eval mode: maps of every method on the probes and their tag mass and rank, the
    spurious score on the transplanted test set, the validation accuracy.

    Args:
        probes: the tagged probes, explained for the tag's class.
        methods: method name -> map function ``(model, images, targets) -> maps (B, H, W)``.
        traces_per_epoch: trace points per epoch (1 = at each epoch's end).
    """

    def __init__(self, probes: Probes, methods: dict[str, MapFn], traces_per_epoch: int = 1) -> None:
        super().__init__()
        if not methods:
            raise ValueError("methods must name at least one map function")
        if traces_per_epoch < 1:
            raise ValueError(f"traces_per_epoch must be a positive integer, got {traces_per_epoch}")
        self.probes = probes
        self.methods = methods
        self.traces_per_epoch = traces_per_epoch
        self.trace = Trace()

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        batches = trainer.num_training_batches
        ends = {round(j * batches / self.traces_per_epoch): j for j in range(1, self.traces_per_epoch + 1)}
        if batch_idx + 1 in ends:
            self._record(trainer, pl_module, trainer.current_epoch + ends[batch_idx + 1] / self.traces_per_epoch)

    def _record(self, trainer: Trainer, pl_module: LightningModule, epoch: float) -> None:
        datamodule: Any = trainer.datamodule  # type: ignore[attr-defined]  # set by Trainer.fit(datamodule=...)
        if datamodule.transplanted_test_dataset is None:
            datamodule.setup("test")
        training = pl_module.training
        pl_module.eval()
        try:
            self.trace.epochs.append(epoch)
            for name, fn in self.methods.items():
                maps = fn(pl_module, self.probes.images, self.probes.targets).detach().float()
                self.trace.mass.setdefault(name, []).append(relevance_mass_accuracy(maps, self.probes.masks))
                self.trace.rank.setdefault(name, []).append(relevance_rank_accuracy(maps, self.probes.masks))
            with torch.no_grad():
                logits, _ = _predict(pl_module, datamodule.transplanted_test_dataset)
                self.trace.spurious.append(spurious_score(logits, self.probes.target_class))
                logits, labels = _predict(pl_module, datamodule.val_dataset)
                self.trace.val_accuracy.append((logits.argmax(dim=1) == labels).double().mean().item())
        finally:
            pl_module.train(training)


def _predict(model: LightningModule, dataset: Dataset) -> tuple[Tensor, Tensor]:
    """Logits (N, K) and labels (N,) of a whole split."""
    logits, labels = [], []
    for batch in DataLoader(dataset, batch_size=EVAL_BATCH):
        logits.append(model(batch[0]))
        labels.append(batch[1])
    return torch.cat(logits), torch.cat(labels)
