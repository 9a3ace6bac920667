"""The epoch's explanation, isolated from training.

Training does not see it: RNG states (torch, CUDA, numpy, Python) and every module's train/eval
mode are restored, no parameter ``.grad`` is written, and a failure (out of memory, non-finite
maps) is returned as a message instead of raised.
"""

from __future__ import annotations

import torch
from lightning.pytorch.utilities.seed import isolate_rng
from torch import nn

from gradskip_lightning.core.adapter import eval_mode
from gradskip_lightning.core.explanation import ModelExplainer
from gradskip_lightning.engine.probes import ProbeSet
from gradskip_lightning.engine.scoring.compute import EpochWork, explain_probes
from gradskip_lightning.engine.scoring.distributed import gather_records, shard_positions
from gradskip_lightning.engine.scoring.record import ProbeRecord
from gradskip_lightning.engine.settings import ScoreSettings
from gradskip_lightning.metrics.perturbation import Activation
from gradskip_lightning.shortcuts.transplant import Transplant

__all__ = ["explain_isolated"]


def explain_isolated(
    module: nn.Module,
    explainers: dict[str, ModelExplainer],
    probes: ProbeSet,
    settings: ScoreSettings,
    *,
    batch_size: int,
    transplant: Transplant | None,
    activation: Activation,
    progress: bool,
    work: EpochWork | None = None,
) -> tuple[dict[str, ProbeRecord], str | None]:
    """Explain this rank's shard of ``probes`` with every explainer (the first also gives head
    statistics) and gather the shards: (method -> record of all P probes, None), or ({}, the error)
    when any rank failed. Every rank must call it (see :func:`~.distributed.gather_records`).
    ``work`` (one per epoch end) shares the perturbation starts between the methods."""
    shard = shard_positions(len(probes))
    records: dict[str, ProbeRecord] = {}
    error = None
    first = next(iter(explainers))
    work = EpochWork() if work is None else work
    with isolate_rng(include_cuda=True), torch.inference_mode(False):
        try:
            part = probes.subset(shard.positions)
            part.images = part.images.clone()  # a normal tensor, even under inference mode
            with eval_mode(module):  # every module's own mode back afterwards
                for name, explainer in explainers.items():
                    records[name] = explain_probes(
                        explainer,
                        part,
                        settings,
                        batch_size=batch_size,
                        transplant=transplant,
                        heads=name == first,
                        activation=activation,
                        progress=progress,
                        agree=True,
                        work=work,
                    )
        except Exception as err:  # noqa: BLE001 - isolation: torch.OutOfMemoryError, non-finite maps, ...
            error, records = f"{type(err).__name__}: {err}", {}
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        return gather_records(records, shard, len(probes), error)
