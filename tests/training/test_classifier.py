"""ViTClassifier: the timm model it builds, its schedule, and what it logs under a real Trainer."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger
from timm.layers import DropPath
from timm.models.swin_transformer import SwinTransformer
from timm.models.vision_transformer import VisionTransformer
from torch.utils.data import DataLoader, TensorDataset

from gradskip_lightning.data import PlantedShapesDataModule
from gradskip_lightning.training.classifier import ViTClassifier, multilabel_loss, warmup_cosine
from tests.conftest import TRAIN_SEED

TINY = {"num_classes": 4, "img_size": 32, "patch_size": 8, "embed_dim": 48, "depth": 2, "num_heads": 3}


def test_builds_the_requested_timm_vit():
    model = ViTClassifier(**TINY, drop_path_rate=0.2)
    vit = model.model
    assert isinstance(vit, VisionTransformer)
    assert vit.patch_embed.patch_size == (8, 8) and vit.patch_embed.grid_size == (4, 4)
    assert len(vit.blocks) == 2 and vit.embed_dim == 48 and vit.blocks[0].attn.num_heads == 3
    assert isinstance(vit.blocks[-1].drop_path1, DropPath) and vit.blocks[-1].drop_path1.drop_prob == pytest.approx(0.2)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 4)


def test_builds_a_timm_swin_with_its_stage_options():
    model = ViTClassifier(
        "swin_tiny_patch4_window7_224",
        num_classes=4,
        img_size=32,
        patch_size=2,
        embed_dim=16,
        depths=[2, 1],
        num_heads=[1, 2],
        window_size=4,
    )
    swin = model.model
    assert isinstance(swin, SwinTransformer) and swin.patch_embed.grid_size == (16, 16)
    assert [len(stage.blocks) for stage in swin.layers] == [2, 1] and swin.num_features == 32
    assert [stage.blocks[0].attn.num_heads for stage in swin.layers] == [1, 2]
    assert swin.layers[0].blocks[1].window_size == (4, 4) and swin.layers[0].blocks[1].shift_size == (2, 2)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 4)
    with pytest.raises(TypeError, match="depth"):  # a ViT option the Swin does not take
        ViTClassifier("swin_tiny_patch4_window7_224", num_classes=4, img_size=32, patch_size=2, depth=2)


def test_in_chans_and_named_model_defaults():
    model = ViTClassifier(num_classes=3, img_size=28, patch_size=7, in_chans=1, depth=1)
    assert model.model.embed_dim == 192  # vit_tiny_patch16_224's width, kept when embed_dim is None
    assert model(torch.randn(2, 1, 28, 28)).shape == (2, 3)


def test_warmup_cosine_factors():
    assert warmup_cosine(0, 100, 10) == pytest.approx(0.1)
    assert warmup_cosine(9, 100, 10) == pytest.approx(1.0)
    assert warmup_cosine(10, 100, 10) == pytest.approx(1.0)
    assert warmup_cosine(55, 100, 10) == pytest.approx(0.5)
    assert warmup_cosine(100, 100, 10) == pytest.approx(0.0)
    assert warmup_cosine(0, 100, 0) == pytest.approx(1.0)
    assert warmup_cosine(25, 100, 0) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"img_size": 30},
        {"num_classes": 1},
        {"warmup_fraction": 1.0},
        {"lr": 0.0},
        {"task": "multi-label"},
        {"label_smoothing": 1.0},
    ],
)
def test_invalid_options_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        ViTClassifier(**{**TINY, **kwargs})


def _read_epoch_metrics(path) -> dict[str, list[float]]:
    """Lightning CSVLogger metrics.csv -> {name: [values in row order]} (empty cells skipped)."""
    values: dict[str, list[float]] = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if value:
                    values.setdefault(key, []).append(float(value))
    return values


def test_trains_and_logs_loss_accuracy_auroc_for_every_stage(tmp_path):
    torch.manual_seed(0)
    data = PlantedShapesDataModule(train_size=128, val_size=64, test_size=64, batch_size=32)
    model = ViTClassifier(**TINY, lr=3e-3, warmup_fraction=0.1)
    trainer = Trainer(
        max_epochs=3,
        accelerator="cpu",
        logger=CSVLogger(tmp_path),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    trainer.fit(model, datamodule=data)
    results = trainer.test(model, datamodule=data, verbose=False)[0]
    logged = _read_epoch_metrics(tmp_path / "lightning_logs" / "version_0" / "metrics.csv")
    for stage in ("train", "val"):
        for name in ("acc", "auroc"):
            assert len(logged[f"{stage}/{name}"]) == 3 and all(0 <= v <= 1 for v in logged[f"{stage}/{name}"])
    assert len(logged["val/loss"]) == 3 and len(logged["train/loss_epoch"]) == 3
    assert logged["train/loss_epoch"][-1] < logged["train/loss_epoch"][0]  # it learns
    # test/acc is the real top-1 accuracy of the trained model on the test split
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x).argmax(-1) == y).sum()) for x, y, _ in data.test_dataloader())
    assert results["test/acc"] == pytest.approx(correct / 64)
    assert 0.0 <= results["test/auroc"] <= 1.0 and results["test/loss"] > 0
    # warm-up then cosine decay, stepped per batch: the last learning rate is near zero
    scheduler = trainer.lr_scheduler_configs[0]
    assert scheduler.interval == "step"
    assert scheduler.scheduler.get_last_lr()[0] < 0.05 * 3e-3


def _multilabel_images(count: int, seed: int) -> TensorDataset:
    """(count, 1, 16, 16) noisy grayscale images and (count, 4) float multi-hot labels: label c
    brightens rows 2c and 2c + 1 of every 8 px patch, so each patch token can read every label."""
    gen = torch.Generator().manual_seed(seed)
    labels = (torch.rand(count, 4, generator=gen) < 0.5).float()
    row_label = (torch.arange(16) % 8) // 2  # (16,) which label each image row shows
    images = labels[:, row_label].view(count, 1, 16, 1).expand(-1, -1, -1, 16)
    return TensorDataset(images + 0.3 * torch.randn(count, 1, 16, 16, generator=gen), labels)


@pytest.mark.trained
def test_multilabel_model_trains_with_bce_and_multilabel_metrics(tmp_path):
    torch.manual_seed(TRAIN_SEED)
    model = ViTClassifier(
        num_classes=4, task="multilabel", img_size=16, patch_size=8, in_chans=1, embed_dim=32, depth=1, num_heads=2,
        lr=3e-3, warmup_fraction=0.0,
    )  # fmt: skip
    assert model.val_metrics["acc"].__class__.__name__ == "MultilabelAccuracy"
    train = DataLoader(_multilabel_images(512, seed=2 * TRAIN_SEED), batch_size=32, shuffle=True)
    val = DataLoader(_multilabel_images(128, seed=2 * TRAIN_SEED + 1), batch_size=64)
    trainer = Trainer(
        max_epochs=4, accelerator="cpu", logger=CSVLogger(tmp_path), enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1,
    )  # fmt: skip
    trainer.fit(model, train_dataloaders=train, val_dataloaders=val)
    logged = _read_epoch_metrics(tmp_path / "lightning_logs" / "version_0" / "metrics.csv")
    losses = logged["train/loss_epoch"]
    # it learns: the last epoch's loss was 0.39-0.45 of the first's, val/acc and AUROC 1.00 (seeds 0-9)
    assert len(losses) == 4 and losses[-1] < 0.6 * losses[0]
    assert losses[0] < 0.8  # binary cross-entropy per label starts near log 2, not log 4 (cross-entropy)
    assert logged["val/acc"][-1] > 0.9 and logged["val/auroc"][-1] > 0.95  # per-label decisions
    # the logged validation loss is the mean binary cross-entropy with logits
    model.eval()
    images, labels = val.dataset.tensors
    with torch.no_grad():
        expected = torch.nn.functional.binary_cross_entropy_with_logits(model(images), labels)
    assert logged["val/loss"][-1] == pytest.approx(float(expected), rel=1e-4)


def test_multilabel_label_smoothing_pulls_targets_to_one_half():
    logits = torch.zeros(1, 2)
    labels = torch.tensor([[1.0, 0.0]])
    smoothed = multilabel_loss(logits + torch.tensor([[5.0, -5.0]]), labels, 0.2)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.tensor([[5.0, -5.0]]), torch.tensor([[0.9, 0.1]])
    )
    torch.testing.assert_close(smoothed, expected)
