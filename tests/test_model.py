"""ViTClassifier: the timm model it builds, its schedule, and what it logs under a real Trainer."""
from __future__ import annotations

import csv
import math

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger
from timm.layers import DropPath
from timm.models.vision_transformer import VisionTransformer

from gradskip_lightning.data import PlantedShapesDataModule
from gradskip_lightning.model import ViTClassifier, warmup_cosine

TINY = {"num_classes": 4, "img_size": 32, "patch_size": 8, "embed_dim": 48, "depth": 2, "num_heads": 3}


def test_builds_the_requested_timm_vit():
    model = ViTClassifier(**TINY, drop_path_rate=0.2)
    vit = model.model
    assert isinstance(vit, VisionTransformer)
    assert vit.patch_embed.patch_size == (8, 8) and vit.patch_embed.grid_size == (4, 4)
    assert len(vit.blocks) == 2 and vit.embed_dim == 48 and vit.blocks[0].attn.num_heads == 3
    assert isinstance(vit.blocks[-1].drop_path1, DropPath) and vit.blocks[-1].drop_path1.drop_prob == pytest.approx(0.2)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 4)


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
    "kwargs", [{"img_size": 30}, {"num_classes": 1}, {"warmup_fraction": 1.0}, {"lr": 0.0}]
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
