"""The seam between one epoch end (:class:`~.epoch.EpochRunner`) and the training loop that runs it.

An epoch end needs five things from its training loop: whether it is fitting (drift references,
the time budget and the maps files follow fits only), whether this process is rank zero (it alone
reports), the step the epoch's row is logged at, where monitorable values go, and the weights to
explain (an averaging callback's) and where an alert goes. :class:`Host` names them;
:class:`LightningHost` gives them from a Lightning ``Trainer`` (the :class:`~.core.GradSkipCallback`),
:class:`gradskip_lightning.hf_trainer.host.TrainerHost` from a ``transformers.Trainer``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.trainer.states import TrainerFn

from gradskip_lightning.callback.averaging import Hook, averaged_weights
from gradskip_lightning.callback.discovery.images import send_alert
from gradskip_lightning.callback.output.monitor import invalidate, monitor
from gradskip_lightning.callback.output.report import logged_step

__all__ = ["Host", "LightningHost"]


class Host(Protocol):
    """What one epoch end needs from the training loop that runs it.

    Attributes:
        fitting: the epoch end is part of a fit (else an evaluation outside it: ``validate/`` keys,
            drift references unchanged, no maps files, no time budget).
        rank_zero: this process reports (the others run the same collectives and write nothing).
        step: the step the epoch's row is logged at.
    """

    @property
    def fitting(self) -> bool: ...

    @property
    def rank_zero(self) -> bool: ...

    @property
    def step(self) -> int: ...

    def monitor(self, scalars: dict[str, float], stale: set[str]) -> None:
        """Make ``scalars`` monitorable (every rank; a NaN one leaves its key out) and set the ``stale``
        keys NaN there (a skipped stage's scores)."""

    def explained_weights(self) -> AbstractContextManager[Any]:
        """The weights the user keeps in the module inside the block (an average's), the module as it was after."""

    def alert(self, title: str, text: str) -> None:
        """Send an alert (rank zero): ``wandb.alert`` through the run, or a console warning without one."""


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
