"""Explain the weights the user keeps under Lightning's weight averaging, whatever the callback order.

Lightning's :class:`~lightning.pytorch.callbacks.WeightAveraging` (and ``EMAWeightAveraging``)
puts the averaged weights into the module for validation (``on_validation_epoch_start``, swapped
back in ``on_validation_epoch_end``), saves them as the checkpoint's ``state_dict`` and copies them
into the module at the end of training: they are the weights the user keeps. The callback's own
``on_validation_epoch_end`` runs before or after the averaging callback's, in list order, so
without this module the list order would decide whether raw or averaged weights are explained.
``StochasticWeightAveraging`` validates the raw weights and moves the average in only after the
last epoch: epoch ends explain the raw weights, as its validation does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import WeightAveraging

__all__ = ["averaged_weights"]

Hook = Literal["validation", "train", "fit_end"]


@contextmanager
def averaged_weights(trainer: Trainer, pl_module: LightningModule, caller: Callback, hook: Hook) -> Iterator[None]:
    """The averaged weights in ``pl_module`` inside the block, the module as it was after.

    ``hook``: where ``caller`` is. In ``on_validation_epoch_end`` an averaging callback listed after
    ``caller`` has not swapped back yet; one listed before has (and at a training epoch end none
    is swapped in); after fit the average is already in the module. The swap is the averaging
    callback's own, through its public hooks (``on_validation_epoch_start`` puts the average in,
    ``on_validation_epoch_end`` takes it out; each a no-op before it has an average), and restores
    the module bitwise.
    """
    callbacks: list[Callback] = trainer.callbacks  # type: ignore[attr-defined]  # set by the Trainer
    swapped = []
    for averaging in (c for c in callbacks if isinstance(c, WeightAveraging)):
        in_module = hook == "fit_end" or (hook == "validation" and callbacks.index(averaging) > callbacks.index(caller))
        if not in_module:
            averaging.on_validation_epoch_start(trainer, pl_module)
            swapped.append(averaging)
    try:
        yield
    finally:
        for averaging in reversed(swapped):
            averaging.on_validation_epoch_end(trainer, pl_module)
