"""GradSkipCallback: explain a fixed probe set at epoch ends and log maps, head importance and scores.

The callback itself holds the argument checks, the scheduling (which epoch, once), the failure
isolation and its state; probes live in :class:`~.probes.ProbeSource`, the values in
:class:`~.record.ProbeRecord`, the outputs in :mod:`.sinks`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.seed import isolate_rng
from torch import Tensor
from typing_extensions import override

from gradskip_lightning import render
from gradskip_lightning.adapters.base import eval_mode
from gradskip_lightning.data.tags import SpuriousTag
from gradskip_lightning.explanation import ModelExplainer
from gradskip_lightning.families import all_methods, explainer_for
from gradskip_lightning.methods import MethodName

from .compute import DeletionBaseline, ScoreSettings, Target, explain_probes
from .distributed import gather_records, shard_positions
from .drift import DriftTracker
from .keys import key
from .probes import ProbeSet, ProbeSource, check_probes, explained_labels
from .record import ProbeRecord
from .report import RenderSettings, build_report, epoch_scalars, probe_sheet
from .sinks import ProbeSheet, Sink, make_sinks
from .transplant import Transplant

__all__ = ["GradSkipCallback"]

_TARGETS: tuple[str, ...] = get_args(Target)
_BASELINES: tuple[str, ...] = get_args(DeletionBaseline)


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _folder(prefix: str) -> str:
    """The output folder name of a log prefix: "gradskip/" -> "gradskip", "gs/a/" -> "gs_a"."""
    return prefix.strip("/").replace("/", "_") or "gradskip"


def _given_probes(images: Tensor, labels: Tensor | None, masks: Tensor | Mapping[str, Tensor] | None) -> ProbeSet:
    if labels is None:
        raise ValueError("probe_labels (P,) or (P, C) are required with probe_images")
    images = torch.as_tensor(images)
    if not images.is_floating_point():
        raise TypeError(
            f"probe_images must be float, normalised as the model expects; got {images.dtype}. Convert them as "
            "the training data is, e.g. images.float() / 255 then (x - mean) / std"
        )
    labels = torch.as_tensor(labels)
    multi_hot = None
    if labels.ndim == 2 and labels.shape[1] > 1:
        multi_hot = labels.float()
        labels = explained_labels(multi_hot, multi_hot.sum(dim=0))
    return ProbeSet(images, labels.reshape(-1), torch.arange(len(images)), masks, multi_hot)


class GradSkipCallback(Callback):
    r"""Explain a fixed set of probe images at epoch ends and log what the model looks at.

    Every ``every_n_epochs`` epochs, at the end of validation (never during the sanity check;
    at the end of the training epoch when no validation ran that epoch), and once more at the end
    of fit if the last epoch was not explained, the callback explains the probes with GradSkip
    (or a baseline), scores the maps and logs one row per logged epoch at the step of Lightning's
    own epoch metrics. Keys are ``<section>/<log_prefix><name>`` (see :mod:`.keys`; P below
    stands for ``log_prefix``), a comparison method's scores ending in ``/<method>``:

    - ``faithfulness/P{insertion,deletion,ins_minus_del,fvt_violation}``;
    - ``regions/P{pointing_game,mass/<region>,rank/<region>}`` for probes with named regions
      (relevance mass and rank accuracy, Arras et al. 2022; the Pointing Game on "object") and
      ``regions/P{pixel_accuracy,mean_iou,average_precision}`` (the map thresholded at its mean,
      and its average precision, against "object"; Chefer et al. 2021);
    - ``transplant/P{flip_rate,tag_mass}`` with ``transplant`` (see :mod:`.transplant`);
    - ``drift/P{prev,first}/{spearman,topk_iou}`` from the second logged epoch on;
    - ``gates/Player_<l>`` (mean beta_main), ``heads/P{omega,grad_flow,sparsity}`` (layer x head
      images of the mean over probes) and ``heads/P<part>/layer_<l>`` (histograms);
    - ``probes/Poverlays[/<method>]`` (grid of all probes), ``probes/Poverlay/probe_<id>`` (each
      probe alone, with ``probe_overlays``), ``probes/Pprobes`` (table logged once) and
      ``probes/Ptable`` (one row per probe per epoch) on W&B;
    - ``Pepoch`` and ``Ptime_s`` (the callback's wall time for that epoch, in seconds).

    Every scalar but ``time_s`` is also put in ``trainer.callback_metrics`` on every rank before
    ``EarlyStopping``/``ModelCheckpoint`` read it, so they can ``monitor`` it (a NaN score, e.g.
    a region no probe has, is left out). Without validation, list the callback before
    ``EarlyStopping``: both then run at the end of the training epoch, in list order.

    Each epoch is tried once: a failure (out of memory, non-finite maps, a logging error) warns
    and skips that epoch; training goes on. Problems of the probes themselves (shape, dtype,
    non-finite images, labels out of range, class names, mean/std) are refused at setup (at the
    start of fit for probes drawn from plain dataloaders). Under ``trainer.validate()`` the
    explanation is logged under ``<log_prefix>validate/`` instead, is not written to the maps
    folder and does not move the drift references. A new fit on another Trainer (k-fold loops)
    starts afresh: probes are drawn again and drift forgets the previous run (a checkpoint given
    to that fit restores both).

    Scalars go to every logger of the Trainer; images go to W&B, or to PNG files under
    ``<log dir>/gradskip/images`` without W&B; with a ``TensorBoardLogger`` images and histograms
    go to TensorBoard too. Every epoch's maps are written to
    ``<log dir>/gradskip/maps/epoch_<e>.npz`` (W&B: ``<run dir>/gradskip``) and, with W&B, logged
    as one artifact at the end of fit. Without a logger the log dir is ``default_root_dir``; the
    folder is named after ``log_prefix`` ("gradskip/" -> ``gradskip``).

    Training does not see the callback: RNG states (torch, CUDA, numpy, Python) and every
    module's train/eval mode are restored, no parameter ``.grad`` is written and no dataloader is
    touched (drawn probes are read from the dataset by index). Under DDP each rank explains the
    probes ``rank::world_size``, padded so every rank runs the same number of forward passes,
    and rank zero logs (see :mod:`.distributed`).

    Multi-label models (datamodule ``task == "multilabel"`` or multi-hot labels (C,)) explain one
    positive label per probe (the rarest, see :mod:`.probes`) and score it with its sigmoid
    probability.

    Segmentation models (an HF SegFormer, or a LightningModule holding one, such as
    :class:`~gradskip_lightning.segmentation.module.SegmentationModule`) are explained with
    :class:`~gradskip_lightning.segmentation.SegmentationExplainer`: each probe is an (image, class
    present in its label map) pair, drawn from items ``(image, label map)`` stratified by class
    (id ``index * K + class``; see :mod:`.probes`), and explains that class over the positions the
    model predicts as it; the class's pixels are its ``"object"`` region. Insertion/deletion and
    the violation test then score the mean logit of the class over those positions (AUCs in
    logits), and ``regions/P{pixel_accuracy,mean_iou,average_precision}`` score the map against
    the class's pixels (these three are logged for any probes with an ``"object"`` region).
    ``lrp`` and ``transplant`` are for classifiers only.

    Args:
        probe_images: explicit probes (P, C, H, W), normalised as the model expects; None draws
            ``num_probes`` from the datamodule's ``val_dataset`` (``train_dataset`` without one).
        probe_labels: (P,) classes or (P, C) multi-hot labels of the explicit probes (required
            with ``probe_images``).
        probe_masks: (P, H, W) object masks of the explicit probes, or a dict of named regions
            {name: (P, H, W)}: each is scored by relevance mass and rank accuracy, "object" also
            by the Pointing Game. Drawn
            probes use the dataset's masks when its items are ``(image, label, mask)`` or
            ``(image, label, regions)``.
        num_probes: probes drawn from the dataset, stratified by class.
        probe_seed: seed of the draw; the selection is kept in checkpoints.
        every_n_epochs: explain every n-th epoch (epochs n-1, 2n-1, ...).
        method: an :data:`~gradskip_lightning.explainer.METHODS` name.
        method_options: options of ``method`` (e.g. ``{"alpha": 0.5}`` for GradSkip).
        compare_methods: further methods logged beside ``method`` (scores and overlay grids).
        target: explain the ``"label"`` or the ``"prediction"``.
        explain_batch_size: probes per explain call; bounds memory.
        insertion_steps: K, the steps of insertion/deletion.
        deletion_baseline: ``"zeros"`` or ``"blur"``, for deletion and the violation test.
        fvt_top_k: patches removed together by the faithfulness violation test (0: skip it).
        pointing_tolerance: Pointing Game tolerance in pixels (None: 15 px at 224 px, scaled).
        drift_top_k: fraction of patches compared by the drift top-k IoU.
        metrics_batch_size: perturbed images per forward of the metrics.
        log_prefix: the callback's name in every logged key (``<section>/<log_prefix><name>``);
            two instances on one Trainer need prefixes that differ also as folder names ("gs/a/"
            and "gs_a/" do not).
        mean, std: normalisation to undo for display; None reads the datamodule's ``mean``/``std``
            (without them each image is min-max scaled).
        colormap: matplotlib colour map of the overlays.
        overlay_alpha: weight of the heat map in the overlays, in [0, 1].
        display_size: images are upscaled (nearest) to at least this many pixels for display.
        progress: show a progress bar on rank zero while explaining takes several chunks.
        probe_overlays: also log each probe's overlay alone (``probes/Poverlay/probe_<id>``); the
            grid and the table show every probe already.
        transplant: the live transplant test (:mod:`.transplant`): a
            :class:`~gradskip_lightning.data.tags.SpuriousTag`, True to use the datamodule's
            ``tag``, or False (off). Needs the normalisation (``mean``/``std`` or the datamodule's).

    Example::

        trainer = Trainer(callbacks=[GradSkipCallback(num_probes=32)], logger=WandbLogger())

    In LightningCLI YAML::

        trainer:
          callbacks:
            - class_path: gradskip_lightning.GradSkipCallback
              init_args: {num_probes: 32, every_n_epochs: 1, compare_methods: [rollout]}
    """

    def __init__(
        self,
        probe_images: Tensor | None = None,
        probe_labels: Tensor | None = None,
        probe_masks: Tensor | dict[str, Tensor] | None = None,
        num_probes: int = 32,
        probe_seed: int = 0,
        every_n_epochs: int = 1,
        method: MethodName = "gradskip",
        method_options: dict[str, Any] | None = None,
        compare_methods: Sequence[MethodName] = (),
        target: Target = "label",
        explain_batch_size: int = 32,
        insertion_steps: int = 16,
        deletion_baseline: DeletionBaseline = "zeros",
        fvt_top_k: int = 1,
        pointing_tolerance: float | None = None,
        drift_top_k: float = 0.1,
        metrics_batch_size: int = 256,
        log_prefix: str = "gradskip/",
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        colormap: str = "inferno",
        overlay_alpha: float = 0.5,
        display_size: int = 128,
        progress: bool = True,
        probe_overlays: bool = False,
        transplant: SpuriousTag | bool = False,
    ) -> None:
        super().__init__()
        for name, value in (
            ("num_probes", num_probes),
            ("every_n_epochs", every_n_epochs),
            ("explain_batch_size", explain_batch_size),
            ("insertion_steps", insertion_steps),
            ("metrics_batch_size", metrics_batch_size),
            ("display_size", display_size),
        ):
            _positive(name, value)
        methods = all_methods()
        if method not in methods:
            raise ValueError(f"method must be one of {methods}, got {method!r}")
        compare_methods = list(compare_methods)
        for other in compare_methods:
            if other not in methods or other == method:
                raise ValueError(f"compare_methods must be names from {methods} other than {method!r}, got {other!r}")
        if target not in _TARGETS:
            raise ValueError(f"target must be one of {_TARGETS}, got {target!r}")
        if deletion_baseline not in _BASELINES:
            raise ValueError(f"deletion_baseline must be one of {_BASELINES}, got {deletion_baseline!r}")
        if not isinstance(fvt_top_k, int) or fvt_top_k < 0:
            raise ValueError(f"fvt_top_k must be an integer >= 0, got {fvt_top_k!r}")
        if not 0 < drift_top_k <= 1:
            raise ValueError(f"drift_top_k must be a fraction in (0, 1], got {drift_top_k}")
        if not isinstance(log_prefix, str):
            raise TypeError(f"log_prefix must be a string, got {type(log_prefix).__name__}")
        if (mean is None) != (std is None):
            raise ValueError("give both mean and std, or neither")
        if not 0.0 <= overlay_alpha <= 1.0:
            raise ValueError(f"overlay_alpha must be in [0, 1], got {overlay_alpha}")
        render.colormap_lut(colormap)  # raises ValueError for an unknown colour map
        if not isinstance(transplant, (SpuriousTag, bool)):
            raise TypeError(
                "transplant must be a SpuriousTag, True (the datamodule's tag) or False; "
                f"got {type(transplant).__name__}"
            )
        if probe_images is None and (probe_labels is not None or probe_masks is not None):
            raise ValueError("probe_labels and probe_masks need probe_images")
        given = None if probe_images is None else _given_probes(probe_images, probe_labels, probe_masks)

        self.num_probes = num_probes
        self.probe_seed = probe_seed
        self.every_n_epochs = every_n_epochs
        self.method = method
        self.method_options = dict(method_options or {})
        self.compare_methods = compare_methods
        self.log_prefix = log_prefix
        self.mean, self.std = mean, std
        self.progress = progress
        self.transplant = transplant
        self.scores = ScoreSettings(
            target=target,
            batch_size=explain_batch_size,
            insertion_steps=insertion_steps,
            deletion_baseline=deletion_baseline,
            fvt_top_k=fvt_top_k,
            metrics_batch_size=metrics_batch_size,
            pointing_tolerance=pointing_tolerance,
        )
        self.render_settings = RenderSettings(
            colormap=colormap, alpha=overlay_alpha, display_size=display_size, probe_overlays=probe_overlays
        )

        self._source = ProbeSource(given, num_probes, probe_seed)
        self._drift = DriftTracker(top_k=drift_top_k)
        self._explainers: dict[str, ModelExplainer] = {}
        self._multilabel_task = False
        self._class_names: list[str] | None = None
        self._display: tuple[Sequence[float], Sequence[float]] | tuple[None, None] = (mean, std)
        self._sheet: ProbeSheet | None = None
        self._sinks: list[Sink] = []
        self._sinks_for: Trainer | None = None
        self._fit_trainer: Trainer | None = None
        self._out_dir: Path | None = None
        self._last_explained: int | None = None  # the last fit epoch tried, whether it worked or not
        self._last_trained: int | None = None

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(method=self.method, log_prefix=self.log_prefix)

    @property
    def _activation(self) -> str:
        probes = self._source.probes
        multilabel = self._multilabel_task or (probes is not None and probes.multi_hot is not None)
        return "sigmoid" if multilabel else "softmax"

    # ----------------------------------------------------------------------------- setup

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._refuse_shared_prefix(trainer)
        self._explainers = {}
        for name in (self.method, *self.compare_methods):
            options = self.method_options if name == self.method else {}
            try:
                self._explainers[name] = explainer_for(pl_module, method=name, **options)
            except TypeError as err:
                raise TypeError(
                    f"GradSkipCallback cannot explain {type(pl_module).__name__}: {err}. It needs a timm "
                    "VisionTransformer or an HF SegFormer, or a LightningModule holding exactly one."
                ) from err
        if trainer.state.fn == TrainerFn.FITTING:
            if self._fit_trainer is not None and self._fit_trainer is not trainer:
                self._reset()
            self._fit_trainer = trainer
        datamodule = getattr(trainer, "datamodule", None)
        self._multilabel_task = getattr(datamodule, "task", None) == "multilabel"
        display = (self.mean, self.std)
        if self.mean is None and getattr(datamodule, "mean", None) is not None:
            display = (datamodule.mean, datamodule.std)
        self._display = self._checked_display(*display)
        self._class_names = self._checked_class_names(getattr(datamodule, "class_names", None))
        transplant = self._checked_transplant(getattr(datamodule, "tag", None))
        self.scores = dataclasses.replace(self.scores, transplant=transplant)
        if self._source.probes is None and datamodule is not None:
            dataset = getattr(datamodule, "val_dataset", None) or getattr(datamodule, "train_dataset", None)
            if dataset is not None:
                self._source.draw(dataset)
        if self._source.probes is not None:
            self._prepare()
        log_dir = trainer.log_dir  # on every rank: it broadcasts
        if trainer.is_global_zero and self._sinks_for is not trainer:  # once per Trainer (fit, then validate)
            self._sinks, self._out_dir = make_sinks(
                trainer, self.log_prefix, Path(log_dir or trainer.default_root_dir) / _folder(self.log_prefix)
            )
            self._sinks_for = trainer

    def _refuse_shared_prefix(self, trainer: Trainer) -> None:
        for other in trainer.callbacks:
            if other is not self and isinstance(other, GradSkipCallback):
                if _folder(other.log_prefix) == _folder(self.log_prefix):
                    raise ValueError(
                        f"two GradSkipCallbacks on this Trainer log under log_prefix {self.log_prefix!r} and "
                        f"{other.log_prefix!r}, which share the output folder {_folder(self.log_prefix)!r}: their keys "
                        "and files would overwrite each other. Give each a distinct log_prefix, e.g. 'rollout/'"
                    )

    def _checked_display(self, mean, std) -> tuple[Sequence[float], Sequence[float]] | tuple[None, None]:
        channels = self._explainers[self.method].in_chans
        for name, values in (("mean", mean), ("std", std)):
            if values is not None and len(values) not in (1, channels):
                raise ValueError(
                    f"{name} has {len(values)} values but the model takes {channels} channels: give 1 or "
                    f"{channels} values (the callback's {name}, or the datamodule's)"
                )
        return (mean, std)

    def _checked_class_names(self, names: Sequence[str] | None) -> list[str] | None:
        num_classes = self._explainers[self.method].num_classes
        if not names:
            return None
        if len(names) < num_classes:
            raise ValueError(
                f"datamodule.class_names has {len(names)} names but the model has {num_classes} classes: give "
                "one name per class (or none)"
            )
        return list(names)

    def _checked_transplant(self, datamodule_tag: SpuriousTag | None) -> Transplant | None:
        if self.transplant is False:
            return None
        explainer = self._explainers[self.method]
        if explainer.task != "classification":
            raise ValueError(f"transplant tests a classifier's shortcut; a {explainer.task} model has none: use False")
        tag = self.transplant if isinstance(self.transplant, SpuriousTag) else datamodule_tag
        if tag is None:
            raise ValueError(
                "transplant=True uses the datamodule's tag, but the datamodule has none: give the tag "
                "(transplant: {target_class: ..., position: ...}) or use a datamodule with a tag"
            )
        if not 0 <= tag.target_class < explainer.num_classes:
            raise ValueError(f"transplant tag's target_class {tag.target_class} is not in [0, {explainer.num_classes})")
        if explainer.img_size is not None:
            tag.check_fits(*explainer.img_size)
        mean, std = self._display
        if mean is None:
            raise ValueError(
                "transplant pastes the tag in pixel values and needs the images' normalisation: give mean and std, "
                "or use a datamodule with mean/std attributes"
            )
        return Transplant(tag, tuple(mean), tuple(std))

    def _reset(self) -> None:
        """A new fit on another Trainer: draw probes again, forget drift and the schedule."""
        self._source.reset()
        self._drift.reset()
        self._sheet = None
        self._last_explained = self._last_trained = None

    def _prepare(self) -> None:
        """Check the probes against the model and build their display sheet: before any epoch."""
        explainer = self._explainers[self.method]
        probes = self._source.probes
        check_probes(probes, explainer.in_chans, explainer.img_size, explainer.num_classes)
        explainer.check_images(probes.images)  # what the family needs besides (SegFormer: sides it divides)
        names = self._class_names or [str(c) for c in range(explainer.num_classes)]
        self._sheet = probe_sheet(probes, names, *self._display, self.render_settings.display_size)

    def _ensure_probes(self, trainer: Trainer) -> None:
        """Draw the probes from the Trainer's dataloaders when setup had no datamodule dataset."""
        if self._source.probes is not None:
            return
        if trainer.state.fn == TrainerFn.FITTING and trainer.val_dataloaders is None:
            trainer.fit_loop.epoch_loop.val_loop.setup_data()  # Lightning loads it later otherwise
        loaders = trainer.val_dataloaders or trainer.train_dataloader
        loader = loaders[0] if isinstance(loaders, (list, tuple)) else loaders
        dataset = getattr(loader, "dataset", None)
        if dataset is None:
            raise RuntimeError("GradSkipCallback found no probe images: pass probe_images or use a datamodule")
        self._source.draw(dataset)
        self._prepare()

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._ensure_probes(trainer)

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._ensure_probes(trainer)

    # ----------------------------------------------------------------------------- schedule

    def _due(self, epoch: int) -> bool:
        return (epoch + 1) % self.every_n_epochs == 0 and epoch != self._last_explained

    @override
    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        if trainer.state.fn == TrainerFn.VALIDATING or (
            trainer.state.fn == TrainerFn.FITTING and self._due(trainer.current_epoch)
        ):
            self._explain_epoch(trainer, pl_module, trainer.current_epoch)

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._last_trained = trainer.current_epoch
        if self._due(trainer.current_epoch):
            self._explain_epoch(trainer, pl_module, trainer.current_epoch)

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._last_trained is not None and self._last_trained != self._last_explained:
            self._explain_epoch(trainer, pl_module, self._last_trained)
        for sink in self._sinks:
            sink.finish()

    # ----------------------------------------------------------------------------- one epoch, isolated

    def _explain_epoch(self, trainer: Trainer, pl_module: LightningModule, epoch: int) -> None:
        """Explain, gather and log one epoch; any failure warns and skips it (tried once per epoch)."""
        start = time.perf_counter()
        trained = trainer.state.fn == TrainerFn.FITTING
        if trained:
            self._last_explained = epoch
        probes = self._source.probes
        shard = shard_positions(len(probes))
        records: dict[str, ProbeRecord] = {}
        error = None
        with isolate_rng(include_cuda=True), torch.inference_mode(False):
            try:
                part = probes.subset(shard.positions)
                part.images = part.images.clone()  # a normal tensor, even under inference mode
                progress = self.progress and trainer.is_global_zero
                with eval_mode(pl_module):  # every module's own mode back afterwards
                    for name, explainer in self._explainers.items():
                        records[name] = explain_probes(
                            explainer,
                            part,
                            self.scores,
                            heads=name == self.method,
                            activation=self._activation,
                            progress=progress,
                        )
            except Exception as err:  # noqa: BLE001 - isolation: torch.OutOfMemoryError, non-finite maps, ...
                error, records = f"{type(err).__name__}: {err}", {}
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            merged, error = gather_records(records, shard, len(probes), error)
        if error is None:
            drift = self._drift.update(merged[self.method].token_maps, store=trained)
            prefix = self.log_prefix if trained else f"{self.log_prefix}validate/"
            regions = list(probes.regions or {})
            scalars = epoch_scalars(merged, self.method, drift, regions, epoch=epoch, prefix=prefix)
            self._monitor(trainer, scalars)
            if trainer.is_global_zero:
                try:  # rank zero only, no collective inside: safe to skip alone
                    self._log(trainer, merged, drift, scalars, epoch, start, prefix, trained)
                except Exception as err:  # noqa: BLE001
                    error = f"{type(err).__name__}: {err}"
        if error is not None:
            rank_zero_warn(f"GradSkipCallback: explanation of epoch {epoch} skipped, training goes on. {error}")

    @staticmethod
    def _monitor(trainer: Trainer, scalars: dict[str, float]) -> None:
        """Put the finite scalars in ``trainer.callback_metrics`` (NaN ones out) for EarlyStopping and co."""
        metrics = trainer.callback_metrics
        for name, value in scalars.items():
            if math.isfinite(value):
                metrics[name] = torch.tensor(value, dtype=torch.float32)
            else:
                metrics.pop(name, None)

    def _log(
        self,
        trainer: Trainer,
        records: dict[str, ProbeRecord],
        drift: dict[str, Tensor],
        scalars: dict[str, float],
        epoch: int,
        start: float,
        prefix: str,
        trained: bool,
    ) -> None:
        step = getattr(trainer.fit_loop.epoch_loop, "_batches_that_stepped", trainer.global_step)
        report = build_report(
            records,
            self.method,
            drift,
            self._sheet,
            scalars,
            epoch=epoch,
            step=step,
            prefix=prefix,
            settings=self.render_settings,
            save=trained,
        )
        report.scalars[key(None, prefix, "time_s")] = time.perf_counter() - start
        for sink in self._sinks:
            sink.log(report, self._sheet)

    # ----------------------------------------------------------------------------- state

    @override
    def state_dict(self) -> dict[str, Any]:
        probes = self._source.probes
        return {
            "probe_ids": None if probes is None else probes.ids.clone(),
            "drift": self._drift.state_dict(),
            "last_explained": self._last_explained,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._drift.load_state_dict(state_dict["drift"])
        self._last_explained = state_dict["last_explained"]
        before = self._source.probes
        self._source.restore(state_dict["probe_ids"])
        if self._source.probes is not before and self._explainers:
            self._prepare()
