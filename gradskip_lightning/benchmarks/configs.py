"""The model and data settings of the repository's ``configs/*.yaml``, so benchmarks train what
``train.py`` trains (one source of truth, no copies)."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import yaml

CONFIGS_DIR = Path(__file__).resolve().parents[2] / "configs"


def _load(name: str) -> dict[str, Any]:
    path = CONFIGS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: run the benchmarks from a clone of the gradskip-lightning repository"
        )
    return yaml.safe_load(path.read_text())


def config_settings(name: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(model init args, data init args, trainer args) of ``configs/<name>.yaml``.

    Raises:
        FileNotFoundError: outside a clone of the repository (the configs are not packaged).
    """
    config = _load(name)
    return dict(config["model"]), dict(config["data"]["init_args"]), dict(config["trainer"])


def datamodule_class(name: str) -> type:
    """The datamodule class named by ``data.class_path`` in ``configs/<name>.yaml``.

    >>> datamodule_class("planted_shapes").__name__
    'PlantedShapesDataModule'
    """
    module, _, cls = _load(name)["data"]["class_path"].rpartition(".")
    return getattr(importlib.import_module(module), cls)
