"""The model and data settings of the repository's ``configs/*.yaml``, so benchmarks train what
``train.py`` trains (one source of truth, no copies)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, TypeVar

import yaml
from lightning.pytorch import LightningDataModule, LightningModule

from gradskip_lightning.training.classifier import DEFAULT_MODEL

CONFIGS_DIR = Path(__file__).resolve().parents[1] / "configs"


def _load(name: str) -> dict[str, Any]:
    path = CONFIGS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: run the benchmarks from a clone of the gradskip-lightning repository"
        )
    return yaml.safe_load(path.read_text())


def _init_args(section: dict[str, Any]) -> dict[str, Any]:
    """A config section's init args: its ``init_args`` when it names a ``class_path``, else the section."""
    return dict(section.get("init_args", {})) if "class_path" in section else dict(section)


def _class(path: str) -> Any:
    """The class named by a dotted ``path``, e.g. ``gradskip_lightning.training.classifier.ViTClassifier``."""
    module, _, cls = path.rpartition(".")
    return getattr(importlib.import_module(module), cls)


def config_settings(name: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(model init args, data init args, trainer args) of ``configs/<name>.yaml``.

    The model section is either the init args themselves (a ViTClassifier, train.py's default) or a
    ``class_path`` with ``init_args`` (e.g. the SegFormer config); both give the init args.

    >>> config_settings("planted_segformer")[0]["hidden_sizes"]
    [16, 32, 48, 64]

    Raises:
        FileNotFoundError: outside a clone of the repository (the configs are not packaged).
    """
    config = _load(name)
    return _init_args(config["model"]), _init_args(config["data"]), dict(config["trainer"])


def callback_settings(name: str, class_name: str = "GradSkipCallback") -> dict[str, Any]:
    """The init args of the ``trainer.callbacks`` entry of ``configs/<name>.yaml`` whose class is
    ``class_name`` (KeyError when there is none): what that config's runs give the callback.

    >>> callback_settings("bloodmnist")["methods"]["compare"]
    ['rollout']
    """
    for entry in config_settings(name)[2].get("callbacks", []):
        if entry["class_path"].rpartition(".")[2] == class_name:
            return dict(entry.get("init_args", {}))
    raise KeyError(f"configs/{name}.yaml has no {class_name} in trainer.callbacks")


def model_class(name: str) -> type[LightningModule]:
    """The model class named by ``model.class_path`` in ``configs/<name>.yaml``; a model section
    without one is a :class:`~gradskip_lightning.training.classifier.ViTClassifier` (train.py's default).

    >>> model_class("planted_segformer").__name__, model_class("planted_shapes").__name__
    ('SegmentationModule', 'ViTClassifier')
    """
    return _class(_load(name)["model"].get("class_path", DEFAULT_MODEL))


def datamodule_class(name: str) -> type[LightningDataModule]:
    """The datamodule class named by ``data.class_path`` in ``configs/<name>.yaml``.

    >>> datamodule_class("planted_shapes").__name__
    'PlantedShapesDataModule'
    """
    return _class(_load(name)["data"]["class_path"])


DataModule = TypeVar("DataModule", bound=LightningDataModule)


def build_datamodule(name: str, expected: type[DataModule], **data: Any) -> DataModule:
    """``configs/<name>.yaml``'s datamodule built from ``data`` (its init args); TypeError unless it
    is an ``expected`` (what the calling benchmark reads from it)."""
    datamodule = datamodule_class(name)(**data)
    if not isinstance(datamodule, expected):
        raise TypeError(
            f"configs/{name}.yaml builds a {type(datamodule).__name__}; the benchmark needs a {expected.__name__}"
        )
    return datamodule
