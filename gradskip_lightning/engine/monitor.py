"""EpochMonitor: the epoch work a door holds, from its arguments to its checkpoint state.

Both doors (:class:`~gradskip_lightning.GradSkipCallback` for a Lightning ``Trainer``,
:class:`~gradskip_lightning.hf_trainer.GradSkipTrainerCallback` for a ``transformers.Trainer``) hold
one: it takes the front door's settings, draws the probes (and the discovery probes) once, builds what
the epoch ends need, runs them through a :class:`~.host.Host`, and keeps what lives over a fit (drift
references, the schedule, discovery peaks) in :meth:`state_dict`. A door adds only what its training
loop needs: when to call, what the model and data are, where outputs go; what it shows of its settings
and of the last epoch end it reads from its monitor (:class:`MonitoredSettings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import Dataset

from gradskip_lightning.core.explanation import ModelExplainer
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.core.validation import required
from gradskip_lightning.engine.discovery.stage import Discovered, DiscoveryStage
from gradskip_lightning.engine.epoch import EpochRunner, GivenGroups, Prepared, RunSettings
from gradskip_lightning.engine.host import Host
from gradskip_lightning.engine.output.sinks import Sink
from gradskip_lightning.engine.probes import ProbeImages, ProbeSet, ProbeSource
from gradskip_lightning.engine.scoring.schedule import EpochSchedule
from gradskip_lightning.engine.settings import (
    MethodSettings,
    ProbeSettings,
    RenderSettings,
    ScoreSettings,
    check_log_prefix,
    positive,
)
from gradskip_lightning.engine.setup import DataSetup, prepared_sheet

__all__ = ["EpochMonitor", "MonitoredSettings", "json_state", "state_from_json"]


class EpochMonitor:
    """The probes, the schedule and the epoch runner of one door, and their checkpoint state.

    Args:
        probe_images: explicit probes; None draws ``probes.num_probes`` from the data (:meth:`prepare`).
        groups: the settings groups (probes, methods, scores, render, discovery; None: defaults, discovery off;
            a mapping of a group's fields builds it).
        every_n_epochs, log_prefix, progress, normalisation: the front door's options of the same names, checked
            here.
    """

    def __init__(
        self,
        probe_images: ProbeImages | None,
        groups: GivenGroups,
        every_n_epochs: int,
        log_prefix: str,
        progress: bool,
        normalisation: Normalisation | Mapping[str, Any] | None = None,
    ) -> None:
        positive("every_n_epochs", every_n_epochs)
        check_log_prefix(log_prefix)
        self.settings = RunSettings.given(groups, log_prefix, progress, normalisation)
        self.source: ProbeSource = self.settings.probe_source(probe_images)
        self.schedule = EpochSchedule(every_n_epochs)
        self.runner = EpochRunner(self.settings)
        self.prepared: Prepared | None = None
        self._resumed: dict[str, Any] | None = None  # the checkpoint's probe state, checked once probes are known

    @property
    def probes(self) -> ProbeSet | None:
        """The explained probes, once drawn (or given)."""
        return self.source.probes

    @property
    def ready(self) -> bool:
        """Whether :meth:`prepare` has built what the epoch ends need, discovery probes included."""
        return self.prepared is not None and self.runner.discoverer.drawn

    def prepare(
        self,
        explainers: dict[str, ModelExplainer],
        data: DataSetup,
        dataset: Dataset | None,
        sinks: list[Sink] | None = None,
    ) -> Prepared:
        """Draw the probes from ``dataset`` once (given probes: none drawn), and the discovery probes of a
        classifier; check them against the model and build what the epoch ends need."""
        explainer = explainers[self.settings.methods.method]
        probes = self.source.probes or self.source.draw(required(dataset, "a dataset to draw the probes from"))
        if dataset is not None and explainer.task == "classification":
            self.runner.discoverer.draw(dataset, explainer)
        sheet = prepared_sheet(explainer, probes, data, self.settings.scores, self.settings.render)
        self.prepared = Prepared(explainers, probes, sheet, data, sinks if sinks is not None else [])
        self._check_resumed()
        return self.prepared

    def run(self, host: Host, module: nn.Module, epoch: int) -> None:
        """One epoch end on ``module`` (every rank): :meth:`.EpochRunner.run`, after :meth:`prepare`."""
        if host.fitting:
            self.schedule.last_explained = epoch
        self.runner.run(host, module, epoch, required(self.prepared, "the monitor's prepare"))

    def reset(self) -> None:
        """A new fit: draw the probes again, forget drift, discovery, the schedule and the budget."""
        self.source.reset()
        self.runner.reset()
        self.schedule.reset()
        self.prepared = None
        self._resumed = None

    @property
    def discovered(self) -> Discovered | None:
        """The discovery stage's last successful run of this fit (None before one, or with the stage off)."""
        return self.runner.discovered

    def state_dict(self) -> dict[str, Any]:
        """What lives over a fit: the probes' ids and fingerprint, drift references, the last explained
        epoch, discovery's probes and peaks (tensors and plain values: ``weights_only`` loads it)."""
        probes = self.source.probes
        return {
            "probe_ids": None if probes is None else probes.ids.clone(),
            "probe_fingerprint": None if probes is None else probes.fingerprint(),
            "drift": self.runner.drift.state_dict(),
            "last_explained": self.schedule.last_explained,
            "discovery": self.runner.discoverer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; probes drawn before are read again by their ids from the dataset they
        were drawn from, and drift restarts if the probes changed (:meth:`.DriftTracker.resume`)."""
        self.runner.drift.load_state_dict(state["drift"])
        self.schedule.last_explained = state["last_explained"]
        self._resumed = {"fingerprint": state.get("probe_fingerprint")}
        before = self.source.probes
        self.source.restore(state["probe_ids"])
        self.runner.discoverer.load_state_dict(state.get("discovery"))
        prepared = self.prepared
        if self.source.probes is not before and self.source.probes is not None and prepared is not None:
            self.prepare(prepared.explainers, prepared.data, self.source.dataset, prepared.sinks)
        self._check_resumed()

    def _check_resumed(self) -> None:
        """Once the probes are known after a resume: drift restarts if they changed."""
        if self._resumed is not None and self.source.probes is not None:
            self.runner.drift.resume(self._resumed["fingerprint"], self.source.probes)
            self._resumed = None


class MonitoredSettings:
    """What a door (a callback holding an :class:`EpochMonitor` as ``monitor``) shows of its settings and of
    the last epoch end, read from the monitor: one place for every door, nothing copied."""

    monitor: EpochMonitor

    @property
    def probes(self) -> ProbeSettings:
        """Which probes are explained and how many at once."""
        return self.monitor.settings.probes

    @property
    def methods(self) -> MethodSettings:
        """The explaining and compared methods."""
        return self.monitor.settings.methods

    @property
    def scores(self) -> ScoreSettings:
        """How maps are scored."""
        return self.monitor.settings.scores

    @property
    def render(self) -> RenderSettings:
        """How overlays look."""
        return self.monitor.settings.render

    @property
    def discovery(self) -> DiscoveryStage | None:
        """The shortcut discovery stage; None: off."""
        return self.monitor.settings.discovery

    @property
    def normalisation(self) -> Normalisation | None:
        """The images' normalisation (None: the datamodule's ``mean``/``std``, else none)."""
        return self.monitor.settings.normalisation

    @property
    def log_prefix(self) -> str:
        """The door's name in every key (``<section>/<log_prefix><name>``) and its folder."""
        return self.monitor.settings.log_prefix

    @property
    def every_n_epochs(self) -> int:
        """Every how many training epochs the probes are explained."""
        return self.monitor.schedule.every_n_epochs

    @property
    def progress(self) -> bool:
        """Whether a progress bar shows once an explanation has run 2 s."""
        return self.monitor.settings.progress

    @property
    def method(self) -> str:
        """The explained method's name."""
        return self.methods.method

    @property
    def logged_keys(self) -> frozenset[str]:
        """The keys the last explanation made monitorable (a score the time budget left out of that epoch
        keeps its older value where monitored values are kept, and is not in it)."""
        return self.monitor.runner.logged_keys

    @property
    def epoch_seconds(self) -> dict[str, float]:
        """Wall seconds of the last epoch end's parts (:attr:`.EpochRunner.seconds`)."""
        return dict(self.monitor.runner.seconds)

    @property
    def discovered(self) -> Discovered | None:
        """The discovery stage's last successful run of this fit (what it flagged, the discovery probes); None
        before one, or with the stage off. A :class:`~gradskip_lightning.ShortcutCorrection` acts on it."""
        return self.monitor.discovered


def json_state(value: Any) -> Any:
    """``value`` (a state dict of tensors and plain values) as JSON values: a tensor becomes
    ``{"tensor": nested list, "dtype": name}``; float32 and int64 values round-trip exactly.

    >>> json_state({"ids": torch.tensor([3, 1]), "peak": [0.5]})
    {'ids': {'tensor': [3, 1], 'dtype': 'int64'}, 'peak': [0.5]}
    """
    if isinstance(value, Tensor):
        return {"tensor": value.detach().cpu().tolist(), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, dict):
        return {str(k): json_state(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_state(v) for v in value]
    return value


def state_from_json(value: Any) -> Any:
    """The inverse of :func:`json_state`.

    >>> state_from_json(json_state({"ids": torch.tensor([3, 1])}))["ids"]
    tensor([3, 1])
    """
    if isinstance(value, dict):
        if set(value) == {"tensor", "dtype"}:
            return torch.tensor(value["tensor"], dtype=getattr(torch, value["dtype"]))
        return {k: state_from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [state_from_json(v) for v in value]
    return value
