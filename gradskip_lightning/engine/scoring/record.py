"""One method's per-probe values: a typed record whose fields each say once where they go.

Adding a logged value is adding one field here (and, for a score, its row in :data:`~.scores.SCORES`):
its :func:`value` metadata tells the gather (``scope``), the report (``section`` and ``scalar``:
logged as the mean over probes under ``<section>/<prefix><scalar>``; ``compared``: logged for the
comparison methods too), the W&B table (``table``: its column), the maps files (``npz``), the
dashboard's charts and the table of logged keys, docs/logged-keys.md (``doc``). A field with ``regions`` holds one
column per named region of the probes ((P, R), the names in :attr:`ProbeSet.regions` order): its
scalars and table columns get ``/<region>`` appended; the maps files keep the (P, R) array and
the names once (``region_names``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import torch
from torch import Tensor

from gradskip_lightning.engine.keys import Section

__all__ = ["ProbeRecord", "Scope", "Scalar", "value", "table_fields", "scalar_fields", "npz_fields"]

Scope = Literal["shared", "rank_zero"]
"""``shared``: small values every rank receives (drift and the checkpoint need them);
``rank_zero``: large values only the logger needs."""


def value(
    *,
    scope: Scope,
    section: Section | None = None,
    scalar: str | None = None,
    compared: bool = False,
    table: str | None = None,
    npz: bool = False,
    regions: bool = False,
    doc: str = "",
) -> Any:
    """A record field (default None) with where it goes.

    Args:
        scope: who receives it after the gather.
        section: the logged scalar's section (see :mod:`.keys`).
        scalar: logged as the mean over probes (finite entries) under this name.
        compared: the scalar is logged for each comparison method too.
        table: column of the per-probe W&B table.
        npz: saved in the epoch's maps file under the field's name.
        regions: the field is (P, R), one column per named region; names get ``/<region>``.
        doc: what the scalar is, for the table of logged keys (docs/logged-keys.md).
    """
    metadata = dict(scope=scope, section=section, scalar=scalar, compared=compared, table=table, npz=npz)
    return field(default=None, metadata={**metadata, "regions": regions, "doc": doc})


@dataclass(frozen=True)
class Scalar:
    """Where a record field's mean over probes is logged: ``<section>/<prefix><name>``.

    Attributes:
        section: the key's section.
        name: the value's name.
        regions: one scalar per region (``<name>/<region>``) from a (P, R) field.
        compared: logged for each comparison method too (``/<method>``).
        doc: what it is.
    """

    section: Section
    name: str
    regions: bool = False
    compared: bool = field(default=False, compare=False)
    doc: str = field(default="", compare=False)


@dataclass
class ProbeRecord:
    """Per-probe values of one method, each (P, ...) on the CPU in probe order, or None when absent.

    Attributes:
        token_maps: (P, h, w) float32 relevance per patch (drift compares them).
        targets: (P,) int64 explained classes.
        predictions: (P,) int64 predicted classes.
        probabilities: (P,) float32 probability of the predicted class (softmax or sigmoid).
        insertion, deletion: (P,) float32 AUCs; ins_minus_del their difference.
        insertion_start: (P,) float32 the explained class's score on the insertion start (the same
            for every method: near ``probabilities``, insertion is saturated).
        fvt_violation: (P,) float32 0/1 faithfulness violations (None when ``fvt_top_k`` is 0).
        pointing_hit: (P,) float32 0/1 Pointing Game hits (probes with an "object" region only).
        region_mass: (P, R) float32 relevance mass accuracy on each named region (NaN: empty region).
        region_rank: (P, R) float32 relevance rank accuracy on each named region (NaN: empty region).
        pixel_accuracy, mean_iou: (P,) float32 the map thresholded at its mean against the
            "object" region (mIoU: mean of the object's and the rest's IoU); average_precision:
            (P,) float32 AP of the soft map against it (NaN: empty object). The protocol of the
            GradSkip paper and Chefer et al. 2021, for segmentation models and any probes with objects.
        transplant_flip: (P,) float32 1 when the probe with the tag pasted in is predicted as the
            tag's class, 0 when not, NaN for probes of that class (see :mod:`.transplant`).
        transplant_mass: (P,) float32 relevance mass accuracy on the pasted tag of the map explaining
            the tag's class, NaN for probes of that class.
        class_sensitivity: (P,) float32 Spearman correlation between the map of the explained class and
            the map of the highest-scoring other class (1: the same map; with ``class_sensitivity``).
        gates: (P, L) mean beta_main over tokens.
        maps: (P, H, W) float32 relevance at input resolution.
        head_weights, grad_flow, sparsity: (P, L, H) head importance and its parts.
    """

    token_maps: Tensor | None = value(scope="shared", npz=True)
    targets: Tensor | None = value(scope="shared", npz=True)
    predictions: Tensor | None = value(scope="shared", npz=True)
    probabilities: Tensor | None = value(scope="shared", table="probability", npz=True)
    insertion: Tensor | None = value(
        scope="shared",
        section="faithfulness",
        scalar="insertion",
        compared=True,
        table="insertion",
        npz=True,
        doc=(
            "Petsiuk et al. 2018 insertion AUC (K steps): the explained class's score as the most relevant "
            "patches are put in"
        ),
    )
    deletion: Tensor | None = value(
        scope="shared",
        section="faithfulness",
        scalar="deletion",
        compared=True,
        table="deletion",
        npz=True,
        doc="Petsiuk et al. 2018 deletion AUC: the explained class's score as the most relevant patches are removed",
    )
    ins_minus_del: Tensor | None = value(
        scope="shared",
        section="faithfulness",
        scalar="ins_minus_del",
        compared=True,
        doc="insertion minus deletion",
    )
    insertion_start: Tensor | None = value(
        scope="shared",
        section="faithfulness",
        scalar="insertion_start",
        table="insertion_start",
        npz=True,
        doc=(
            "the explained class's score on the insertion start image (no patch revealed yet): the floor "
            "insertion starts from; close to the clean image's, insertion is saturated"
        ),
    )
    fvt_violation: Tensor | None = value(
        scope="shared",
        section="faithfulness",
        scalar="fvt_violation",
        compared=True,
        doc="Faithfulness Violation Test ratio (Liu et al. 2022)",
    )
    pointing_hit: Tensor | None = value(
        scope="shared",
        section="regions",
        scalar="pointing_game",
        compared=True,
        table="pointing_hit",
        npz=True,
        doc="Pointing Game hit rate on the `object` region",
    )
    region_mass: Tensor | None = value(
        scope="shared",
        section="regions",
        scalar="mass",
        compared=True,
        table="mass",
        npz=True,
        regions=True,
        doc=(
            "relevance mass accuracy (Arras et al. 2022) on each named region (e.g. `object`, `tag`), mean over "
            "probes whose region is not empty"
        ),
    )
    region_rank: Tensor | None = value(
        scope="shared",
        section="regions",
        scalar="rank",
        compared=True,
        table="rank",
        npz=True,
        regions=True,
        doc=(
            "relevance rank accuracy (Arras et al. 2022) on each named region, mean over probes whose region is "
            "not empty"
        ),
    )
    pixel_accuracy: Tensor | None = value(
        scope="shared",
        section="regions",
        scalar="pixel_accuracy",
        compared=True,
        table="pixel_accuracy",
        npz=True,
        doc=(
            "pixel accuracy of the map thresholded at its mean against the `object` region (Chefer et al. 2021, "
            "the GradSkip paper's segmentation protocol)"
        ),
    )
    mean_iou: Tensor | None = value(
        scope="shared",
        section="regions",
        scalar="mean_iou",
        compared=True,
        table="mean_iou",
        npz=True,
        doc="mIoU of the thresholded map against the `object` region (mean of the object's and the rest's IoU)",
    )
    average_precision: Tensor | None = value(
        scope="shared",
        section="regions",
        scalar="average_precision",
        compared=True,
        table="ap",
        npz=True,
        doc="average precision of the soft map against the `object` region",
    )
    transplant_flip: Tensor | None = value(
        scope="shared",
        section="transplant",
        scalar="flip_rate",
        table="transplant_flip",
        npz=True,
        doc="share of other-class probes predicted as the tag's class once the tag is pasted in",
    )
    transplant_mass: Tensor | None = value(
        scope="shared",
        section="transplant",
        scalar="tag_mass",
        compared=True,
        table="transplant_tag_mass",
        npz=True,
        doc="relevance mass on the pasted tag of the map explaining the tag's class",
    )
    class_sensitivity: Tensor | None = value(
        scope="shared",
        section="faithfulness",
        scalar="class_sensitivity",
        compared=True,
        table="class_sensitivity",
        npz=True,
        doc=(
            "class sensitivity: Spearman correlation between the maps of the explained class and of the "
            "highest-scoring other class (1: the same map whatever the class; lower: more class-specific); "
            "one more explain call per method"
        ),
    )
    gates: Tensor | None = value(scope="shared")
    maps: Tensor | None = value(scope="rank_zero", npz=True)
    head_weights: Tensor | None = value(scope="rank_zero")
    grad_flow: Tensor | None = value(scope="rank_zero")
    sparsity: Tensor | None = value(scope="rank_zero")

    def values(self, scope: Scope | None = None) -> dict[str, Tensor]:
        """The present fields (of ``scope``, or all) by name."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) is not None and (scope is None or f.metadata["scope"] == scope)
        }

    def select(self, index: Tensor | slice) -> ProbeRecord:
        """The record of the probes at ``index`` (positions)."""
        return ProbeRecord(**{name: tensor[index] for name, tensor in self.values().items()})

    @staticmethod
    def concat(records: Sequence[ProbeRecord]) -> ProbeRecord:
        """Records of consecutive probe chunks joined along the probe axis."""
        names = records[0].values()
        return ProbeRecord(**{name: torch.cat([r.values()[name] for r in records]) for name in names})


def _with(key: str) -> list[str]:
    return [f.name for f in fields(ProbeRecord) if f.metadata[key]]


def scalar_fields(compared_only: bool = False) -> dict[str, Scalar]:
    """Field name -> where its mean is logged, for the fields logged as means (comparison methods: ``compared``)."""
    return {
        f.name: Scalar(*(f.metadata[k] for k in ("section", "scalar", "regions", "compared", "doc")))
        for f in fields(ProbeRecord)
        if f.metadata["scalar"] and (f.metadata["compared"] or not compared_only)
    }


def table_fields() -> dict[str, tuple[str, bool]]:
    """Field name -> (W&B table column, one column per region), in field order."""
    return {f.name: (f.metadata["table"], f.metadata["regions"]) for f in fields(ProbeRecord) if f.metadata["table"]}


def npz_fields() -> list[str]:
    """Names of the fields saved to the maps files."""
    return _with("npz")
