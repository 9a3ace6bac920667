"""When the callback explains: every n-th fit epoch, each tried once, and the last trained epoch at the end of fit."""

from __future__ import annotations

import math

from lightning.pytorch import Trainer
from lightning.pytorch.utilities import rank_zero_warn

__all__ = ["EpochSchedule"]


class EpochSchedule:
    """The fit epochs due for an explanation (epochs n-1, 2n-1, ...), each tried once.

    Attributes:
        every_n_epochs: n.
        last_explained: the last fit epoch tried, whether it worked or not (kept in checkpoints).
        last_trained: the last fit epoch whose training ended.
    """

    def __init__(self, every_n_epochs: int) -> None:
        self.every_n_epochs = every_n_epochs
        self.last_explained: int | None = None
        self.last_trained: int | None = None
        self._said_mid_epoch = False

    def due(self, epoch: int) -> bool:
        """Whether fit ``epoch`` is an n-th epoch not tried yet."""
        return (epoch + 1) % self.every_n_epochs == 0 and epoch != self.last_explained

    def mid_epoch(self, trainer: Trainer) -> bool:
        """Whether this fit validation runs before the epoch's last batch (``val_check_interval`` < 1):
        the epoch end explains instead (the weights the epoch ends with); said once."""
        batches = trainer.num_training_batches
        if math.isinf(batches) or trainer.fit_loop.epoch_loop.batch_idx + 1 >= batches:
            return False
        if not self._said_mid_epoch:
            self._said_mid_epoch = True
            rank_zero_warn(
                f"GradSkipCallback: with val_check_interval={trainer.val_check_interval!r} validation also runs within "
                "epochs; the callback explains at the end of each epoch only (the weights the epoch ends with), "
                "not at the validations before it"
            )
        return True

    def left_at_fit_end(self) -> int | None:
        """The last trained epoch when it was not explained (the end of fit explains it), else None."""
        return self.last_trained if self.last_trained != self.last_explained else None

    def reset(self) -> None:
        """A new fit: nothing tried or trained yet."""
        self.last_explained = self.last_trained = None
