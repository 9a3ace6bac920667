"""GradSkipCallback: explain a fixed probe set at epoch ends and log maps, head importance and scores.

The hooks, the state and the wiring; the settings are in :mod:`.settings`, the setup checks in
:mod:`.setup`, the schedule in :mod:`.schedule`, the isolated run in :mod:`.epoch`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor
from typing_extensions import override

from gradskip_lightning.callback import setup as checks
from gradskip_lightning.callback.averaging import Hook, averaged_weights
from gradskip_lightning.callback.discovery.images import show_discovery
from gradskip_lightning.callback.discovery.stage import Discoverer, DiscoveryStage, discovery_scalars
from gradskip_lightning.callback.epoch import explain_isolated, full_report, log_to_sinks, monitor, skipped_report
from gradskip_lightning.callback.keys import key
from gradskip_lightning.callback.output.report import epoch_scalars
from gradskip_lightning.callback.output.sinks import EpochReport, ProbeSheet, Sink, make_sinks
from gradskip_lightning.callback.probes import ProbeSource, given_probes
from gradskip_lightning.callback.scoring.budget import TimeBudget
from gradskip_lightning.callback.scoring.compute import EpochWork
from gradskip_lightning.callback.scoring.drift import DriftTracker
from gradskip_lightning.callback.scoring.schedule import EpochSchedule
from gradskip_lightning.callback.settings import (
    FLAT_NAMES,
    DeletionBaseline,
    ProbeSettings,
    RenderSettings,
    ScoreSettings,
    Target,
    check_arguments,
    grouped,
)
from gradskip_lightning.core.explanation import ModelExplainer
from gradskip_lightning.core.validation import required
from gradskip_lightning.data.tags import SpuriousTag
from gradskip_lightning.methods import MethodName
from gradskip_lightning.metrics.perturbation import Activation

__all__ = ["GradSkipCallback"]


class GradSkipCallback(Callback):
    r"""Explain a fixed set of probe images at epoch ends and log what the model looks at.

    Every ``every_n_epochs`` epochs (at the end of validation, or of the training epoch without
    validation, and once at the end of fit) the probes are explained with ``method`` (and each of
    ``compare_methods``), the maps are scored, and one row per epoch is logged at the step of
    Lightning's own epoch metrics; every scalar is also monitorable by ``EarlyStopping`` and
    ``ModelCheckpoint``. A failing epoch warns and is skipped; training does not see the callback.
    The logged keys, files and behaviour are in the README's "What is logged" and "Callback options".

    Args:
        probe_images, probe_labels, probe_masks: explicit probes (P, C, H, W) float, their labels
            (P,) or multi-hot (P, C), and (P, H, W) object masks or {name: (P, H, W)} regions;
            None draws ``probes.num_probes`` from the datamodule's validation set.
        probes, scores, render: the settings groups (:mod:`.settings`); None: their defaults.
        discovery: the shortcut discovery stage (:mod:`.discovery`); None: its defaults.
        every_n_epochs: explain every n-th epoch.
        method, method_options: the explaining method and its options; compare_methods: more methods.
        log_prefix: the callback's name in every key (``<section>/<log_prefix><name>``).
        mean, std: normalisation to undo for display; None reads the datamodule's.
        progress: a progress bar while explaining takes several chunks.
        transplant: the live transplant test: a ``SpuriousTag``, True (the datamodule's tag) or False.
        backbone: the module path (as ``pl_module.get_submodule`` takes it: ``"student"``,
            ``"nets.student"``) of the network to explain when the LightningModule holds several
            (a teacher and a student, an EMA copy); that submodule's forward must return the
            network's logits, and it is what every method and score runs. None: the LightningModule.
        num_probes, ..., probe_overlays: deprecated flat spellings of the groups' fields.

    Example::

        GradSkipCallback(probes=ProbeSettings(num_probes=32), scores=ScoreSettings(insertion_steps=8))
    """

    def __init__(
        self,
        probe_images: Tensor | None = None,
        probe_labels: Tensor | None = None,
        probe_masks: Tensor | dict[str, Tensor] | None = None,
        *,
        probes: ProbeSettings | None = None,
        scores: ScoreSettings | None = None,
        render: RenderSettings | None = None,
        discovery: DiscoveryStage | None = None,
        every_n_epochs: int = 1,
        method: MethodName = "gradskip",
        method_options: dict[str, Any] | None = None,
        compare_methods: Sequence[MethodName] = (),
        log_prefix: str = "gradskip/",
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        progress: bool = True,
        transplant: SpuriousTag | bool = False,
        backbone: str | None = None,
        # Deprecated flat spellings (explicit, not **kwargs, so LightningCLI YAML accepts them too).
        num_probes: int | None = None,
        probe_seed: int | None = None,
        explain_batch_size: int | None = None,
        target: Target | None = None,
        insertion_steps: int | None = None,
        deletion_baseline: DeletionBaseline | None = None,
        fvt_top_k: int | None = None,
        pointing_tolerance: float | None = None,
        drift_top_k: float | None = None,
        metrics_batch_size: int | None = None,
        colormap: str | None = None,
        overlay_alpha: float | None = None,
        display_size: int | None = None,
        probe_overlays: bool | None = None,
    ) -> None:
        super().__init__()
        flat = {name: value for name, value in locals().items() if name in FLAT_NAMES}  # the deprecated ones
        settings = grouped({"probes": probes, "scores": scores, "render": render}, flat)
        self.probes, self.scores, self.render = settings["probes"], settings["scores"], settings["render"]
        compare_methods = list(compare_methods)
        check_arguments(every_n_epochs, method, compare_methods, log_prefix, mean, std, transplant, backbone)
        given = given_probes(probe_images, probe_labels, probe_masks)
        self.method, self.method_options, self.compare_methods = method, dict(method_options or {}), compare_methods
        self.log_prefix, self.mean, self.std = log_prefix, mean, std
        self.progress, self.transplant, self.backbone = progress, transplant, backbone
        self._source = ProbeSource(given, self.probes.num_probes, self.probes.probe_seed, self.probes.item_keys)
        self._drift = DriftTracker(top_k=self.scores.drift_top_k)
        self._schedule = EpochSchedule(every_n_epochs)
        self.discovery = discovery or DiscoveryStage()
        self._discovery = Discoverer(self.discovery, self.probes.probe_seed, self.probes.item_keys)
        own = self.discovery.every_n_epochs if self.discovery.enabled else None
        self._budget = TimeBudget(self.probes.max_overhead, method, compare_methods, discovery_every=own)
        self._explainers: dict[str, ModelExplainer] = {}
        #: The keys this training epoch's explanation put in ``callback_metrics`` (empty until it runs; a
        #: score the time budget left out of the epoch keeps its older value there, and is not in it).
        self.logged_keys: frozenset[str] = frozenset()
        self._data = checks.DataSetup(False, (mean, std), None, None)
        self._sheet: ProbeSheet | None = None
        self._sinks: list[Sink] = []
        self._sinks_for: Trainer | None = None
        self._fit_trainer: Trainer | None = None
        self._resumed: dict[str, Any] | None = None  # the checkpoint's probe state, checked once probes are known
        self._monitored: dict[str, set[str]] = {}  # prefix -> keys put in callback_metrics

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(method=self.method, log_prefix=self.log_prefix)

    @property
    def _activation(self) -> Activation:
        probes = self._source.probes
        multilabel = self._data.multilabel or (probes is not None and probes.multi_hot is not None)
        return "sigmoid" if multilabel else "softmax"

    # ----------------------------------------------------------------------------- setup

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        callbacks: list[Callback] = trainer.callbacks  # type: ignore[attr-defined]  # set by the Trainer
        others = [c.log_prefix for c in callbacks if c is not self and isinstance(c, GradSkipCallback)]
        checks.refuse_shared_folder(self.log_prefix, others)
        checks.check_precision(trainer)
        methods: list[str] = [self.method, *self.compare_methods]
        if self.discovery.enabled and self.discovery.method is not None and self.discovery.method not in methods:
            methods.append(self.discovery.method)  # explained for the discovery probes only
        self._explainers = checks.explainers_for(pl_module, methods, self.method_options, self.backbone)
        if trainer.state.fn == TrainerFn.FITTING:
            if self._fit_trainer is not None and self._fit_trainer is not trainer:
                self._reset()
            self._fit_trainer = trainer
        datamodule = getattr(trainer, "datamodule", None)
        explainer = self._explainers[self.method]
        self._data = checks.data_setup(explainer, datamodule, self.mean, self.std, self.transplant)
        dataset = getattr(datamodule, "val_dataset", None) or getattr(datamodule, "train_dataset", None)
        if dataset is not None:
            if self._source.probes is None:
                self._source.draw(dataset)
            self._draw_discovery(dataset)
        if self._source.probes is not None:
            self._prepare()
        log_dir = trainer.log_dir  # on every rank: it broadcasts
        if trainer.is_global_zero and self._sinks_for is not trainer:  # once per Trainer (fit, then validate)
            out_dir = Path(log_dir or trainer.default_root_dir) / checks.folder(self.log_prefix)
            self._sinks, self._sinks_for = make_sinks(trainer, self.log_prefix, out_dir), trainer

    def _reset(self) -> None:
        """A new fit on another Trainer: draw probes again, forget drift and the schedule."""
        self._source.reset()
        self._drift.reset()
        self._schedule.reset()
        self._discovery.reset()
        self._budget.reset()
        self._sheet = None
        self._resumed = None

    def _prepare(self) -> None:
        """Check the probes against the model and build their display sheet: before any epoch."""
        probes = required(self._source.probes, "the probe set")
        self._sheet = checks.prepared_sheet(self._explainers[self.method], probes, self._data, self.scores, self.render)

    def _draw_discovery(self, dataset: Any) -> None:
        """The discovery probes, from the probes' dataset (classification models only)."""
        explainer = self._explainers[self.method]
        if explainer.task == "classification":
            self._discovery.draw(dataset, explainer.num_classes)

    def _ensure_probes(self, trainer: Trainer) -> None:
        """Draw the probes from the Trainer's dataloaders when setup had no datamodule dataset."""
        if self._source.probes is None or (self.discovery.enabled and self._discovery.probes is None):
            dataset = checks.loader_dataset(trainer)
            if self._source.probes is None:
                self._source.draw(dataset)
                self._prepare()
            self._draw_discovery(dataset)
        self._check_resumed()

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._ensure_probes(trainer)

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._budget.train_started()
        self.logged_keys = frozenset()

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._budget.train_ended()
        self._ensure_probes(trainer)

    # ----------------------------------------------------------------------------- schedule

    @override
    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        epoch = trainer.current_epoch
        fitting = trainer.state.fn == TrainerFn.FITTING
        if fitting and self._schedule.mid_epoch(trainer):
            return
        if trainer.state.fn == TrainerFn.VALIDATING or (fitting and self._schedule.due(epoch)):
            self._explain_epoch(trainer, pl_module, epoch, "validation")

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._schedule.last_trained = trainer.current_epoch
        self._budget.train_ended()
        if self._schedule.due(trainer.current_epoch):
            self._explain_epoch(trainer, pl_module, trainer.current_epoch, "train")

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        epoch = self._schedule.left_at_fit_end()
        if epoch is not None:
            self._explain_epoch(trainer, pl_module, epoch, "fit_end")
        for sink in self._sinks:
            sink.finish()

    # ----------------------------------------------------------------------------- one epoch

    def _explain_epoch(self, trainer: Trainer, pl_module: LightningModule, epoch: int, hook: Hook) -> None:
        """Explain, gather and log one epoch; any failure warns and skips it (tried once per epoch).

        Everything the epoch does is inside: the explanation (the weights the user keeps, see
        :mod:`.averaging`), drift, the scalars, the report and every sink. A skipped epoch sets the
        callback's monitored scores to NaN and logs ``<prefix>skipped`` = 1."""
        start = time.perf_counter()
        trained = trainer.state.fn == TrainerFn.FITTING
        if trained:
            self._schedule.last_explained = epoch
        prefix = self.log_prefix if trained else f"{self.log_prefix}validate/"
        report: EpochReport | None = None
        try:
            probes, sheet = required(self._source.probes, "the probe set"), required(self._sheet, "the probe sheet")
            # what the time budget leaves in this epoch (everything without one)
            plan = self._budget.plan(trained, self._discovery.due(epoch, trained))
            work = EpochWork(scored=plan.scored)
            with averaged_weights(trainer, pl_module, self, hook):
                merged, error = explain_isolated(
                    pl_module,
                    {name: self._explainers[name] for name in plan.methods},
                    probes,
                    self.scores,
                    batch_size=self.probes.explain_batch_size,
                    transplant=self._data.transplant,
                    activation=self._activation,
                    progress=self.progress and trainer.is_global_zero,
                    work=work,
                )
            if error is None:  # the same on every rank: the gather agreed
                drift = self._drift.update(required(merged[self.method].token_maps, "the token maps"), store=trained)
                regions = list(probes.regions or {})
                scalars = epoch_scalars(merged, self.method, drift, regions, epoch=epoch, prefix=prefix)
                scalars[key(None, prefix, "skipped")] = 0.0
                scalars.update(self._budget.scalars(prefix) if trained else {})
                discovery_start = time.perf_counter()
                explainer = self._explainers[self.discovery.method or self.method]
                found = None
                if plan.discovery:
                    found = self._discovery.run_epoch(
                        pl_module, explainer, epoch, batch_size=self.probes.explain_batch_size,
                        activation=self._activation,
                    )  # fmt: skip
                discovery_s = time.perf_counter() - discovery_start
                work.add("discovery", discovery_s)
                if found is not None:
                    scalars.update(discovery_scalars(found, explainer.patch_size, prefix))
                monitor(trainer, scalars)
                self.logged_keys = frozenset(scalars)
                self._monitored.setdefault(prefix, set()).update(scalars)
                if trainer.is_global_zero:
                    report = full_report(
                        merged, self.method, drift, sheet, scalars, trainer, epoch, prefix, self.render, trained
                    )
                    if found is not None:
                        show_discovery(
                            trainer, report.images, found, self._discovery, sheet.class_names, self._data.display,
                            self.render, explainer.patch_size, epoch, prefix,
                        )  # fmt: skip
                        report.scalars[key("discovery", prefix, "time_s")] = discovery_s
        except Exception as err:  # noqa: BLE001
            error = f"{type(err).__name__}: {err}"
        if error is not None:
            report = skipped_report(trainer, epoch, prefix, error, self._monitored.get(prefix, set()))
            self.logged_keys = frozenset(self._monitored.get(prefix, set()))  # NaN this epoch
        elif trained:
            self._budget.record(plan, time.perf_counter() - start, work.seconds)
        if report is not None:
            report.started, report.time_key = start, key(None, prefix, "time_s")
            log_to_sinks(self._sinks, report, required(self._sheet, "the probe sheet"))

    # ----------------------------------------------------------------------------- state

    @override
    def state_dict(self) -> dict[str, Any]:
        probes = self._source.probes
        return {
            "probe_ids": None if probes is None else probes.ids.clone(),
            "probe_fingerprint": None if probes is None else probes.fingerprint(),
            "drift": self._drift.state_dict(),
            "last_explained": self._schedule.last_explained,
            "discovery": self._discovery.state_dict(),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._drift.load_state_dict(state_dict["drift"])
        self._schedule.last_explained = state_dict["last_explained"]
        self._resumed = {"ids": state_dict["probe_ids"], "fingerprint": state_dict.get("probe_fingerprint")}
        before = self._source.probes
        self._source.restore(state_dict["probe_ids"])
        self._discovery.load_state_dict(state_dict.get("discovery"))
        if self._source.probes is not before and self._source.probes is not None and self._explainers:
            self._prepare()
        if self._source.probes is not None:
            self._check_resumed()

    def _check_resumed(self) -> None:
        """Once the probes are known after a resume: drift restarts (see :meth:`.DriftTracker.resume`)."""
        if self._resumed is not None and self._source.probes is not None:
            self._drift.resume(self._resumed["fingerprint"], self._source.probes)
            self._resumed = None
