"""The callback's settings: its validated groups (probes, methods, scores, render) and the checks of
its other arguments.

Each group checks its own fields when built (also by :func:`dataclasses.replace`), so a
``GradSkipCallback`` built from Python or from LightningCLI YAML refuses the same values with the
same messages, naming the option (``scores.insertion_steps``), what was received and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from gradskip_lightning import render
from gradskip_lightning.core.family import check_backbone
from gradskip_lightning.engine.probes import ItemKeys
from gradskip_lightning.families import all_methods
from gradskip_lightning.methods import MethodName
from gradskip_lightning.shortcuts.tags import SpuriousTag

__all__ = [
    "MethodName",
    "MethodSettings",
    "ProbeSettings",
    "ScoreSettings",
    "RenderSettings",
    "Target",
    "DeletionBaseline",
    "check_arguments",
]

Target = Literal["label", "prediction"]
DeletionBaseline = Literal["zeros", "blur"]
InsertionStart = Literal["blur", "rise", "mean", "zeros"]
Precision = Literal["full", "bfloat16"]


def positive(name: str, value: int) -> None:
    """Refuse anything but an int >= 1 (bools too), naming the argument."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _one_of(name: str, value: str, choices: Any) -> None:
    if value not in get_args(choices):
        raise ValueError(f"{name} must be one of {get_args(choices)}, got {value!r}")


@dataclass(frozen=True)
class ProbeSettings:
    """Which probes are explained and how many at once.

    Attributes:
        num_probes: probes drawn from the dataset, stratified by class (segmentation: (image, class present)
            pairs).
        probe_seed: seed of the draw; the selection is kept in checkpoints.
        explain_batch_size: probes per explain call (bounds memory).
        max_overhead: the callback's time budget as a fraction of the training time (0.05: 5 %), per
            epoch and over the fit: over it, the compared methods are explained on fewer epochs, then the
            perturbation scores computed on fewer epochs, and the discovery stage run on fewer epochs last,
            planned from the second epoch end on; over the fit, the scores and then the compared methods wait
            while the fit's total would pass it (the compared methods are decided last at each epoch end, from
            its seconds so far: at the first, their cost is predicted from the explained method's); said in the
            log and in ``<prefix>budget/...`` scalars (:mod:`.budget`); None: everything every epoch.
        image_key, label_key: the keys of a mapping dataset item (MONAI, HF datasets) holding the
            image and the label; None: the first common name the item has (``image``,
            ``pixel_values``, ``img``, ``images``; ``label``, ``labels``, ``target``, ``targets``,
            ``class``).
        mask_keys: the keys whose values are (H, W) region masks, each region named by its key, or
            {key: region name} (``{"seg": "object"}``: the region the Pointing Game scores); []: no
            regions. None: the first of ``mask``, ``masks``, ``regions`` (a mask: the ``"object"``
            region; a dict: named regions). Every other field (ids, paths, metadata, other
            tensors) is never read (:class:`~.probes.ItemKeys`). The discovery probes are read the same way.
    """

    num_probes: int = 32
    probe_seed: int = 0
    explain_batch_size: int = 32
    max_overhead: float | None = None
    image_key: str | None = None
    label_key: str | None = None
    mask_keys: Sequence[str] | Mapping[str, str] | None = None

    @property
    def item_keys(self) -> ItemKeys:
        """Where mapping dataset items hold the image, the label and the masks."""
        return ItemKeys(self.image_key, self.label_key, self.mask_keys)

    def __post_init__(self) -> None:
        positive("probes.num_probes", self.num_probes)
        positive("probes.explain_batch_size", self.explain_batch_size)
        if self.max_overhead is not None and (isinstance(self.max_overhead, bool) or not self.max_overhead > 0):
            raise ValueError(
                f"probes.max_overhead must be a fraction > 0 of the training epoch or None, got {self.max_overhead!r}"
            )
        ItemKeys(self.image_key, self.label_key, self.mask_keys)  # refuses bad keys, naming the option


@dataclass(frozen=True)
class MethodSettings:
    """Which methods explain the probes.

    Attributes:
        method: the explaining method, whose maps are logged, drawn and compared (one of every
            family's methods; the model's family must have it: SegFormer has all but ``lrp``).
        options: the method's options, e.g. ``{alpha: 0.5, gate: layer}`` (GradSkip:
            :class:`~gradskip_lightning.methods.GradSkipOptions`' fields; random: ``seed``).
        compare: more methods, explained with their default options and logged beside it, under
            ``.../<method>``.
    """

    method: MethodName = "gradskip"
    options: Mapping[str, Any] = field(default_factory=dict)
    compare: Sequence[MethodName] = ()

    def __post_init__(self) -> None:
        methods = all_methods()
        if self.method not in methods:
            raise ValueError(f"methods.method must be one of {methods}, got {self.method!r}")
        if isinstance(self.compare, str):
            raise TypeError(f"methods.compare must be a list of method names, got the string {self.compare!r}")
        for other in self.compare:
            if other not in methods or other == self.method:
                raise ValueError(
                    f"methods.compare must be names from {methods} other than {self.method!r}, got {other!r}"
                )
        if not isinstance(self.options, Mapping):
            raise TypeError(f"methods.options must be a mapping of option names, got {type(self.options).__name__}")
        object.__setattr__(self, "options", dict(self.options))
        object.__setattr__(self, "compare", tuple(self.compare))

    @property
    def names(self) -> tuple[str, ...]:
        """The method, then the compared ones."""
        return (self.method, *self.compare)


@dataclass(frozen=True)
class ScoreSettings:
    """How maps are scored; see :mod:`gradskip_lightning.metrics` for each metric.

    Attributes:
        target: "label" explains the probe's label, "prediction" the predicted (most probable) class;
            multi-label: the probe's rarest positive label, scored with its sigmoid; segmentation: the probe's
            class, over the positions predicted as it (probes are (image, class present) pairs; "prediction":
            the class predicted at the most positions).
        insertion_steps: K, the perturbation steps of insertion/deletion.
        deletion_baseline: "zeros" (the mean colour of normalised images) or "blur", for deletion and the
            violation test.
        insertion_start: the image insertion reveals patches on: "blur" (a strong blur, sigma = a quarter of
            the side: the class evidence gone), "rise" (the paper's mild blur, saturated on small images),
            "mean" (each image's mean colour) or "zeros" (see
            :func:`~gradskip_lightning.metrics.insertion_deletion.insertion_start_images`); the score of the
            start image is logged as ``insertion_start``.
        fvt_top_k: patches removed together by the faithfulness violation test; 0 skips it.
        metrics_batch_size: perturbed images per forward call; None: by device (64 on CPU, 1024 on
            CUDA, :func:`~gradskip_lightning.metrics.perturbation.default_batch_size`).
        perturbation_precision: "full", or "bfloat16" autocast for the insertion/deletion forwards (the
            scores change: measured in the benchmarks; the violation test stays in full precision).
        pointing_tolerance: Pointing Game tolerance in pixels; None = 15 px at 224 px, scaled.
        drift_top_k: fraction of patches compared by the drift top-k IoU.
        class_sensitivity: also explain each probe's runner-up class (one more explain call per
            method) and log the Spearman correlation of its map with the explained class's (off by default).
    """

    target: Target = "label"
    insertion_steps: int = 16
    deletion_baseline: DeletionBaseline = "zeros"
    fvt_top_k: int = 1
    metrics_batch_size: int | None = None
    pointing_tolerance: float | None = None
    drift_top_k: float = 0.1
    insertion_start: InsertionStart = "blur"
    perturbation_precision: Precision = "full"
    class_sensitivity: bool = False

    def __post_init__(self) -> None:
        positive("scores.insertion_steps", self.insertion_steps)
        if self.metrics_batch_size is not None:
            positive("scores.metrics_batch_size", self.metrics_batch_size)
        _one_of("scores.target", self.target, Target)
        _one_of("scores.deletion_baseline", self.deletion_baseline, DeletionBaseline)
        _one_of("scores.insertion_start", self.insertion_start, InsertionStart)
        _one_of("scores.perturbation_precision", self.perturbation_precision, Precision)
        if not isinstance(self.fvt_top_k, int) or self.fvt_top_k < 0:
            raise ValueError(f"scores.fvt_top_k must be an integer >= 0, got {self.fvt_top_k!r}")
        if not 0 < self.drift_top_k <= 1:
            raise ValueError(f"scores.drift_top_k must be a fraction in (0, 1], got {self.drift_top_k}")


@dataclass(frozen=True)
class RenderSettings:
    """How overlays look.

    Attributes:
        colormap: matplotlib colour map of the overlays.
        overlay_alpha: weight of the heat map in the overlays, in [0, 1].
        display_size: images are upscaled (nearest) to at least this many pixels for display.
        probe_overlays: also log each probe's overlay alone (the grid and the table show every probe already).

    The images under the overlays are taken to pixels with the front door's ``normalisation``.
    """

    colormap: str = "inferno"
    overlay_alpha: float = 0.5
    display_size: int = 128
    probe_overlays: bool = False

    def __post_init__(self) -> None:
        positive("render.display_size", self.display_size)
        if not 0.0 <= self.overlay_alpha <= 1.0:
            raise ValueError(f"render.overlay_alpha must be in [0, 1], got {self.overlay_alpha}")
        render.colormap_lut(self.colormap)  # raises ValueError for an unknown colour map


def check_arguments(transplant: SpuriousTag | bool, backbone: str | None) -> None:
    """Refuse the Lightning callback's own ungrouped arguments, each with a message naming it (``every_n_epochs``
    and ``log_prefix``, every door's, are checked by its :class:`~.monitor.EpochMonitor`)."""
    if backbone is not None:
        check_backbone(backbone)
    if not isinstance(transplant, (SpuriousTag, bool)):
        raise TypeError(
            f"transplant must be a SpuriousTag, True (the datamodule's tag) or False; got {type(transplant).__name__}"
        )


def check_log_prefix(log_prefix: str) -> None:
    """Refuse a ``log_prefix`` that is not a string or would put files outside the run folder."""
    if not isinstance(log_prefix, str):
        raise TypeError(f"log_prefix must be a string, got {type(log_prefix).__name__}")
    parts = log_prefix.replace("\\", "/").split("/")
    if log_prefix.startswith(("/", "\\", "~")) or any(part in (".", "..") for part in parts):
        raise ValueError(
            f"log_prefix {log_prefix!r} would put the callback's files outside the run folder (its parts name the "
            "folder under the log dir): use names without '.' or '..' parts and no leading '/', e.g. 'gradskip/'"
        )
