"""The probe set over a callback's life: given, drawn once per fit, restored from a checkpoint."""

from __future__ import annotations

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torch.utils.data import Dataset

from gradskip_lightning.core.validation import required

from .drawing import (
    dataset_labels,
    is_segmentation_dataset,
    load_probes,
    load_segmentation_probes,
    segmentation_pairs,
    stratified_indices,
)
from .items import ItemKeys
from .probe_set import ProbeSet


class ProbeSource:
    """The probe set over a callback's life: given, drawn once per fit, restored from a checkpoint.

    Args:
        given: explicit probes, or None to draw ``num_probes`` with ``seed`` from a dataset.
        num_probes: probes drawn, stratified by (explained) class.
        seed: seed of the draw.
        keys: where mapping items hold the image, the label and the masks.
        setting: the option the user sets the number with, for messages: ``"probes.num_probes"``, or
            a text naming the discovery stage's ``probes_per_class``.
    """

    def __init__(
        self,
        given: ProbeSet | None,
        num_probes: int,
        seed: int,
        keys: ItemKeys = ItemKeys(),
        setting: str = "probes.num_probes",
    ) -> None:
        self.given = given
        self.setting = setting
        self.num_probes = num_probes
        self.seed = seed
        self.keys = keys
        self.dataset: Dataset | None = None
        self.restored_ids: Tensor | None = None
        self._drawn: ProbeSet | None = None

    @property
    def described(self) -> str:
        """``probes.num_probes=32``: the setting and the number it asks for, for messages."""
        return f"{self.setting}={self.num_probes}" if self.setting == "probes.num_probes" else self.setting

    @property
    def probes(self) -> ProbeSet | None:
        """The current probes (None until drawn)."""
        return self.given if self.given is not None else self._drawn

    def reset(self) -> None:
        """Forget drawn probes and restored ids: a new fit draws from its own data."""
        self.dataset, self.restored_ids, self._drawn = None, None, None

    def draw(self, dataset: Dataset) -> ProbeSet:
        """Draw (or re-read the restored ids) from ``dataset``, unless probes were given or drawn.

        Restored ids the dataset does not have (a smaller validation set) are dropped with a warning
        and the probes drawn afresh; restored ids of another number than ``num_probes`` (kept) and
        fewer probes than ``num_probes`` to draw from are said once."""
        if self.probes is not None:
            return self.probes
        self.dataset = dataset
        labels = dataset_labels(dataset, self.keys)
        segmentation = labels.ndim == 2 and is_segmentation_dataset(dataset, self.keys)
        pair_ids, strata = segmentation_pairs(labels) if segmentation else (None, labels)
        ids = self.restored_ids
        if ids is not None:
            valid = required(pair_ids, "the pairs") if segmentation else torch.arange(len(labels))
            missing = ids[~torch.isin(ids, valid)]
            if len(missing):
                rank_zero_warn(
                    f"GradSkipCallback: the checkpoint's probe ids {missing.tolist()[:8]} are not in this dataset "
                    f"({len(labels)} items): the probes are drawn afresh ({self.described}, "
                    f"probe_seed={self.seed}). Resume with the validation set of the checkpointed run to keep them"
                )
                ids = self.restored_ids = None
        if ids is not None and len(ids) != self.num_probes:  # said here: the discovery stage's number is known now
            rank_zero_warn(
                f"GradSkipCallback: the checkpoint's {len(ids)} probes are explained, not the {self.num_probes} of "
                f"{self.described}: the probe set is kept across a resume so drift compares the same images. "
                "Start a new run (no ckpt_path) to draw another number"
            )
        if ids is None:
            drawn = stratified_indices(strata, self.num_probes, self.seed)
            if len(drawn) == 0:
                raise ValueError("no item of the dataset has a label or class to explain: nothing to draw probes from")
            if len(drawn) < self.num_probes:
                rank_zero_warn(
                    f"GradSkipCallback: {self.described} but the dataset has only {len(drawn)} "
                    f"{'(image, class) pairs' if segmentation else 'items'} with a class to explain: {len(drawn)} "
                    f"probes are drawn. Lower {self.setting} to silence this"
                )
            ids = required(pair_ids, "the (image, class) pairs")[drawn] if segmentation else drawn
        if segmentation:
            self._drawn = load_segmentation_probes(dataset, ids, labels.shape[1], self.keys)
        else:
            frequency = labels.float().sum(dim=0) if labels.ndim == 2 else None
            self._drawn = load_probes(dataset, ids, frequency, self.keys)
        return self._drawn

    def restore(self, ids: Tensor | None) -> None:
        """Use the checkpointed probe ``ids`` (re-read now when a dataset is known, else at :meth:`draw`,
        which says when their number overrides ``num_probes``); ids the dataset cannot give are dropped
        with a warning and the probes drawn afresh."""
        if ids is None or self.given is not None:
            return
        self.restored_ids = ids
        if self._drawn is not None and not torch.equal(self._drawn.ids, ids) and self.dataset is not None:
            self._drawn = None
            try:
                self.draw(self.dataset)
            except Exception as err:  # noqa: BLE001 - the checkpoint's probes cannot be re-read: draw afresh
                rank_zero_warn(
                    f"GradSkipCallback: the checkpoint's probes cannot be read ({type(err).__name__}: {err})"
                )
                self.reset()
