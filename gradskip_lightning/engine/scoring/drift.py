"""Drift of each probe's map across logged epochs, with a state that survives a checkpoint."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from gradskip_lightning.core.validation import required
from gradskip_lightning.engine.probes import ProbeSet
from gradskip_lightning.metrics import drift

__all__ = ["DriftTracker"]


class DriftTracker:
    """Compares each epoch's maps with the previous logged epoch's and with the first's.

    Drift is measured on the patch-level maps (P, h, w): they are what the method computes (the
    pixel maps are their bilinear upsampling), and they keep the checkpointed state small
    (P * h * w floats). The state is tensors and plain values, so checkpoints load with
    ``weights_only=True``.

    Args:
        top_k: fraction of patches compared by the top-k IoU.
    """

    def __init__(self, top_k: float = 0.1) -> None:
        self.top_k = top_k
        self.first: Tensor | None = None
        self.previous: Tensor | None = None

    def reset(self) -> None:
        """Forget the stored maps (a new fit)."""
        self.first = self.previous = None

    def update(self, token_maps: Tensor, *, store: bool = True) -> dict[str, Tensor]:
        """Drift of ``token_maps`` (P, h, w) against the previous and the first stored maps.

        Returns per-probe float32 (P,) tensors ``prev/spearman``, ``prev/topk_iou``,
        ``first/spearman``, ``first/topk_iou`` (empty before any maps were stored), then, with
        ``store``, keeps the maps as the new previous ones (and as the first ones if none).
        """
        token_maps = token_maps.detach().float().cpu()
        out: dict[str, Tensor] = {}
        for name, reference in (("prev", self.previous), ("first", self.first)):
            if reference is None:
                continue
            if reference.shape != token_maps.shape:
                raise ValueError(f"stored maps {tuple(reference.shape)} do not match {tuple(token_maps.shape)}")
            scores = drift(token_maps, reference, top_k=self.top_k)
            out[f"{name}/spearman"] = scores["spearman"].float()
            out[f"{name}/topk_iou"] = scores["topk_iou"].float()
        if store:
            if self.first is None:
                self.first = token_maps.clone()
            self.previous = token_maps.clone()
        return out

    def resume(self, stored: Tensor | None, probes: ProbeSet) -> None:
        """After a resume, restart the references, with one warning, if ``probes`` are not the
        checkpoint's (``stored``: its per-probe fingerprints, None from an earlier version, when only
        the count can be compared): other images under the same ids would give a wrong drift."""
        reference = self.first
        if stored is not None:
            changed = len(stored) != len(probes) or not torch.equal(stored, probes.fingerprint())
        else:
            changed = reference is not None and len(reference) != len(probes)
        if changed and (reference is not None or self.previous is not None):
            count = len(stored) if stored is not None else len(required(reference, "the stored maps"))
            rank_zero_warn(
                f"GradSkipCallback: the probes differ from the checkpoint's ({count} probes then, {len(probes)} "
                "now, or other images under the same ids): the drift references restart at the next explained "
                "epoch. Resume with the same probe_images or validation set to continue drift"
            )
            self.reset()

    def state_dict(self) -> dict[str, Any]:
        return {"first": self.first, "previous": self.previous}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.first = state["first"]
        self.previous = state["previous"]
