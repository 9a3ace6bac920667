"""Train a benchmark's model or load it from a checkpoint: the one place every benchmark gets its models.

A model is built from ``configs/<name>.yaml`` (the config's init args and the datamodule's
:data:`~gradskip_lightning.training.classifier.LINKED_FROM_DATA`, as train.py gives them) and trained
on one CPU device with no logger and no validation, or loaded from a Lightning checkpoint named
:func:`checkpoint_path`. A config whose data are read from files (it sets a ``root``, e.g. BloodMNIST)
needs the folder holding them (:func:`with_data_root`; no download).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningDataModule, LightningModule, Trainer, seed_everything

from benchmarks.configs import config_settings, model_class
from gradskip_lightning.training.classifier import LINKED_FROM_DATA

#: Training epochs that differ from the config's: 4 of BloodMNIST's 10, so a benchmark fits in
#: 30 minutes on 2 CPU cores (``--epochs 10`` trains as the config does).
EPOCHS = {"bloodmnist": 4}


def needs_data_root(config: str) -> bool:
    """Whether ``configs/<config>.yaml`` reads files from a ``root`` folder (it sets one)."""
    return "root" in config_settings(config)[1]


def has_data(dataset: str, config: str, data_root: Path | None) -> bool:
    """Whether ``dataset`` (trained with ``configs/<config>.yaml``) can run: it reads no files, or
    ``data_root`` holds them; else a note saying it is skipped is printed."""
    if needs_data_root(config) and data_root is None:
        print(f"note: {dataset} skipped: pass --data-root, the folder holding its files")
        return False
    return True


def with_data_root(dataset: str, data: dict[str, Any], data_root: Path | None) -> dict[str, Any]:
    """The data settings ``data`` of ``dataset`` reading from ``data_root`` (no download) when they set a
    ``root``; unchanged otherwise.

    >>> with_data_root("planted_shapes", {"size": 32}, None)
    {'size': 32}
    >>> with_data_root("bloodmnist", {"root": "data"}, Path("/data"))
    {'root': '/data', 'download': False}

    Raises:
        ValueError: the settings read files and ``data_root`` is None.
    """
    if "root" not in data:
        return data
    if data_root is None:
        raise ValueError(f"{dataset} needs --data-root, the folder holding its files")
    return {**data, "root": str(data_root), "download": False}


def checkpoint_path(folder: Path, name: str, seed: int) -> Path:
    """Where the model ``name`` (a config or dataset) of training ``seed`` is saved in, and loaded from, ``folder``.

    >>> checkpoint_path(Path("ckpts"), "planted_shapes", 2).as_posix()
    'ckpts/planted_shapes-seed2.ckpt'
    """
    return folder / f"{name}-seed{seed}.ckpt"


def add_checkpoint_arguments(parser: argparse.ArgumentParser, model: str) -> None:
    """The ``--checkpoints DIR`` and ``--save-checkpoints DIR`` options; ``model`` names the checkpoints'
    file names and class for the help text, e.g. ``"<dataset>-seed<k>.ckpt (ViTClassifier)"``."""
    parser.add_argument(
        "--checkpoints",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"load DIR/{model} checkpoints; a seed without one is trained",
    )
    parser.add_argument(
        "--save-checkpoints", type=Path, default=None, metavar="DIR", help="save each trained model there"
    )


def quiet_trainer(**kwargs: Any) -> Trainer:
    """A CPU Trainer of one device with no logger, checkpoints, progress bar or summary; ``kwargs``
    add to it."""
    options: dict[str, Any] = dict(
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    return Trainer(accelerator="cpu", devices=1, **options, **kwargs)


@dataclass(frozen=True)
class TrainingFacts:
    """How a benchmark model came to be: loaded from ``checkpoint``, or trained ``epochs`` epochs
    in ``train_seconds`` (wall clock; 0 when loaded)."""

    checkpoint: str | None
    epochs: int | None
    train_seconds: float


def configured_model(name: str, datamodule: LightningDataModule) -> LightningModule:
    """The model of ``configs/<name>.yaml`` at fresh weights (the global seed's), the arguments linked from the data
    (:data:`~gradskip_lightning.training.classifier.LINKED_FROM_DATA`) taken from ``datamodule``: a config that
    also sets a linked value (in_chans) gets the data's."""
    settings, _, _ = config_settings(name)
    links = {link: getattr(datamodule, link) for link in LINKED_FROM_DATA}
    return model_class(name)(**{**settings, **links})


def train_or_load(
    name: str,
    datamodule: LightningDataModule,
    *,
    checkpoint: Path | None,
    epochs: int | None,
    seed: int,
    max_train_batches: int | None = None,
    callbacks: list[Callback] | None = None,
    root: Path | None = None,
) -> tuple[LightningModule, TrainingFacts]:
    """The model of ``configs/<name>.yaml`` in eval mode, loaded from ``checkpoint`` or trained (no
    validation); and facts about it.

    ``epochs`` None uses the config's (fewer for BloodMNIST, :data:`EPOCHS`); ``max_train_batches``
    caps the batches per epoch; ``callbacks`` go to the Trainer, whose ``default_root_dir`` is ``root`` (None:
    the working folder; only callbacks write there).

    Returns the model and its :class:`TrainingFacts`.
    """
    cls = model_class(name)
    if checkpoint is not None:
        model = cls.load_from_checkpoint(checkpoint, map_location="cpu")
        return model.eval(), TrainingFacts(str(checkpoint), None, 0.0)
    _, _, trainer_args = config_settings(name)
    epochs = EPOCHS.get(name, trainer_args["max_epochs"]) if epochs is None else epochs
    seed_everything(seed, verbose=False)
    model = configured_model(name, datamodule)
    trainer = quiet_trainer(
        max_epochs=epochs,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        limit_train_batches=max_train_batches,
        callbacks=callbacks,
        **({} if root is None else {"default_root_dir": str(root)}),
    )
    start = time.perf_counter()
    trainer.fit(model, datamodule=datamodule)
    return model.eval(), TrainingFacts(None, epochs, time.perf_counter() - start)


def cached_model(
    config: str,
    datamodule: LightningDataModule,
    *,
    key: str,
    seed: int,
    load_from: Path | None,
    save_to: Path | None,
    epochs: int | None,
    max_train_batches: int | None = None,
) -> tuple[LightningModule, TrainingFacts]:
    """The model of ``configs/<config>.yaml`` and ``seed``: loaded from ``load_from`` when that folder holds
    its :func:`checkpoint_path` under ``key`` (a note is printed when it does not), else trained (see
    :func:`train_or_load`) and, with ``save_to``, saved there under the same name."""
    checkpoint = None if load_from is None else checkpoint_path(load_from, key, seed)
    if checkpoint is not None and not checkpoint.exists():
        print(f"note: {checkpoint} not found: {key} seed {seed} is trained", flush=True)
        checkpoint = None
    model, facts = train_or_load(
        config, datamodule, checkpoint=checkpoint, epochs=epochs, seed=seed, max_train_batches=max_train_batches
    )
    if save_to is not None and checkpoint is None:
        save_to.mkdir(parents=True, exist_ok=True)
        model.trainer.save_checkpoint(checkpoint_path(save_to, key, seed))
    return model, facts


def seed_model(
    config: str, datamodule: LightningDataModule, seed: int, args: argparse.Namespace
) -> tuple[LightningModule, TrainingFacts]:
    """The model of ``config`` and ``seed`` of a subcommand with :func:`add_checkpoint_arguments`:
    :func:`cached_model` under ``config``'s name with its ``--checkpoints``, ``--save-checkpoints``,
    ``--epochs`` and ``--max-train-batches``."""
    return cached_model(
        config,
        datamodule,
        key=config,
        seed=seed,
        load_from=args.checkpoints,
        save_to=args.save_checkpoints,
        epochs=args.epochs,
        max_train_batches=args.max_train_batches,
    )
