"""Every YAML in configs/ parses and builds its model, datamodule, trainer, logger and callbacks."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.strategies import DDPStrategy

import train
from gradskip_lightning import GradSkipCallback
from gradskip_lightning.data import BloodMNISTDataModule, PlantedShapesDataModule
from gradskip_lightning.model import ViTClassifier

# pytest's own arguments are in sys.argv while the tests pass args= to LightningCLI.
pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
EXPECTED = {"bloodmnist.yaml", "planted_shapes.yaml", "planted_shapes_ddp.yaml", "shortcut.yaml"}


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
    assert isinstance(model, ViTClassifier)
    assert isinstance(data, BloodMNISTDataModule if config.name == "bloodmnist.yaml" else PlantedShapesDataModule)
    # class count and image size come from the datamodule
    assert model.hparams.num_classes == data.num_classes == model.model.num_classes
    assert model.hparams.img_size == data.img_size
    assert tuple(model.model.patch_embed.img_size) == (data.img_size, data.img_size)
    assert sum(isinstance(cb, GradSkipCallback) for cb in trainer.callbacks) == 1
    assert isinstance(trainer.logger, WandbLogger)
    assert trainer.max_epochs >= 1
    assert os.listdir(workdir) == []


def test_bloodmnist_root_override_and_download_default():
    cli = build(Path("configs/bloodmnist.yaml").resolve(), "--data.root", "/somewhere/medmnist")
    assert cli.datamodule.path == Path("/somewhere/medmnist/bloodmnist.npz")
    assert cli.datamodule.download and cli.datamodule.img_size == 28


def test_shortcut_config_plants_the_marker_in_training_only():
    cli = build(Path("configs/shortcut.yaml").resolve())
    assert cli.datamodule.shortcut_fraction == 1.0
    cli.datamodule.setup("fit")
    assert cli.datamodule.train_dataset.shortcut_fraction == 1.0
    assert cli.datamodule.val_dataset.shortcut_fraction == 0.0


def test_ddp_config_uses_two_cpu_processes():
    cli = build(Path("configs/planted_shapes_ddp.yaml").resolve())
    assert isinstance(cli.trainer.strategy, DDPStrategy)
    assert cli.trainer.num_devices == 2
