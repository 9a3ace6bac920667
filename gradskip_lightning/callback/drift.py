"""Drift of each probe's map across logged epochs, with a state that survives a checkpoint."""

from __future__ import annotations

from typing import Any

from torch import Tensor

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

    def state_dict(self) -> dict[str, Any]:
        return {"first": self.first, "previous": self.previous}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.first = state["first"]
        self.previous = state["previous"]
