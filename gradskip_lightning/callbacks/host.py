"""The Lightning ``Trainer``'s side of the epoch-end seam (:class:`gradskip_lightning.engine.host.Host`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.trainer.states import TrainerFn

from gradskip_lightning.callbacks.averaging import Hook, averaged_weights
from gradskip_lightning.engine.discovery.images import send_alert
from gradskip_lightning.engine.output.monitor import invalidate, monitor

__all__ = ["LightningHost", "logged_step"]


def logged_step(trainer: Trainer) -> int:
    """The step Lightning logs its epoch metrics at.

    Private API, kept on purpose: no public attribute holds it (``trainer.global_step`` counts optimizer
    steps, which differ under gradient accumulation and manual optimisation); Lightning's own logger
    connector reads ``fit_loop.epoch_loop._batches_that_stepped`` (``trainer.global_step`` if it is gone);
    ``tests/callbacks/test_private_apis.py`` fails if it disappears.
    """
    return getattr(trainer.fit_loop.epoch_loop, "_batches_that_stepped", trainer.global_step)


@dataclass
class LightningHost:
    """:class:`Host` of a Lightning ``Trainer``: ``callback_metrics``, Lightning's epoch-metrics step,
    the :mod:`.averaging` weights swap (``owner``: the callback, at ``hook``), the W&B logger's alerts."""

    trainer: Trainer
    pl_module: LightningModule
    owner: Callback
    hook: Hook

    @property
    def fitting(self) -> bool:
        return self.trainer.state.fn == TrainerFn.FITTING

    @property
    def rank_zero(self) -> bool:
        return self.trainer.is_global_zero

    @property
    def step(self) -> int:
        return logged_step(self.trainer)

    def monitor(self, scalars: dict[str, float], stale: set[str]) -> None:
        monitor(self.trainer.callback_metrics, scalars)
        invalidate(self.trainer.callback_metrics, stale)

    def explained_weights(self) -> AbstractContextManager[Any]:
        return averaged_weights(self.trainer, self.pl_module, self.owner, self.hook)

    def alert(self, title: str, text: str) -> None:
        logger = next((lg for lg in self.trainer.loggers if isinstance(lg, WandbLogger)), None)
        send_alert(None if logger is None else logger.experiment, title, text)
