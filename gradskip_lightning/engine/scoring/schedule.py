"""When the callback explains: every n-th fit epoch, each tried once, and the last trained epoch at the end of fit."""

from __future__ import annotations

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

    def due(self, epoch: int) -> bool:
        """Whether fit ``epoch`` is an n-th epoch not tried yet."""
        return (epoch + 1) % self.every_n_epochs == 0 and epoch != self.last_explained

    def left_at_fit_end(self) -> int | None:
        """The last trained epoch when it was not explained (the end of fit explains it), else None."""
        return self.last_trained if self.last_trained != self.last_explained else None

    def reset(self) -> None:
        """A new fit: nothing tried or trained yet."""
        self.last_explained = self.last_trained = None
