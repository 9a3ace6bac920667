"""SegmentationModule: the SegFormer it builds, its loss and metrics, and a real Trainer fit."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Trainer
from transformers import SegformerForSemanticSegmentation

from gradskip_lightning.data import PlantedShapesSegmentationDataModule
from gradskip_lightning.training.classifier import ViTClassifier
from gradskip_lightning.training.segmentation import (
    IGNORE_INDEX,
    SegmentationModule,
    segmentation_loss,
    segmentation_metrics,
    upsample_logits,
)

#: As tests/segmentation/conftest.py's tiny SegFormer.
TINY = {
    "hidden_sizes": (8, 8, 16, 16),
    "depths": (1, 2, 1, 1),
    "num_attention_heads": (1, 2, 2, 4),
    "sr_ratios": (4, 2, 1, 1),
    "mlp_ratios": (2, 2, 2, 2),
    "decoder_hidden_size": 16,
}


def test_builds_the_requested_segformer_and_returns_quarter_resolution_logits():
    module = SegmentationModule(num_classes=3, in_chans=1, img_size=32, **TINY)
    assert isinstance(module.model, SegformerForSemanticSegmentation)
    config = module.model.config
    assert (config.num_labels, config.num_channels, config.hidden_sizes) == (3, 1, [8, 8, 16, 16])
    assert (module.num_classes, module.img_size, module.in_chans) == (3, 32, 1)
    logits = module(torch.randn(2, 1, 32, 32))
    assert type(logits) is torch.Tensor and logits.shape == (2, 3, 8, 8)


def test_loss_is_segformers_own_upsampled_cross_entropy_and_ignores_255():
    torch.manual_seed(0)
    module = SegmentationModule(num_classes=4, img_size=32, **TINY).eval()
    images = torch.randn(2, 3, 32, 32)
    label_maps = torch.randint(4, (2, 32, 32))
    label_maps[:, :8] = IGNORE_INDEX
    with torch.no_grad():
        logits = module(images)
        ours = segmentation_loss(upsample_logits(logits, (32, 32)), label_maps)
        theirs = module.model(pixel_values=images, labels=label_maps).loss
        torch.testing.assert_close(ours, theirs)
        kept = segmentation_loss(upsample_logits(logits, (32, 32))[:, :, 8:], label_maps[:, 8:])
        torch.testing.assert_close(ours, kept)  # ignored pixels count for nothing
    perfect = torch.nn.functional.one_hot(label_maps.clamp(max=3), 4).permute(0, 3, 1, 2).float() * 50
    assert segmentation_loss(perfect, label_maps) < 1e-6


def test_miou_and_pixel_accuracy_skip_ignored_pixels():
    metrics = segmentation_metrics(3)
    target = torch.tensor([[[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, IGNORE_INDEX, IGNORE_INDEX]]])  # (1, 3, 4)
    preds = torch.tensor([[[0, 0, 1, 0], [0, 0, 1, 1], [2, 2, 1, 1]]])
    for metric in metrics.values():
        metric.update(preds, target)
    # IoU: background 4/5, class 1 3/4, class 2 2/2 (the ignored pixels predicted 1 do not count)
    assert float(metrics["miou"].compute()) == pytest.approx((4 / 5 + 3 / 4 + 1) / 3)
    assert float(metrics["pixel_acc"].compute()) == pytest.approx(9 / 10)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"task": "multiclass"}, "ViTClassifier"),
        ({"img_size": 48}, "multiple of 32"),
        ({"depths": (1, 1)}, "one value per stage"),
        ({"num_attention_heads": (1, 3, 2, 4)}, "multiple of its num_attention_heads"),
        ({"num_classes": 1}, "num_classes"),
        ({"warmup_fraction": 1.0}, "warmup_fraction"),
    ],
)
def test_invalid_options_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SegmentationModule(**{"img_size": 32, **TINY, **kwargs})


def test_the_classifier_refuses_segmentation_data():
    with pytest.raises(ValueError, match="SegmentationModule"):
        ViTClassifier(num_classes=5, task="segmentation", img_size=32, patch_size=8, embed_dim=48, depth=1, num_heads=3)


def test_a_real_trainer_fit_lowers_the_loss_and_logs_every_stage():
    torch.manual_seed(0)
    data = PlantedShapesSegmentationDataModule(
        num_colours=3, img_size=32, object_size=8, train_size=128, val_size=32, test_size=32, batch_size=16
    )
    module = SegmentationModule(num_classes=data.num_classes, img_size=32, **TINY, lr=1e-2, warmup_fraction=0.1)
    trainer = Trainer(
        max_epochs=3,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data.setup("test")
    images, label_maps = next(iter(torch.utils.data.DataLoader(data.test_dataset, batch_size=32)))
    with torch.no_grad():
        before = float(segmentation_loss(upsample_logits(module(images), (32, 32)), label_maps))
    trainer.fit(module, datamodule=data)
    logged = set(trainer.logged_metrics)
    results = trainer.test(module, datamodule=data, verbose=False)[0]
    module.eval()
    with torch.no_grad():
        logits = upsample_logits(module(images), (32, 32))
    assert float(segmentation_loss(logits, label_maps)) < 0.5 * before  # it learns (at first, the background)
    assert trainer.global_step == 24 and trainer.lr_scheduler_configs[0].interval == "step"
    assert {"train/loss_epoch", "train/miou", "train/pixel_acc", "val/loss", "val/miou", "val/pixel_acc"} <= logged
    assert 0.0 <= results["test/miou"] <= 1.0
    # test/loss and test/pixel_acc are the real figures of the trained model on the whole test split
    assert results["test/loss"] == pytest.approx(float(segmentation_loss(logits, label_maps)), rel=1e-4)
    assert results["test/pixel_acc"] == pytest.approx(float((logits.argmax(dim=1) == label_maps).float().mean()))


def test_miou_pools_each_class_over_all_images_and_skips_absent_classes():
    metrics = segmentation_metrics(4)  # class 3 appears nowhere: left out of the mean
    target = torch.tensor([[[0, 1], [1, 1]], [[0, 0], [2, 2]]])
    preds = torch.tensor([[[1, 1], [1, 1]], [[0, 2], [2, 2]]])
    metrics["miou"].update(preds[:1], target[:1])
    metrics["miou"].update(preds[1:], target[1:])
    # pooled over both images: background 1/3, class 1 3/4, class 2 2/3 (per image, the background
    # would be 0/1 and 1/2)
    assert float(metrics["miou"].compute()) == pytest.approx((1 / 3 + 3 / 4 + 2 / 3) / 3)


def test_validate_before_fit_works():
    """Metric states made under ``validate()``'s inference mode must not break a following ``fit()``."""
    torch.manual_seed(0)
    data = PlantedShapesSegmentationDataModule(num_colours=2, img_size=32, object_size=8, train_size=16, val_size=16)
    module = SegmentationModule(num_classes=data.num_classes, img_size=32, **TINY)
    options = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer = Trainer(max_epochs=1, enable_model_summary=False, **options)
    trainer.validate(module, datamodule=data, verbose=False)
    trainer.fit(module, datamodule=data)
    assert 0.0 <= float(trainer.callback_metrics["val/miou"]) <= 1.0
