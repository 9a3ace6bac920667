"""Every YAML in configs/ parses and builds its model, datamodule, trainer, logger and callbacks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.strategies import DDPStrategy

import train
from gradskip_lightning import GradSkipCallback
from gradskip_lightning.data import (
    BloodMNISTDataModule,
    MedMNISTDataModule,
    PlantedShapesDataModule,
    PlantedShapesSegmentationDataModule,
)
from gradskip_lightning.shortcuts import SpuriousTag
from gradskip_lightning.training.classifier import ViTClassifier
from gradskip_lightning.training.segmentation import SegmentationModule
from tests.data.conftest import write_medmnist_file

# pytest's own arguments are in sys.argv while the tests pass args= to LightningCLI.
pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
CONFIGS_DIR = Path(__file__).resolve().parents[1] / "configs"
CONFIGS = sorted(CONFIGS_DIR.glob("*.yaml"))
EXPECTED = {
    "bloodmnist.yaml",
    "bloodmnist_shortcut.yaml",
    "chestmnist.yaml",
    "planted_shapes.yaml",
    "planted_shapes_ddp.yaml",
    "planted_shapes_swin.yaml",
    "planted_segformer.yaml",
    "shortcut.yaml",
}
MEDMNIST_CONFIGS = {"bloodmnist.yaml", "bloodmnist_shortcut.yaml", "chestmnist.yaml"}
SEGMENTATION_CONFIGS = {"planted_segformer.yaml"}


def build(config: Path, *overrides: str) -> train.GradSkipCLI:
    """Parse and instantiate a config as ``train.py`` does, without running."""
    return train.main(["--config", str(config), *overrides], run=False)


def test_the_documented_configs_exist():
    assert EXPECTED <= {path.name for path in CONFIGS}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.name)
def test_config_builds(config, tmp_path, monkeypatch):
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)  # nothing may be written; if it is, not into the repository
    cli = build(config)
    model, data, trainer = cli.model, cli.datamodule, cli.trainer
    # class count, image size, channels and task come from the datamodule
    assert model.hparams.num_classes == data.num_classes
    assert model.hparams.img_size == data.img_size
    assert model.hparams.in_chans == data.in_chans
    assert model.hparams.task == data.task
    if config.name in SEGMENTATION_CONFIGS:
        assert isinstance(model, SegmentationModule) and isinstance(data, PlantedShapesSegmentationDataModule)
        segformer = model.model.config
        assert (segformer.num_labels, segformer.num_channels) == (data.num_classes, data.in_chans)
        assert data.task == "segmentation" and data.img_size % 32 == 0
    else:
        assert isinstance(model, ViTClassifier)
        assert isinstance(data, MedMNISTDataModule if config.name in MEDMNIST_CONFIGS else PlantedShapesDataModule)
        assert model.model.num_classes == data.num_classes
        assert model.model.patch_embed.proj.in_channels == data.in_chans
        assert tuple(model.model.patch_embed.img_size) == (data.img_size, data.img_size)
    assert sum(isinstance(cb, GradSkipCallback) for cb in trainer.callbacks) == 1
    # best.ckpt by the monitor; last.ckpt every epoch (save_last only copies the best since Lightning 2.6)
    checkpoints = {cb.filename: cb for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint)}
    assert set(checkpoints) == {"best", "last"} and checkpoints["best"].monitor and not checkpoints["best"].save_last
    assert checkpoints["last"].monitor is None and checkpoints["last"].save_top_k == 1
    assert isinstance(trainer.logger, WandbLogger)
    assert trainer.max_epochs >= 1
    assert os.listdir(workdir) == []


def test_bloodmnist_root_override_and_download_default():
    cli = build(Path("configs/bloodmnist.yaml").resolve(), "--data.root", "/somewhere/medmnist")
    assert cli.datamodule.path == Path("/somewhere/medmnist/bloodmnist.npz")
    assert cli.datamodule.download and cli.datamodule.img_size == 28
    (callback,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, GradSkipCallback)]
    # the main config finds shortcuts nobody named, within its 2 % time budget (docs/results/cost.md)
    assert callback.discovery is not None and callback.discovery.probes_per_class == 8
    assert callback.probes.max_overhead == 0.05


def test_shortcut_configs_plant_the_tag_in_training_and_validation_alike():
    cli = build(Path("configs/shortcut.yaml").resolve())
    tag = cli.datamodule.tag
    assert isinstance(tag, SpuriousTag) and tag.target_class == 0 and tag.p_in > 0.5 > tag.p_out
    cli.datamodule.setup("fit")
    for dataset in (cli.datamodule.train_dataset, cli.datamodule.val_dataset):
        in_class = dataset.labels == tag.target_class
        assert dataset.carriers[in_class].float().mean() > 0.8 and dataset.carriers[~in_class].float().mean() < 0.1
    real = build(Path("configs/bloodmnist_shortcut.yaml").resolve())
    assert isinstance(real.datamodule, BloodMNISTDataModule) and real.datamodule.tag == tag
    assert real.trainer.max_epochs <= build(Path("configs/bloodmnist.yaml").resolve()).trainer.max_epochs
    control = build(Path("configs/shortcut.yaml").resolve(), "--data.init_args.tag.p_out", str(tag.p_in))
    assert control.datamodule.tag.is_control


def test_chestmnist_config_is_grayscale_multilabel():
    cli = build(Path("configs/chestmnist.yaml").resolve(), "--data.root", "/somewhere")
    assert cli.datamodule.path == Path("/somewhere/chestmnist.npz")
    assert (cli.model.hparams.task, cli.model.hparams.in_chans, cli.model.hparams.num_classes) == ("multilabel", 1, 14)


@pytest.mark.slow
def test_chestmnist_config_runs_when_its_file_is_present(tmp_path, monkeypatch):
    write_medmnist_file(tmp_path, "chestmnist")
    monkeypatch.chdir(tmp_path)
    cli = train.main(
        [
            "fit", "--config", str(CONFIGS_DIR / "chestmnist.yaml"),
            "--data.root", str(tmp_path), "--data.batch_size", "32", "--trainer.max_epochs", "1",
            "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "2", "--trainer.accelerator", "cpu",
            "--model.embed_dim", "48", "--model.depth", "2",
            f"--trainer.logger.init_args.save_dir={tmp_path / 'outputs'}",
        ]
    )  # fmt: skip
    assert cli.trainer.global_step == 3
    logged = cli.trainer.callback_metrics
    assert 0.0 <= float(logged["val/auroc"]) <= 1.0 and float(logged["val/loss"]) > 0
    # The callback explained the multi-label probes (each its rarest positive label) and scored them.
    assert 0.0 <= float(logged["faithfulness/gradskip/insertion"]) <= 1.0
    assert list(tmp_path.glob("outputs/**/gradskip/maps/epoch_0000.npz"))


def test_ddp_config_uses_two_cpu_processes():
    cli = build(Path("configs/planted_shapes_ddp.yaml").resolve())
    assert isinstance(cli.trainer.strategy, DDPStrategy)
    assert cli.trainer.num_devices == 2


def test_segformer_config_checkpoints_on_miou_and_keeps_the_callback():
    cli = build(CONFIGS_DIR / "planted_segformer.yaml")
    (checkpoint,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, ModelCheckpoint) and cb.filename == "best"]
    assert (checkpoint.monitor, checkpoint.mode) == ("val/miou", "max")
    assert cli.datamodule.class_names[0] == "background" and cli.model.num_classes == 5
    assert cli.model(torch.zeros(2, 3, 64, 64)).shape == (2, 5, 16, 16)


@pytest.mark.slow
def test_segformer_config_trains_through_the_cli(tmp_path, monkeypatch):
    """One short epoch of configs/planted_segformer.yaml; the GradSkipCallback is left out (it does
    not explain segmentation models yet): the callbacks are the config's checkpoint alone."""
    monkeypatch.chdir(tmp_path)
    checkpoint = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": {"monitor": "val/miou"}}
    cli = train.main(
        [
            "fit", "--config", str(CONFIGS_DIR / "planted_segformer.yaml"),
            f"--trainer.callbacks={json.dumps([checkpoint])}", "--trainer.max_epochs", "1",
            "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "2", "--trainer.accelerator", "cpu",
            "--data.train_size", "96", "--data.val_size", "64", "--data.batch_size", "32",
            f"--trainer.logger.init_args.save_dir={tmp_path / 'outputs'}",
        ]
    )  # fmt: skip
    assert cli.trainer.global_step == 3
    logged = cli.trainer.callback_metrics
    assert 0.0 <= float(logged["val/miou"]) <= 1.0 and 0.0 <= float(logged["val/pixel_acc"]) <= 1.0
    assert float(logged["train/loss_epoch"]) > 0
    (saved,) = tmp_path.glob("outputs/**/checkpoints/*.ckpt")
    assert type(SegmentationModule.load_from_checkpoint(saved, map_location="cpu")) is SegmentationModule
