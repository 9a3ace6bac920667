"""Explain a probe set and score the maps, in chunks of a fixed batch size.

Every value is per probe, in probe order, on the CPU (a :class:`~.record.ProbeRecord`), so shards
from several processes can be concatenated and compared with a single-process run. The scores
computed are the rows of :data:`~.scores.SCORES` that apply. No image is forwarded twice in an
epoch: the clean probes' scores come from the explain forward, and each chunk's insertion starts
and deletion ends (with the model's logits on them) are made once and shared by every method
(:class:`EpochWork`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import Tensor

from gradskip_lightning.core.explanation import ModelExplainer
from gradskip_lightning.engine.probes import ProbeSet
from gradskip_lightning.engine.scoring.distributed import any_rank
from gradskip_lightning.engine.scoring.record import ProbeRecord
from gradskip_lightning.engine.scoring.scores import SCORES, Chunk, ExplainFailure
from gradskip_lightning.engine.settings import ScoreSettings
from gradskip_lightning.metrics.insertion_deletion import Starts, perturbation_starts
from gradskip_lightning.metrics.perturbation import Activation, class_probabilities
from gradskip_lightning.shortcuts.transplant import Transplant

__all__ = ["explain_probes", "EpochWork", "ExplainFailure", "PROGRESS_DELAY_S"]

#: Seconds an explanation runs before its progress bar shows (on a terminal; none in a file or a pipe).
PROGRESS_DELAY_S = 2.0


@dataclass
class EpochWork:
    """One epoch end's shared work: what is scored, the chunks' starts, the seconds spent.

    Attributes:
        scored: the methods whose perturbation scores run (None: every method).
        starts: chunk position -> the chunk's :class:`~gradskip_lightning.metrics.insertion_deletion.Starts`
            (made by the first method, reused by the others: the same model and images).
        seconds: ``"<method>/maps"`` (explaining, the other scores) and ``"<method>/scores"``
            (the perturbation scores; only for a method whose scores ran) wall seconds.
    """

    scored: frozenset[str] | None = None
    starts: dict[int, Starts] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    _model: object = field(default=None, repr=False)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def chunk_starts(self, position: int, model: object, images: Tensor, settings: ScoreSettings) -> Starts:
        """The starts of the chunk at ``position``, made on first use (for ``model``; another model makes new ones)."""
        made = self.starts.get(position)
        options = (settings.insertion_start, settings.deletion_baseline)
        if made is None or made.options != options or made.insertion.shape != images.shape or self._model is not model:
            made = perturbation_starts(
                model,  # type: ignore[arg-type]  # the explainer's module
                images,
                insertion_start=settings.insertion_start,
                deletion_baseline=settings.deletion_baseline,
                batch_size=settings.metrics_batch_size,
                precision=settings.perturbation_precision,
            )
            self.starts[position], self._model = made, model
        return made


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
    work: EpochWork,
    position: int,
) -> ProbeRecord:
    start = time.perf_counter()
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
    scored = work.scored is None or explainer.method in work.scored
    began = time.perf_counter()
    starts = work.chunk_starts(position, explainer.model, images, settings) if scored else None
    scoring = time.perf_counter() - began  # seconds of the perturbation scores (with the shared starts)
    chunk = Chunk(explainer, images, probes, exp, settings, transplant, activation, starts)
    for score in SCORES:
        perturbation = score.perturbation
        if (scored or not perturbation) and score.applies(chunk):
            began = time.perf_counter()
            for name, values in score.compute(chunk).items():
                setattr(record, name, values)
            scoring += time.perf_counter() - began if perturbation else 0.0
    if heads:
        record.head_weights, record.grad_flow, record.sparsity = exp.head_weights, exp.grad_flow, exp.sparsity
        if exp.gates is not None:
            record.gates = exp.gates.nanmean(dim=2)  # (B, L): mean beta_main over tokens (NaN: SegFormer padding)
    result = ProbeRecord(**{name: _cpu(tensor) for name, tensor in record.values().items()})
    if scored:
        work.add(f"{explainer.method}/scores", scoring)
    work.add(f"{explainer.method}/maps", time.perf_counter() - start - scoring)
    return result


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
    work: EpochWork | None = None,
) -> ProbeRecord:
    """Explain and score every probe, ``batch_size`` probes at a time.

    Runs the explainer's model in eval mode (the caller restores the mode). Probabilities and
    perturbation scores use ``activation`` ("sigmoid" for multi-label models); a segmentation
    model's are scored by the mean logit of the class over the explained region. The transplant
    scores need ``transplant``. Head statistics and gates are filled only with ``heads`` and for
    methods that have them. With ``agree`` (every process calls this on its shard) a non-finite
    result on any process fails every process at the same point (:func:`~.distributed.any_rank`).
    ``work`` shares the chunks' starts between methods and says which methods' perturbation scores
    run (None: this call's own, every score).

    Raises:
        ExplainFailure: a map or logit was not finite.
    """
    explainer.model.eval()
    work = EpochWork() if work is None else work
    starts = range(0, len(probes), batch_size)
    bar = None
    if progress:  # shown on a terminal once the explanation has taken PROGRESS_DELAY_S (ViT-B at 224 px: minutes)
        from tqdm.auto import tqdm

        bar = tqdm(total=len(probes), desc=f"GradSkip: explaining and scoring ({explainer.method})", unit="probe",
                   leave=False, delay=PROGRESS_DELAY_S, disable=None)  # fmt: skip
    chunks = []
    for start in starts:
        chunk = probes.subset(slice(start, start + batch_size))
        chunks.append(_explain_chunk(explainer, chunk, settings, transplant, heads, activation, agree, work, start))
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return ProbeRecord.concat(chunks)
