"""GradSkipCallback: explain a fixed probe set at epoch ends and log maps, head importance and scores.

The front door, the hooks and the state. What the arguments mean is in :mod:`.settings`, what setup
checks in :mod:`.setup`, the probes in :mod:`.probes`, and one epoch end in :mod:`.epoch`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from gradskip_lightning.callbacks.averaging import Hook
from gradskip_lightning.callbacks.host import LightningHost
from gradskip_lightning.callbacks.sinks import make_sinks
from gradskip_lightning.callbacks.trainer_setup import check_precision, loader_dataset
from gradskip_lightning.core.explanation import ModelExplainer
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.core.validation import required
from gradskip_lightning.engine import setup as checks
from gradskip_lightning.engine.discovery.stage import DiscoveryStage
from gradskip_lightning.engine.monitor import EpochMonitor, MonitoredSettings
from gradskip_lightning.engine.output.sinks import Sink, finish_sinks
from gradskip_lightning.engine.probes import ProbeImages
from gradskip_lightning.engine.settings import (
    MethodSettings,
    ProbeSettings,
    RenderSettings,
    ScoreSettings,
    check_arguments,
)
from gradskip_lightning.shortcuts.tags import SpuriousTag

__all__ = ["GradSkipCallback"]


class GradSkipCallback(MonitoredSettings, Callback):
    r"""Explain a fixed set of probe images at epoch ends and log what the model looks at.

    Every ``every_n_epochs`` epochs (at the end of validation, or of the training epoch without
    it, and once at the end of fit) the probes are explained with ``methods.method`` (and each of
    ``methods.compare``), scored, and logged as one row at the step of Lightning's epoch metrics;
    every scalar is also monitorable (``EarlyStopping``, ``ModelCheckpoint``). A failing epoch warns
    and is skipped; training does not see the callback.

    Args:
        probe_images: explicit probes, ``ProbeImages(images, labels, masks=None)``: images (P, C, H, W) float,
            labels (P,) or multi-hot (P, C),
            masks (P, H, W) of the ``object`` region or a dict ``{name: (P, H, W)}`` of named regions, each scored
            by mass and rank accuracy (``object`` also feeds the Pointing Game); None draws ``probes.num_probes``
            from the datamodule's validation set.
        probes: which probes and how many at once (:class:`~.settings.ProbeSettings`); None: the defaults.
        methods: the explaining and compared methods (:class:`~.settings.MethodSettings`); None: GradSkip alone.
        scores: how maps are scored (:class:`~.settings.ScoreSettings`); None: the defaults.
        render: how overlays look (:class:`~.settings.RenderSettings`); None: the defaults.
        normalisation: the images' :class:`~gradskip_lightning.Normalisation` (``inputs = (pixels - mean) / std``,
            or in YAML ``{mean: [...], std: [...]}``), which takes them back to pixels for the pictures, the
            transplant test's tag and the discovery stage's image properties. None: the datamodule's ``mean`` and
            ``std`` attributes; without them each picture is min-max scaled, image properties use each channel's
            range over the probes, and ``transplant`` is refused.
        discovery: the shortcut discovery stage (:class:`~gradskip_lightning.DiscoveryStage`); None: off (without a
            time budget it runs at every explained epoch: about 5.5 s on the main config's model on two idle CPU
            cores, against a 20-80 s training epoch).
        every_n_epochs: explain every n-th epoch, at the end of validation (of the training epoch without
            validation), and once at the end of fit.
        log_prefix: the callback's name in every key (``<section>/<log_prefix><name>``) and its folder; two
            callbacks need different prefixes (also as folder names: ``gs/a/`` and ``gs_a/`` collide).
        transplant: the live transplant test: a ``SpuriousTag`` (``{target_class: 0, position: [0, 0]}`` in
            YAML), True (the datamodule's ``tag``) or False.
        backbone: the module path (``pl_module.get_submodule``: ``"student"``, ``"nets.student"``) of the
            network to explain when the LightningModule holds several (a teacher and a student, an EMA
            copy); that submodule's forward must return the network's logits. None: the LightningModule.
        progress: a progress bar (on a terminal, counting probes) once an explanation has run 2 s.

    Example::

        GradSkipCallback(probes=ProbeSettings(num_probes=32), methods=MethodSettings(compare=["rollout"]))
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
        transplant: SpuriousTag | bool = False,
        backbone: str | None = None,
        progress: bool = True,
    ) -> None:
        super().__init__()
        check_arguments(transplant, backbone)
        groups = (probes, methods, scores, render, discovery)
        self.monitor = EpochMonitor(probe_images, groups, every_n_epochs, log_prefix, progress, normalisation)
        self.transplant, self.backbone = transplant, backbone
        self._pending: tuple[dict[str, ModelExplainer], checks.DataSetup, list[Sink]] | None = None  # setup's parts
        self._fit_trainer: Trainer | None = None
        self._sinks_for: Trainer | None = None
        self._said_mid_epoch = False

    @property
    @override
    def state_key(self) -> str:
        return self._generate_state_key(method=self.method, log_prefix=self.log_prefix)  # Lightning's documented helper

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        callbacks: list[Callback] = trainer.callbacks  # type: ignore[attr-defined]  # set by the Trainer
        others = [c.log_prefix for c in callbacks if c is not self and isinstance(c, GradSkipCallback)]
        checks.refuse_shared_folder(self.log_prefix, others)
        check_precision(trainer)
        names = self.monitor.settings.explained
        explainers = checks.explainers_for(pl_module, names, dict(self.methods.options), self.backbone)
        if trainer.state.fn == TrainerFn.FITTING:
            if self._fit_trainer is not None and self._fit_trainer is not trainer:
                self._reset()
            self._fit_trainer = trainer
        datamodule = getattr(trainer, "datamodule", None)
        data = checks.data_setup(explainers[self.method], datamodule, self.normalisation, self.transplant)
        prepared = self.monitor.prepared
        sinks = prepared.sinks if prepared is not None and self._sinks_for is trainer else []
        log_dir = trainer.log_dir  # on every rank: it broadcasts
        if trainer.is_global_zero and self._sinks_for is not trainer:  # once per Trainer (fit, then validate)
            out_dir = Path(log_dir or trainer.default_root_dir) / checks.folder(self.log_prefix)
            sinks, self._sinks_for = make_sinks(trainer, self.log_prefix, out_dir), trainer
        checks.check_discovery(explainers[self.method], self.discovery)
        self._pending = (explainers, data, sinks)
        dataset = getattr(datamodule, "val_dataset", None) or getattr(datamodule, "train_dataset", None)
        if dataset is not None or self.monitor.probes is not None:
            self._prepare(dataset)

    def _prepare(self, dataset: Any | None) -> None:
        """Draw the probes (and the discovery probes) from ``dataset`` once, check them against the
        model and build what the epoch ends need (before any epoch)."""
        explainers, data, sinks = required(self._pending, "the callback's setup")
        self.monitor.prepare(explainers, data, dataset, sinks)

    def _reset(self) -> None:
        """A new fit on another Trainer: draw probes again, forget drift and the schedule."""
        self.monitor.reset()

    def _ensure_probes(self, trainer: Trainer) -> None:
        """Draw the probes from the Trainer's dataloaders when setup had no datamodule dataset."""
        if not self.monitor.ready:
            self._prepare(loader_dataset(trainer))

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._ensure_probes(trainer)

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.monitor.runner.budget.train_started()
        self.monitor.runner.logged_keys = frozenset()

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.monitor.runner.budget.train_ended()
        self._ensure_probes(trainer)

    @override
    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        epoch, fitting = trainer.current_epoch, trainer.state.fn == TrainerFn.FITTING
        if fitting and self._mid_epoch(trainer):
            return
        if trainer.state.fn == TrainerFn.VALIDATING or (fitting and self.monitor.schedule.due(epoch)):
            self._explain(trainer, pl_module, epoch, "validation")

    def _mid_epoch(self, trainer: Trainer) -> bool:
        """Whether this fit validation runs before the epoch's last batch (``val_check_interval`` < 1):
        the epoch end explains instead (the weights the epoch ends with); said once."""
        batches = trainer.num_training_batches
        if math.isinf(batches) or trainer.fit_loop.epoch_loop.batch_idx + 1 >= batches:
            return False
        if not self._said_mid_epoch:
            self._said_mid_epoch = True
            rank_zero_warn(
                f"GradSkipCallback: with val_check_interval={trainer.val_check_interval!r} validation also runs within "
                "epochs; the callback explains at the end of each epoch only (the weights the epoch ends with), "
                "not at the validations before it"
            )
        return True

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.monitor.schedule.last_trained = trainer.current_epoch
        self.monitor.runner.budget.train_ended()
        if self.monitor.schedule.due(trainer.current_epoch):
            self._explain(trainer, pl_module, trainer.current_epoch, "train")

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        epoch = self.monitor.schedule.left_at_fit_end()
        if epoch is not None:
            self._explain(trainer, pl_module, epoch, "fit_end")
        finish_sinks(self.monitor.prepared.sinks if self.monitor.prepared is not None else [])

    def _explain(self, trainer: Trainer, pl_module: LightningModule, epoch: int, hook: Hook) -> None:
        self._ensure_probes(trainer)
        self.monitor.run(LightningHost(trainer, pl_module, self, hook), pl_module, epoch)

    @override
    def state_dict(self) -> dict[str, Any]:
        return self.monitor.state_dict()

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.monitor.load_state_dict(state_dict)
