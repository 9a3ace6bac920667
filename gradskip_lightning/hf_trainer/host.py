"""A ``transformers.Trainer``'s side of the epoch-end seam (:class:`~gradskip_lightning.engine.host.Host`).

Where the Lightning callback reads ``trainer.state.fn``, ``is_global_zero`` and Lightning's logged
step, and puts monitorable values in ``callback_metrics``, :class:`TrainerHost` reads the
``TrainerState`` (``is_world_process_zero``, ``global_step``) and keeps the values in a mapping of its
own that the callback copies into each evaluation's metrics (``<metric_key_prefix>_<key>``, e.g.
``eval_faithfulness/gradskip/insertion``) and, once per explained epoch, into ``state.log_history``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from transformers import TrainerState

from gradskip_lightning.engine.discovery.images import send_alert
from gradskip_lightning.engine.output.monitor import invalidate, monitor

__all__ = [
    "ModelData",
    "TrainerHost",
    "check_best_metric",
    "check_weights",
    "ends_epoch",
    "epoch_index",
    "metric_prefix",
    "model_data",
]


@dataclass
class TrainerHost:
    """:class:`~gradskip_lightning.engine.host.Host` of one evaluation (or epoch end) of a ``transformers.Trainer``.

    Attributes:
        state: the Trainer's state (rank, step, log history).
        fitting: inside ``trainer.train()``; False under ``trainer.evaluate()`` outside it.
        monitored: key -> 0-d tensor, kept over the run like Lightning's ``callback_metrics`` (the
            callback keeps one for training and one for evaluations outside it).
        wandb_run: the active ``wandb.Run`` the alerts go to, or None (console warnings).
        prefix: the Trainer's ``metric_key_prefix`` of the evaluation (``"eval"``, ``"eval_<name>"``).
    """

    state: TrainerState
    fitting: bool
    monitored: dict[str, Tensor]
    wandb_run: Any | None = None
    prefix: str = "eval"

    @property
    def rank_zero(self) -> bool:
        return self.state.is_world_process_zero

    @property
    def step(self) -> int:
        return self.state.global_step

    def monitor(self, scalars: dict[str, float], stale: set[str]) -> None:
        monitor(self.monitored, scalars)
        invalidate(self.monitored, stale)

    def explained_weights(self) -> AbstractContextManager[Any]:
        return nullcontext()  # the Trainer averages no weights: the model's own are explained

    def alert(self, title: str, text: str) -> None:
        send_alert(self.wandb_run, title, text)

    def metrics(self, keys: Sequence[str] | None = None) -> dict[str, float]:
        """The monitored values (of ``keys``; None: all) as the evaluation's metrics ``<prefix>_<key>``,
        NaN where a key has no value this epoch."""
        names = sorted(self.monitored) if keys is None else sorted(keys)
        return {f"{self.prefix}_{name}": float(self.monitored.get(name, torch.tensor(math.nan))) for name in names}

    def record(self, keys: Sequence[str]) -> None:
        """Append the explained epoch's values (``keys``) to ``state.log_history`` as one row, as
        ``Trainer.log`` does (with ``epoch`` and ``step``); every rank, as the Trainer's own rows."""
        epoch = {} if self.state.epoch is None else {"epoch": self.state.epoch}
        self.state.log_history.append({**self.metrics(keys), **epoch, "step": self.state.global_step})


def metric_prefix(metrics: Mapping[str, Any]) -> str:
    """The ``metric_key_prefix`` of an evaluation's ``metrics``: the Trainer names each ``<prefix>_<name>``
    and always adds ``<prefix>_runtime`` (``"eval"`` when it is missing).

    >>> metric_prefix({"eval_loss": 0.5, "eval_runtime": 1.0}), metric_prefix({"eval_cifar_runtime": 1.0})
    ('eval', 'eval_cifar')
    """
    return next((name.removesuffix("_runtime") for name in metrics if name.endswith("_runtime")), "eval")


def epoch_index(epoch: float | None) -> int:
    """The 0-based training epoch a Trainer's ``state.epoch`` (epochs done, fractional inside one) is in:
    ``1.0`` (the end of the first) -> 0, ``1.5`` -> 1; 0 before training.

    >>> [epoch_index(e) for e in (None, 0.0, 0.5, 1.0, 1.0000001, 2.0)]
    [0, 0, 0, 0, 0, 1]
    """
    return max(0, math.ceil(round(epoch or 0.0, 6)) - 1)


def ends_epoch(epoch: float | None) -> bool:
    """Whether a Trainer's ``state.epoch`` is at the end of a training epoch (a whole number above 0).

    >>> [ends_epoch(e) for e in (None, 0.0, 0.5, 1.0, 2.0000001)]
    [False, False, False, True, True]
    """
    return epoch is not None and round(epoch, 6) > 0 and round(epoch, 6) == round(epoch)


@dataclass(frozen=True)
class ModelData:
    """What the callback's setup reads from a datamodule (:func:`~gradskip_lightning.engine.setup.data_setup`),
    taken from a ``transformers`` model's config and its image processor."""

    class_names: list[str] | None = None
    mean: Sequence[float] | None = None
    std: Sequence[float] | None = None
    task: str | None = None
    tag: None = field(default=None, init=False)  # no planted tag: the transplant test is Lightning's


def model_data(model: nn.Module, processing_class: Any | None) -> ModelData:
    """The class names of ``model.config.id2label``, the task (``problem_type``), and the image
    processor's ``image_mean``/``image_std`` (the images' normalisation, undone for display)."""
    config = getattr(model, "config", None)
    labels = getattr(config, "id2label", None) or {}
    count = int(getattr(config, "num_labels", 0) or 0)
    by_index = {int(index): str(name) for index, name in labels.items()}
    names = [by_index[c] for c in range(count)] if count and all(c in by_index for c in range(count)) else None
    multilabel = getattr(config, "problem_type", None) == "multi_label_classification"
    mean, std = getattr(processing_class, "image_mean", None), getattr(processing_class, "image_std", None)
    if mean is None or std is None:
        mean = std = None
    return ModelData(names, mean, std, "multilabel" if multilabel else None)


def check_weights(model: nn.Module) -> None:
    """Refuse a model whose weights are half precision (relevance gradients and perturbation curves underflow)."""
    dtype = next(model.parameters()).dtype
    if dtype in (torch.float16, torch.bfloat16):
        raise ValueError(
            f"GradSkipTrainerCallback cannot explain a model whose weights are {dtype}: relevance gradients and "
            "perturbation curves underflow in half precision. Load the model in float32 (torch_dtype=torch.float32) "
            "and train in mixed precision (TrainingArguments(bf16=True) or fp16=True keep float32 weights)"
        )


def check_best_metric(name: str | None, prefix: str, every_n_epochs: int) -> None:
    """Refuse ``metric_for_best_model`` naming one of the callback's keys (``log_prefix`` ``prefix``) when
    not every epoch is explained: the evaluations before the first explanation would have no value,
    and the Trainer raises a KeyError there, after an epoch of training."""
    if name is None or every_n_epochs == 1 or f"/{prefix}" not in f"/{name.removeprefix('eval_')}":
        return
    raise ValueError(
        f"metric_for_best_model={name!r} is a GradSkip value, but with every_n_epochs={every_n_epochs} the "
        f"evaluations of the first {every_n_epochs - 1} epoch(s) have none (the Trainer would raise a KeyError "
        "there): use every_n_epochs=1 or another metric_for_best_model"
    )
