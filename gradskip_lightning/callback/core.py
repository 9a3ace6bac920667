"""GradSkipCallback: explain a fixed probe set at epoch ends and log maps, head importance and scores."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.seed import isolate_rng
from torch import Tensor
from typing_extensions import override

from gradskip_lightning import render
from gradskip_lightning.explainer import METHODS, Explainer

from .compute import ExplainFailure, ScoreSettings, explain_probes
from .distributed import gather_results, shard_positions
from .drift import DriftTracker
from .files import write_epoch, write_probes
from .probes import ProbeSet, dataset_labels, load_probes, stratified_indices
from .report import RenderSettings, build_report
from .sinks import ImageFileSink, ProbeSheet, ScalarSink, WandbSink

__all__ = ["GradSkipCallback"]

_TARGETS = ("label", "prediction")
_BASELINES = ("zeros", "blur")


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


class GradSkipCallback(Callback):
    r"""Explain a fixed set of probe images at epoch ends and log what the model looks at.

    Every ``every_n_epochs`` epochs, at the end of validation (never during the sanity check;
    at the end of the training epoch when no validation ran that epoch), and once more at the end
    of fit if the last epoch was not explained, the callback explains the probes with GradSkip
    (or a baseline), scores the maps and logs, under ``log_prefix``, one row per logged epoch at
    the step of Lightning's own epoch metrics:

    - ``overlay/probe_<id>`` (captioned overlays), ``overlays`` (grid of all probes);
    - ``heads/{omega,grad_flow,sparsity}`` (layer x head images of the mean over probes) and
      ``heads/<part>/layer_<l>`` (histograms over heads and probes), ``gate/layer_<l>`` (mean
      beta_main);
    - ``insertion``, ``deletion``, ``ins_minus_del``, ``fvt_violation``, ``pointing_game`` (probes
      with masks only);
    - ``drift/{prev,first}/{spearman,topk_iou}`` from the second logged epoch on;
    - ``compare/<method>/{insertion,deletion,ins_minus_del,fvt_violation,overlays}`` per
      comparison method;
    - ``probes`` (table logged once) and ``table`` (one row per probe per epoch) on W&B;
    - ``epoch`` and ``time_s`` (the callback's wall time for that epoch, in seconds).

    Scalars go to every logger of the Trainer; images go to W&B, or to PNG files under
    ``<log dir>/gradskip/images`` without W&B. Every epoch's maps are written to
    ``<log dir>/gradskip/maps/epoch_<e>.npz`` (W&B: ``<run dir>/gradskip``) and, with W&B, logged
    as one artifact at the end of fit. Without a logger the log dir is ``default_root_dir``; the
    folder is named after ``log_prefix`` ("gradskip/" -> ``gradskip``).

    Training does not see the callback: RNG states (torch, CUDA, numpy, Python) and every
    module's train/eval mode are restored, no parameter ``.grad`` is written and no dataloader is
    touched (drawn probes are read from the dataset by index). Under DDP each rank explains the
    probes ``rank::world_size`` and rank zero logs (see :mod:`.distributed`).

    Args:
        probe_images: explicit probes (P, C, H, W), normalised as the model expects; None draws
            ``num_probes`` from the datamodule's ``val_dataset`` (``train_dataset`` without one).
        probe_labels: (P,) classes of the explicit probes (required with ``probe_images``).
        probe_masks: (P, H, W) object masks of the explicit probes, for the Pointing Game. Drawn
            probes use the dataset's masks when its items are ``(image, label, mask)``.
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
        log_prefix: prefix of every logged key; give two instances different prefixes.
        mean, std: normalisation to undo for display; None reads the datamodule's ``mean``/``std``
            (without them each image is min-max scaled).
        colormap: matplotlib colour map of the overlays.
        overlay_alpha: weight of the heat map in the overlays, in [0, 1].
        display_size: images are upscaled (nearest) to at least this many pixels for display.
        progress: show a progress bar on rank zero while explaining takes several chunks.

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
        probe_masks: Tensor | None = None,
        num_probes: int = 32,
        probe_seed: int = 0,
        every_n_epochs: int = 1,
        method: str = "gradskip",
        method_options: dict[str, Any] | None = None,
        compare_methods: Sequence[str] = (),
        target: str = "label",
        explain_batch_size: int = 32,
        insertion_steps: int = 16,
        deletion_baseline: str = "zeros",
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
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        compare_methods = list(compare_methods)
        for other in compare_methods:
            if other not in METHODS or other == method:
                raise ValueError(f"compare_methods must be names from {METHODS} other than {method!r}, got {other!r}")
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
        self._given: ProbeSet | None = None
        if probe_images is not None:
            if probe_labels is None:
                raise ValueError("probe_labels (P,) are required with probe_images")
            self._given = ProbeSet(
                torch.as_tensor(probe_images).float(),
                torch.as_tensor(probe_labels),
                torch.arange(len(probe_images)),
                None if probe_masks is None else torch.as_tensor(probe_masks),
            )
        elif probe_labels is not None or probe_masks is not None:
            raise ValueError("probe_labels and probe_masks need probe_images")

        self.num_probes = num_probes
        self.probe_seed = probe_seed
        self.every_n_epochs = every_n_epochs
        self.method = method
        self.method_options = dict(method_options or {})
        self.compare_methods = compare_methods
        self.log_prefix = log_prefix
        self.mean, self.std = mean, std
        self.progress = progress
        self.scores = ScoreSettings(
            target=target,
            batch_size=explain_batch_size,
            insertion_steps=insertion_steps,
            deletion_baseline=deletion_baseline,
            fvt_top_k=fvt_top_k,
            metrics_batch_size=metrics_batch_size,
            pointing_tolerance=pointing_tolerance,
        )
        self.render_settings = RenderSettings(colormap=colormap, alpha=overlay_alpha, display_size=display_size)

        self._drift = DriftTracker(top_k=drift_top_k)
        self._explainers: dict[str, Explainer] = {}
        self._probes: ProbeSet | None = None
        self._dataset = None
        self._restored_ids: Tensor | None = None
        self._class_names: list[str] | None = None
        self._display: tuple[Sequence[float], Sequence[float]] | tuple[None, None] = (mean, std)
        self._sheet: ProbeSheet | None = None
        self._sinks: list = []
        self._sinks_for: Trainer | None = None
        self._out_dir: Path | None = None
        self._last_explained: int | None = None
        self._last_trained: int | None = None

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(method=self.method, log_prefix=self.log_prefix)

    # ----------------------------------------------------------------------------- setup

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._explainers = {}
        for name in (self.method, *self.compare_methods):
            options = self.method_options if name == self.method else {}
            try:
                self._explainers[name] = Explainer(pl_module, method=name, **options)
            except TypeError as err:
                raise TypeError(
                    f"GradSkipCallback cannot explain {type(pl_module).__name__}: {err}. It needs a timm "
                    "VisionTransformer, or a LightningModule holding exactly one."
                ) from err
        explainer = self._explainers[self.method]
        expected = (explainer.in_chans, *explainer.img_size)
        datamodule = getattr(trainer, "datamodule", None)
        if self.mean is None and datamodule is not None and getattr(datamodule, "mean", None) is not None:
            self._display = (datamodule.mean, datamodule.std)
        self._class_names = list(getattr(datamodule, "class_names", None) or []) or None
        if self._given is not None:
            self._probes = self._given
        elif self._probes is None and datamodule is not None:
            self._dataset = getattr(datamodule, "val_dataset", None) or getattr(datamodule, "train_dataset", None)
            if self._dataset is not None:
                self._probes = self._draw(self._dataset)
        if self._probes is not None:
            self._check_shape(self._probes, expected)
        log_dir = trainer.log_dir  # on every rank: it broadcasts
        if trainer.is_global_zero and self._sinks_for is not trainer:  # once per Trainer (fit, then validate)
            folder = self.log_prefix.strip("/").replace("/", "_") or "gradskip"
            self._out_dir = Path(log_dir or trainer.default_root_dir) / folder
            self._sinks, self._sinks_for, self._sheet = self._make_sinks(trainer), trainer, None

    def _draw(self, dataset) -> ProbeSet:
        ids = self._restored_ids
        if ids is None:
            ids = stratified_indices(dataset_labels(dataset), self.num_probes, self.probe_seed)
        return load_probes(dataset, ids)

    @staticmethod
    def _check_shape(probes: ProbeSet, expected: tuple[int, int, int]) -> None:
        if tuple(probes.images.shape[1:]) != expected:
            raise ValueError(
                f"probe images must be (P, {expected[0]}, {expected[1]}, {expected[2]}) for this model; "
                f"got {tuple(probes.images.shape)}"
            )

    def _make_sinks(self, trainer: Trainer) -> list:
        sinks: list = []
        wandb_logger = next((lg for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)
        if wandb_logger is not None:
            self._out_dir = Path(wandb_logger.experiment.dir).parent / self._out_dir.name
            sinks.append(WandbSink(wandb_logger, self.log_prefix, self._out_dir / "maps"))
        else:
            sinks.append(ImageFileSink(self._out_dir / "images", self.log_prefix))
        sinks.extend(ScalarSink(lg) for lg in trainer.loggers if lg is not wandb_logger)
        return sinks

    def _ensure_probes(self, trainer: Trainer) -> ProbeSet:
        """The probe set; drawn on first use when setup had no datamodule (from the val loader's dataset)."""
        if self._probes is None:
            loaders = trainer.val_dataloaders or trainer.train_dataloader
            loader = loaders[0] if isinstance(loaders, (list, tuple)) else loaders
            dataset = getattr(loader, "dataset", None)
            if dataset is None:
                raise RuntimeError("GradSkipCallback found no probe images: pass probe_images or use a datamodule")
            self._dataset = dataset
            self._probes = self._draw(dataset)
            explainer = self._explainers[self.method]
            self._check_shape(self._probes, (explainer.in_chans, *explainer.img_size))
        return self._probes

    # ----------------------------------------------------------------------------- hooks

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

    # ----------------------------------------------------------------------------- work

    def _explain_epoch(self, trainer: Trainer, pl_module: LightningModule, epoch: int) -> None:
        start = time.perf_counter()
        probes = self._ensure_probes(trainer)
        positions = shard_positions(len(probes))
        values: dict[str, Tensor] = {}
        error = None
        with isolate_rng(include_cuda=True), torch.inference_mode(False):
            modes = [(module, module.training) for module in pl_module.modules()]
            try:
                if len(positions):
                    shard = probes.subset(positions)
                    shard = ProbeSet(shard.images.clone(), shard.labels.clone(), shard.ids, shard.masks)
                    progress = self.progress and trainer.is_global_zero
                    values = explain_probes(self._explainers[self.method], shard, self.scores, progress=progress)
                    for name in self.compare_methods:
                        other = explain_probes(
                            self._explainers[name], shard, self.scores, heads=False, progress=progress
                        )
                        values.update(
                            {
                                f"compare/{name}/{key}": other[key]
                                for key in ("maps", "insertion", "deletion", "fvt_violation")
                                if key in other
                            }
                        )
            except (ExplainFailure, RuntimeError, ValueError) as err:  # torch.OutOfMemoryError is a RuntimeError
                error = f"{type(err).__name__}: {err}"
                values = {}
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
            finally:
                for module, mode in modes:
                    module.training = mode
            merged, error = gather_results(values, positions, len(probes), error)
        if error is not None:
            rank_zero_warn(f"GradSkipCallback: explanation of epoch {epoch} skipped, training goes on. {error}")
            return
        drift = self._drift.update(merged["token_maps"], epoch)
        if trainer.state.fn == TrainerFn.FITTING:
            self._last_explained = epoch
        if trainer.is_global_zero:
            self._log(trainer, probes, merged, drift, epoch, start)

    def _log(
        self,
        trainer: Trainer,
        probes: ProbeSet,
        merged: dict[str, Tensor],
        drift: dict[str, Tensor],
        epoch: int,
        start: float,
    ) -> None:
        names = self._class_names or [str(c) for c in range(self._explainers[self.method].num_classes)]
        if self._sheet is None:
            display = render.upscale(
                render.to_display(probes.images, *self._display), self.render_settings.display_size
            )
            self._sheet = ProbeSheet(probes.ids.tolist(), [names[int(c)] for c in probes.labels], display)
            write_probes(self._out_dir / "maps", probes.ids.numpy(), probes.labels.numpy(), display, names)
        step = getattr(trainer.fit_loop.epoch_loop, "_batches_that_stepped", trainer.global_step)
        report = build_report(
            merged,
            drift,
            self._sheet,
            names,
            epoch=epoch,
            step=step,
            prefix=self.log_prefix,
            compare_methods=self.compare_methods,
            settings=self.render_settings,
        )
        arrays = {
            "probe_ids": probes.ids.numpy(),
            "labels": probes.labels.numpy(),
            **{
                key: merged[key].numpy()
                for key in ("targets", "predictions", "probabilities", "insertion", "deletion", "maps", "token_maps")
            },
        }
        write_epoch(self._out_dir / "maps", epoch, step, self.method, arrays)
        report.scalars[f"{self.log_prefix}time_s"] = time.perf_counter() - start
        for sink in self._sinks:
            sink.log(report, self._sheet)

    # ----------------------------------------------------------------------------- state

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "probe_ids": None if self._probes is None else self._probes.ids.clone(),
            "drift": self._drift.state_dict(),
            "last_explained": self._last_explained,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._drift.load_state_dict(state_dict["drift"])
        self._last_explained = state_dict["last_explained"]
        ids = state_dict["probe_ids"]
        if ids is None or self._given is not None:
            return
        self._restored_ids = ids
        if self._probes is not None and not torch.equal(self._probes.ids, ids) and self._dataset is not None:
            self._probes = load_probes(self._dataset, ids)
