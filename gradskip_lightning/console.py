"""One line of metrics per epoch on the console, for runs whose output is not a terminal.

A progress bar draws nothing useful into a file or a pipe (Lightning's rich bar prints only its last
frame, at the end of fit), so a redirected run stays silent for minutes. ``train.py`` adds
:class:`EpochLine` and turns the bar off when stdout is not a TTY; each epoch then prints, on rank
zero, a line such as::

    epoch 2/9 train/acc=0.81 train/loss=0.5012 val/acc=0.8803 val/auroc=0.9871 val/loss=0.3518 \
faithfulness/gradskip/insertion=0.6123 faithfulness/gradskip/deletion=0.2011 63.2 s

The values are those of ``trainer.callback_metrics`` at the end of the training epoch: the model's
epoch metrics (``train/loss_epoch`` shown as ``train/loss``; per-step values left out) and, for each
:class:`~gradskip_lightning.callbacks.GradSkipCallback`, its main scores when computed at this epoch
(not those the time budget or ``every_n_epochs`` left for another: ``callback_metrics`` keeps their
older values, :attr:`~gradskip_lightning.callbacks.GradSkipCallback.logged_keys` says which are new);
the time is the epoch's wall time in seconds, validation and the callback's explanation included.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from lightning.pytorch import Callback, LightningModule, Trainer
from typing_extensions import override

from gradskip_lightning.callbacks import GradSkipCallback
from gradskip_lightning.engine.keys import Section, key

__all__ = ["EpochLine", "epoch_line", "line_keys"]

#: The model's epoch metrics: ``train/...`` and ``val/...`` without a further "/".
MODEL_KEY = re.compile(r"(train|val)/[^/]+")
#: The callback's main scores, in the order shown (each present only when it was computed).
MAIN_SCORES: tuple[tuple[Section, str], ...] = (
    ("faithfulness", "insertion"),
    ("faithfulness", "deletion"),
    ("regions", "pointing_game"),
    ("transplant", "flip_rate"),
    ("discovery", "max_suspicion"),
)


def line_keys(metrics: Mapping[str, Any], prefixes: Sequence[str]) -> list[str]:
    """The keys of ``metrics`` an epoch line shows, in order: the model's epoch metrics (sorted, each
    once), then for each callback ``log_prefix`` its main scores and the relevance mass on each named
    region (the explained method's only)."""
    model = sorted(
        k
        for k in metrics
        if MODEL_KEY.fullmatch(k)
        and not k.endswith("_step")
        and not (k.endswith("_epoch") and k[: -len("_epoch")] in metrics)
    )  # a value logged per step and per epoch is there three times: ``x`` (the epoch's), ``x_step``, ``x_epoch``
    scores: list[str] = []
    for prefix in prefixes:
        scores += [k for section, name in MAIN_SCORES if (k := key(section, prefix, name)) in metrics]
        mass = re.compile(re.escape(key("regions", prefix, "mass/")) + r"[^/]+")
        scores += sorted(k for k in metrics if mass.fullmatch(k))
    return model + scores


def epoch_line(
    epoch: int, max_epochs: int | None, metrics: Mapping[str, Any], keys: Sequence[str], seconds: float
) -> str:
    """``epoch <e>/<last> key=value ... <seconds> s``; epochs count from 0 as in checkpoints and maps
    files; values to 4 significant digits (``nan`` for a skipped score).

    >>> epoch_line(2, 10, {"train/loss_epoch": 0.51234, "val/acc": 0.9}, ["train/loss_epoch", "val/acc"], 63.24)
    'epoch 2/9 train/loss=0.5123 val/acc=0.9 63.2 s'
    """
    head = f"epoch {epoch}/{max_epochs - 1}" if max_epochs is not None and max_epochs > 0 else f"epoch {epoch}"
    values = [f"{k.removesuffix('_epoch')}={float(metrics[k]):.4g}" for k in keys]
    return " ".join([head, *values, f"{seconds:.1f} s"])


class EpochLine(Callback):
    """Print one line of metrics per training epoch (see the module docstring), on rank zero only.

    List it after the GradSkipCallback (``train.py`` appends it): without validation the callback
    explains at the end of the training epoch, and a line printed before would miss its scores.

    Args:
        stream: where to print; None: ``sys.stdout`` at the time of printing.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self._started = time.perf_counter()

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._started = time.perf_counter()

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        metrics = trainer.callback_metrics
        callbacks: list[Callback] = trainer.callbacks  # type: ignore[attr-defined]  # set by the Trainer
        explaining = [c for c in callbacks if isinstance(c, GradSkipCallback)]
        fresh = frozenset().union(*(c.logged_keys for c in explaining))
        # a score computed at an earlier epoch (the time budget, every_n_epochs) is not repeated as this one's
        shown = line_keys(metrics, [c.log_prefix for c in explaining])
        keys = [k for k in shown if MODEL_KEY.fullmatch(k) or k in fresh]
        line = epoch_line(trainer.current_epoch, trainer.max_epochs, metrics, keys, time.perf_counter() - self._started)
        print(line, file=self.stream or sys.stdout, flush=True)
