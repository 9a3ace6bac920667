"""Explain a probe set and score the maps, in chunks of a fixed batch size.

Every value is per probe, in probe order, on the CPU, so shards from several processes can be
concatenated and compared with a single-process run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gradskip_lightning.explainer import Explainer
from gradskip_lightning.metrics import faithfulness_violation, insertion_deletion, pointing_game

from .probes import ProbeSet

__all__ = ["ScoreSettings", "explain_probes", "ExplainFailure"]


class ExplainFailure(RuntimeError):
    """Explaining the probes gave non-finite relevance or logits."""


@dataclass(frozen=True)
class ScoreSettings:
    """How maps are scored; see :mod:`gradskip_lightning.metrics` for each metric.

    Attributes:
        target: "label" explains the true class, "prediction" the predicted one.
        batch_size: probes per explain call (bounds memory).
        insertion_steps: K, the perturbation steps of insertion/deletion.
        deletion_baseline: "zeros" or "blur".
        fvt_top_k: patches removed together by the faithfulness violation test; 0 skips it.
        metrics_batch_size: perturbed images per forward call.
        pointing_tolerance: pixels; None = 15 px at 224 px, scaled.
    """

    target: str = "label"
    batch_size: int = 32
    insertion_steps: int = 16
    deletion_baseline: str = "zeros"
    fvt_top_k: int = 1
    metrics_batch_size: int = 256
    pointing_tolerance: float | None = None


def _explain_chunk(explainer: Explainer, probes: ProbeSet, settings: ScoreSettings, heads: bool) -> dict[str, Tensor]:
    device = next(explainer.model.parameters()).device
    images = probes.images.to(device)
    targets = probes.labels.to(device) if settings.target == "label" else None
    exp = explainer.explain(images, targets)
    if not bool(exp.valid.all()) or not bool(torch.isfinite(exp.logits).all()):
        bad = (~exp.valid).nonzero()[:, 0].tolist()
        raise ExplainFailure(f"{exp.method}: non-finite relevance or logits for probes at positions {bad}")
    patch = explainer.patch_size
    scores = insertion_deletion(
        explainer.model,
        images,
        exp.targets,
        exp.maps,
        patch_size=patch,
        steps=settings.insertion_steps,
        deletion_baseline=settings.deletion_baseline,
        batch_size=settings.metrics_batch_size,
    )
    out = {
        "maps": exp.maps,
        "token_maps": exp.token_maps,
        "targets": exp.targets,
        "predictions": exp.predictions,
        "probabilities": exp.logits.softmax(dim=1).amax(dim=1),
        "target_probabilities": exp.probabilities,
        "insertion": scores["insertion"],
        "deletion": scores["deletion"],
    }
    if settings.fvt_top_k > 0:
        out["fvt_violation"] = faithfulness_violation(
            explainer.model,
            images,
            exp.targets,
            exp.maps,
            patch_size=patch,
            top_k=settings.fvt_top_k,
            baseline=settings.deletion_baseline,
            batch_size=settings.metrics_batch_size,
        ).float()
    if probes.masks is not None:
        out["pointing_hit"] = pointing_game(
            exp.maps, probes.masks.to(device), tolerance=settings.pointing_tolerance
        ).float()
    if heads:
        for name in ("head_weights", "grad_flow", "sparsity"):
            value = getattr(exp, name)
            if value is not None:
                out[name] = value
        if exp.gates is not None:
            out["gates"] = exp.gates.mean(dim=2)  # (B, L): mean beta_main over tokens
    return {
        key: value.detach().float().cpu() if value.is_floating_point() else value.cpu() for key, value in out.items()
    }


def explain_probes(
    explainer: Explainer,
    probes: ProbeSet,
    settings: ScoreSettings,
    *,
    heads: bool = True,
    progress: bool = False,
) -> dict[str, Tensor]:
    """Explain and score every probe, ``settings.batch_size`` probes at a time.

    Runs the explainer's ViT in eval mode (the caller restores the mode). Returns per-probe CPU
    tensors: ``maps`` (P, H, W), ``token_maps`` (P, h, w), ``targets``, ``predictions``,
    ``probabilities`` (of the predicted class), ``target_probabilities`` (of the explained class),
    ``insertion``, ``deletion`` (P,); ``fvt_violation`` (P,) 0/1 unless
    ``fvt_top_k`` is 0; ``pointing_hit`` (P,) 0/1 when the probes have masks; with ``heads``, for
    methods that have them, ``head_weights``, ``grad_flow``, ``sparsity`` (P, L, H) and
    ``gates`` (P, L) (mean beta_main over tokens).

    Raises:
        ExplainFailure: a map or logit was not finite.
    """
    explainer.model.eval()
    starts = range(0, len(probes), settings.batch_size)
    if progress and len(starts) > 1:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc=f"explaining ({explainer.method})", leave=False, unit="chunk")
    chunks = [
        _explain_chunk(explainer, probes.subset(slice(start, start + settings.batch_size)), settings, heads)
        for start in starts
    ]
    return {key: torch.cat([chunk[key] for chunk in chunks]) for key in chunks[0]}
