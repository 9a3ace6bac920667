"""The callback's scalars made monitorable by ``EarlyStopping``, ``ModelCheckpoint`` and co.

Both functions write a metrics mapping (key -> 0-d tensor): Lightning's ``trainer.callback_metrics``,
or the values :class:`~gradskip_lightning.hf_trainer.host.TrainerHost` hands each evaluation of a
``transformers.Trainer``. Under Lightning they go straight into ``trainer.callback_metrics`` on every
rank, not through ``pl_module.log``: under DDP Lightning then warns once per key to use
``sync_dist=True`` (the values are already equal on every rank), ``sync_dist`` would add a
collective per key at points ranks need not share, and ``on_fit_end`` allows no ``log`` at all.
"""

from __future__ import annotations

import math
from collections.abc import MutableMapping

import torch
from torch import Tensor

__all__ = ["invalidate", "monitor"]


def monitor(metrics: MutableMapping[str, Tensor], scalars: dict[str, float]) -> None:
    """Make the finite ``scalars`` monitorable by EarlyStopping and co. (in ``metrics``, e.g.
    ``trainer.callback_metrics``) on every rank, not sent to the loggers; a NaN one (undefined this
    epoch, e.g. a class without probes) is left out, an earlier epoch's value removed."""
    for name, value in scalars.items():
        if math.isfinite(value):
            metrics[name] = torch.tensor(value, dtype=torch.float32)
        else:
            metrics.pop(name, None)


def invalidate(metrics: MutableMapping[str, Tensor], names: set[str]) -> None:
    """Set the callback's monitored ``names`` to NaN in ``metrics``: a skipped epoch
    has no score, and a NaN one is what monitors act on (``EarlyStopping(check_finite=True)`` stops,
    ``ModelCheckpoint`` ranks it worst), where a removed key would make them raise and an earlier
    epoch's value would be taken for this one's."""
    for name in names:
        metrics[name] = torch.tensor(float("nan"))
