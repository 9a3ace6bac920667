"""What the correction tests share: the tiny classifier that records the batches its training_step gets, data
whose training batches come in order (for resumes), and a test of which images carry an artifact."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from gradskip_lightning.callbacks.shortcut_correction import PatchPaste
from gradskip_lightning.data import PlantedShapesDataModule
from gradskip_lightning.training.classifier import ViTClassifier
from tests.callbacks.helpers import tiny_data, tiny_module


class Recorder(ViTClassifier):
    """The tiny classifier, keeping a copy of every batch its training_step gets: (epoch, images, labels)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.seen: list[tuple[int, torch.Tensor, torch.Tensor]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append((self.current_epoch, batch[0].detach().clone(), batch[1].clone()))
        return super().training_step(batch, batch_idx)


def recorder(seed: int = 0) -> Recorder:
    """:func:`tiny_module` (same settings, same initial weights) that records its batches."""
    settings = dict(tiny_module(seed).hparams)
    torch.manual_seed(seed)
    return Recorder(**settings)


class InOrder(PlantedShapesDataModule):
    """Planted shapes whose training batches come in the same order every epoch (no shuffle from the global RNG),
    so that a fit resumed from a checkpoint trains on the batches the uninterrupted one does."""

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_dataset, "train_dataset", shuffle=False)


def in_order_data() -> InOrder:
    """:func:`tiny_data` (same settings) with its training batches in order."""
    return InOrder(**tiny_data().hparams)


def carries(images: torch.Tensor, paste: PatchPaste) -> torch.Tensor:
    """(B,) bool: images whose pasted pixels are exactly one of the artifact's donors'."""
    top, left, bottom, right = paste.box
    region = images[:, :, top:bottom, left:right][:, None]  # (B, 1, C, bh, bw)
    donors = paste.donors[None].expand(len(images), -1, images.shape[1], -1, -1)
    same = (region == donors) | ~paste.mask
    return same.flatten(2).all(dim=2).any(dim=1)


class Falling(Recorder):
    """The recording classifier whose validation step hands over the logits of its choice: every image right until
    epoch ``falls_at``, every image wrong from it on (None: never), so a test knows the accuracy the correction
    measures (the training is the real one)."""

    def __init__(self, falls_at: int | None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.falls_at = falls_at

    def validation_step(self, batch, batch_idx):
        loss = super().validation_step(batch, batch_idx)
        labels = batch[1]
        wrong = self.falls_at is not None and self.current_epoch >= self.falls_at
        chosen = (labels + 1) % self.hparams.num_classes if wrong else labels
        return {"loss": loss, "logits": torch.nn.functional.one_hot(chosen, self.hparams.num_classes).float()}


def falling(falls_at: int | None, seed: int = 0) -> Falling:
    """:func:`recorder` whose validation accuracy falls from 1 to 0 at epoch ``falls_at`` (:class:`Falling`)."""
    settings = dict(tiny_module(seed).hparams)
    torch.manual_seed(seed)
    return Falling(falls_at, **settings)
