"""Explain a probe set and score the maps, in chunks of a fixed batch size.

Every value is per probe, in probe order, on the CPU (a :class:`~.record.ProbeRecord`), so shards
from several processes can be concatenated and compared with a single-process run. The scores
computed are the rows of :data:`~.scores.SCORES` that apply.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gradskip_lightning.explanation import ModelExplainer
from gradskip_lightning.metrics.perturbation import Activation, class_probabilities

from .distributed import any_rank
from .probes import ProbeSet
from .record import ProbeRecord
from .scores import SCORES, Chunk, ExplainFailure
from .settings import ScoreSettings
from .transplant import Transplant

__all__ = ["explain_probes", "ExplainFailure"]


def _cpu(value: Tensor) -> Tensor:
    return value.detach().float().cpu() if value.is_floating_point() else value.detach().cpu()


def _explain_chunk(
    explainer: ModelExplainer,
    probes: ProbeSet,
    settings: ScoreSettings,
    transplant: Transplant | None,
    heads: bool,
    activation: Activation,
    agree: bool,
) -> ProbeRecord:
    parameter = next(explainer.model.parameters())
    dtype = parameter.dtype if parameter.is_floating_point() else torch.float32
    images = probes.images.to(parameter.device, dtype)  # the module's dtype: float64 under precision="64-true"
    targets = probes.labels.to(parameter.device) if settings.target == "label" else None
    exp = explainer.explain(images, targets)
    bad = ~exp.valid | ~torch.isfinite(exp.logits).flatten(1).all(dim=1)
    if any_rank(bool(bad.any()), parameter.device) if agree else bool(bad.any()):
        ids = probes.ids[bad.cpu()].tolist()
        where = f"for probe ids {ids}" if ids else "on another process's probes"
        raise ExplainFailure(f"{exp.method}: non-finite relevance or logits {where}")
    record = ProbeRecord(
        maps=exp.maps,
        token_maps=exp.token_maps,
        targets=exp.targets,
        predictions=exp.predictions,
        probabilities=class_probabilities(exp.logits, exp.predictions, activation),
    )
    chunk = Chunk(explainer, images, probes, exp, settings, transplant, activation)
    for score in SCORES:
        if score.applies(chunk):
            for name, values in score.compute(chunk).items():
                setattr(record, name, values)
    if heads:
        record.head_weights, record.grad_flow, record.sparsity = exp.head_weights, exp.grad_flow, exp.sparsity
        if exp.gates is not None:
            record.gates = exp.gates.nanmean(dim=2)  # (B, L): mean beta_main over tokens (NaN: SegFormer padding)
    return ProbeRecord(**{name: _cpu(tensor) for name, tensor in record.values().items()})


def explain_probes(
    explainer: ModelExplainer,
    probes: ProbeSet,
    settings: ScoreSettings,
    *,
    batch_size: int = 32,
    transplant: Transplant | None = None,
    heads: bool = True,
    activation: Activation = "softmax",
    progress: bool = False,
    agree: bool = False,
) -> ProbeRecord:
    """Explain and score every probe, ``batch_size`` probes at a time.

    Runs the explainer's model in eval mode (the caller restores the mode). Probabilities and
    perturbation scores use ``activation`` ("sigmoid" for multi-label models); a segmentation
    model's are scored by the mean logit of the class over the explained region. The transplant
    scores need ``transplant``. Head statistics and gates are filled only with ``heads`` and for
    methods that have them. With ``agree`` (every process calls this on its shard) a non-finite
    result on any process fails every process at the same point (:func:`~.distributed.any_rank`).

    Raises:
        ExplainFailure: a map or logit was not finite.
    """
    explainer.model.eval()
    starts = range(0, len(probes), batch_size)
    if progress and len(starts) > 1:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc=f"explaining ({explainer.method})", leave=False, unit="chunk")
    return ProbeRecord.concat(
        [
            _explain_chunk(
                explainer,
                probes.subset(slice(start, start + batch_size)),
                settings,
                transplant,
                heads,
                activation,
                agree,
            )
            for start in starts
        ]
    )
