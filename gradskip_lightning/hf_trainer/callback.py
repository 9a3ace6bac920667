"""GradSkipTrainerCallback: the Lightning callback's epoch ends, in a ``transformers.Trainer``.

The front door and the hooks. Everything an epoch end does (explain, score, drift, discovery, the
time budget, the report and its sinks) is the Lightning callback's own
(:class:`~gradskip_lightning.engine.epoch.EpochRunner`), run through :class:`.host.TrainerHost`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import ExportableState
from typing_extensions import override

from gradskip_lightning.core.explanation import ModelExplainer
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.core.validation import required
from gradskip_lightning.engine import setup as checks
from gradskip_lightning.engine.discovery.stage import DiscoveryStage
from gradskip_lightning.engine.epoch import Prepared
from gradskip_lightning.engine.monitor import EpochMonitor, MonitoredSettings, json_state, state_from_json
from gradskip_lightning.engine.probes import ProbeImages
from gradskip_lightning.engine.settings import (
    MethodSettings,
    ProbeSettings,
    RenderSettings,
    ScoreSettings,
)
from gradskip_lightning.engine.setup import DataSetup
from gradskip_lightning.hf_trainer.host import (
    TrainerHost,
    check_best_metric,
    check_weights,
    ends_epoch,
    epoch_index,
    metric_prefix,
)
from gradskip_lightning.hf_trainer.host import model_data as read_model_data
from gradskip_lightning.hf_trainer.loggers import TrainerOutputs, trainer_outputs

__all__ = ["GradSkipTrainerCallback"]


class GradSkipTrainerCallback(MonitoredSettings, TrainerCallback, ExportableState):
    r"""Explain a fixed set of probe images at epoch ends of a ``transformers.Trainer`` and log what the
    model looks at: the :class:`~gradskip_lightning.GradSkipCallback`'s work, with the same settings.

    Every ``every_n_epochs`` training epochs, at the evaluation that ends the epoch (``eval_strategy=
    "epoch"``; without one, at the epoch end; evaluations inside an epoch are not explained), and
    at every ``trainer.evaluate()`` outside training (keys ``<section>/<log_prefix>validate/...``), the
    probes are explained with ``methods.method`` (and each of ``methods.compare``), scored, and logged:
    the scalars into the evaluation's metrics as ``eval_<key>`` (``metric_for_best_model`` can name
    them, e.g. ``"faithfulness/gradskip/insertion"``) and as one row of ``trainer.state.log_history``;
    the maps files and PNGs under ``<output_dir>/<log_prefix folder>/``; images, histograms and
    scalars to W&B and TensorBoard as ``report_to`` says (:mod:`.loggers`). Under DDP every process
    explains its share of the probes and process zero writes. A failing epoch warns and is skipped.

    Args:
        probe_images: explicit probes (:class:`~gradskip_lightning.ProbeImages`); None draws
            ``probes.num_probes`` from the evaluation dataset (the training one without).
        probes, methods, scores, render: the settings groups (:mod:`gradskip_lightning.engine.settings`);
            None: their defaults.
        normalisation: the images' :class:`~gradskip_lightning.Normalisation`, which takes them back to pixels
            for the pictures and the discovery stage's image properties; None: the image processor's
            ``image_mean``/``image_std`` (without them each picture is min-max scaled).
        discovery: the shortcut discovery stage (:class:`~gradskip_lightning.DiscoveryStage`); None: off.
        every_n_epochs: explain every n-th training epoch.
        log_prefix: the callback's name in every key (``<section>/<log_prefix><name>``).
        progress: a progress bar (on a terminal, counting probes) once an explanation has run 2 s.

    Example::

        Trainer(model, args, train_dataset=train, eval_dataset=val,
                callbacks=[GradSkipTrainerCallback(probes=ProbeSettings(num_probes=32))])
    """

    def __init__(
        self,
        probe_images: ProbeImages | None = None,
        *,
        probes: ProbeSettings | None = None,
        methods: MethodSettings | None = None,
        scores: ScoreSettings | None = None,
        render: RenderSettings | None = None,
        normalisation: Normalisation | None = None,
        discovery: DiscoveryStage | None = None,
        every_n_epochs: int = 1,
        log_prefix: str = "gradskip/",
        progress: bool = True,
    ) -> None:
        groups = (probes, methods, scores, render, discovery)
        self.monitor = EpochMonitor(probe_images, groups, every_n_epochs, log_prefix, progress, normalisation)
        self._explainers: tuple[nn.Module, dict[str, ModelExplainer], DataSetup] | None = None  # of this model
        self._outputs: TrainerOutputs | None = None  # rank zero, per training run
        self._monitored: dict[bool, dict[str, Tensor]] = {True: {}, False: {}}  # by fitting, as callback_metrics
        self._training = self._epoch_ended = self._said_mid_epoch = False
        #: the checkpoint's state to resume (JSON values), set by the Trainer's callback restore or read from
        #: its state at train begin; applied once the model is known
        self.resume_state: dict[str, Any] | None = None

    # ----------------------------------------------------------------------------- hooks

    @override
    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """A new training run: probes drawn again, drift, the schedule and the budget forgotten; the
        model (and given probes) checked before the first step."""
        self.monitor.reset()
        self._outputs, self._monitored[True] = None, {}
        self._training, self._epoch_ended = True, False
        self._explainers = None
        check_best_metric(args.metric_for_best_model, self.log_prefix, self.every_n_epochs)
        saved = self.resume_state or _saved_state(state, type(self).__name__)
        if saved is not None and state.global_step > 0:  # resumed from a checkpoint (a fresh run saves no state)
            self.monitor.load_state_dict(state_from_json(saved))
        self.resume_state = None
        if self.monitor.probes is not None:  # given probes: checked against the model now
            self._prepare(kwargs["model"], kwargs.get("processing_class"), None)
        else:
            self._model_setup(kwargs["model"], kwargs.get("processing_class"))

    @override
    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.monitor.runner.budget.train_started()
        self.monitor.runner.logged_keys = frozenset()
        self._epoch_ended = False

    @override
    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """The epoch's training is done: the evaluation that follows explains (``control.should_evaluate``,
        set by the Trainer's flow callback before this one), else the epoch end itself."""
        self.monitor.runner.budget.train_ended()
        epoch = epoch_index(state.epoch)
        self.monitor.schedule.last_trained = epoch
        self._epoch_ended = True
        if not control.should_evaluate and self.monitor.schedule.due(epoch):
            self._explain(self._host(args, state, True, None), kwargs, _dataset(kwargs.get("train_dataloader")), epoch)

    @override
    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        """Explain at the evaluation that ends a due epoch (every evaluation outside training), then put
        the monitored values into ``metrics`` (as Lightning's ``callback_metrics`` keep them)."""
        self.monitor.runner.budget.train_ended()
        host = self._host(args, state, self._training, metrics)
        dataset = _dataset(kwargs.get("eval_dataloader"))
        if not self._training:
            self._explain(host, kwargs, dataset, epoch_index(state.epoch))
        elif self._epoch_ended or ends_epoch(state.epoch):
            epoch = epoch_index(state.epoch)
            if self.monitor.schedule.due(epoch):
                self._explain(host, kwargs, dataset, epoch)
        elif state.epoch and not self._said_mid_epoch:  # not eval_on_start (epoch 0): before any training
            self._said_mid_epoch = True
            rank_zero_warn(
                "GradSkipTrainerCallback: evaluations also run inside epochs (eval_strategy='steps'); the callback "
                "explains at the end of each epoch only (the weights the epoch ends with)"
            )
        if metrics is not None:
            metrics.update(host.metrics())

    @override
    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """The last trained epoch when it was not explained (``every_n_epochs``), then the outputs' end."""
        epoch = self.monitor.schedule.left_at_fit_end()
        if epoch is not None:
            self._explain(self._host(args, state, True, None), kwargs, _dataset(kwargs.get("train_dataloader")), epoch)
        if self._outputs is not None:
            self._outputs.finish()
        self._training = False

    # ----------------------------------------------------------------------------- the work

    def _host(
        self, args: TrainingArguments, state: TrainerState, fitting: bool, metrics: dict[str, float] | None
    ) -> TrainerHost:
        """The host of this epoch end; on rank zero the training run's outputs are built on first use."""
        if state.is_world_process_zero and self._outputs is None:
            out_dir = Path(args.output_dir or ".") / checks.folder(self.log_prefix)
            self._outputs = trainer_outputs(list(args.report_to or []), out_dir, self.log_prefix)
        run = None if self._outputs is None else self._outputs.wandb_run
        prefix = "eval" if metrics is None else metric_prefix(metrics)
        return TrainerHost(state, fitting, self._monitored[fitting], run, prefix)

    def _explain(self, host: TrainerHost, hook_args: dict[str, Any], dataset: Dataset | None, epoch: int) -> None:
        """Run one epoch end on the hook's ``model`` (every rank) and record its row in the log history."""
        model = hook_args["model"]
        prepared = self._prepare(model, hook_args.get("processing_class"), dataset)
        if host.rank_zero and self._outputs is not None:
            prepared.sinks = self._outputs.sinks
        self.monitor.run(host, model, epoch)
        host.record(sorted(self.monitor.runner.logged_keys))

    def _model_setup(
        self, model: nn.Module, processing_class: Any | None
    ) -> tuple[dict[str, ModelExplainer], DataSetup]:
        """The explainers of ``model`` and what its config and image processor say, checked (once per model)."""
        if self._explainers is None or self._explainers[0] is not model:
            check_weights(model)
            explainers = checks.explainers_for(model, self.monitor.settings.explained, dict(self.methods.options))
            explainer = explainers[self.method]
            checks.check_discovery(explainer, self.discovery)
            data = checks.data_setup(explainer, read_model_data(model, processing_class), self.normalisation, False)
            self._explainers, self.monitor.prepared = (model, explainers, data), None
        return self._explainers[1], self._explainers[2]

    def _prepare(self, model: nn.Module, processing_class: Any | None, dataset: Dataset | None) -> Prepared:
        """What the epoch ends need: :meth:`_model_setup`, the probes (drawn from ``dataset`` once) and the
        discovery probes, checked against the model; built once per training run, again for another model."""
        explainers, data = self._model_setup(model, processing_class)
        if self.monitor.ready:
            return required(self.monitor.prepared, "the monitor's prepare")
        return self.monitor.prepare(explainers, data, dataset)

    def state(self) -> dict[str, Any]:
        """What ``transformers`` keeps of this callback in a checkpoint's ``trainer_state.json``
        (``ExportableState``): the settings that rebuild it, and the monitor's state as JSON values."""
        groups: dict[str, Any] = {"probes": self.probes, "methods": self.methods, "scores": self.scores}
        groups["render"] = self.render
        args: dict[str, Any] = {name: dataclasses.asdict(group) for name, group in groups.items()}
        args["discovery"] = None if self.discovery is None else dataclasses.asdict(self.discovery)
        args["normalisation"] = None if self.normalisation is None else dataclasses.asdict(self.normalisation)
        args.update(every_n_epochs=self.every_n_epochs, log_prefix=self.log_prefix, progress=self.progress)
        return {"args": json_state(args), "attributes": {"resume_state": json_state(self.monitor.state_dict())}}


def _saved_state(state: TrainerState, name: str) -> dict[str, Any] | None:
    """The monitor state a checkpoint's ``trainer_state.json`` holds for the callback class ``name``
    (the first one of that class), or None."""
    stored = state.stateful_callbacks  # a dict once read from a checkpoint's JSON
    saved = stored.get(name) if isinstance(stored, dict) else None
    first = saved[0] if isinstance(saved, list) and saved else saved
    return first.get("attributes", {}).get("resume_state") if isinstance(first, dict) else None


def _dataset(loader: DataLoader | None) -> Dataset | None:
    """The dataset of a Trainer's dataloader (accelerate's keep the original's)."""
    return getattr(loader, "dataset", None)
