"""The seam between one epoch end (:class:`~.epoch.EpochRunner`) and the training loop that runs it.

An epoch end needs five things from its training loop: whether it is fitting (drift references,
the time budget and the maps files follow fits only), whether this process is rank zero (it alone
reports), the step the epoch's row is logged at, where monitorable values go, and the weights to
explain (an averaging callback's) and where an alert goes. :class:`Host` names them;
:class:`gradskip_lightning.callbacks.host.LightningHost` gives them from a Lightning ``Trainer``,
:class:`gradskip_lightning.hf_trainer.host.TrainerHost` from a ``transformers.Trainer``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

__all__ = ["Host"]


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
