"""One epoch end of the callback: explain, score, discover, make the scalars monitorable, report.

:class:`EpochRunner` holds what lives over a fit (drift, the time budget, the discovery stage, the
keys made monitorable) and runs one epoch end (:meth:`EpochRunner.run`) with what setup prepared
(:class:`Prepared`), in the training loop its :class:`~.host.Host` stands for (Lightning's or a
``transformers.Trainer``'s). The parts run in order of value: the explained method's maps and scores,
the discovery stage, then the compared methods, which the time budget decides last, knowing this epoch
end's seconds so far (:meth:`~.budget.TimeBudget.admit_compared`). Each stage fails alone: a failed
explanation skips the epoch (every monitored score NaN, ``<prefix>skipped`` = 1); a failed discovery
stage leaves the rest of the epoch logged, its own keys NaN (the fit's peak suspicion stays) and
``discovery/<prefix>skipped`` = 1. Every rank runs the same steps in the same order (the gathers, the
discovery summary and the budget's decisions are collectives); only rank zero reports.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lightning.pytorch.utilities import rank_zero_warn
from torch import nn

from gradskip_lightning.core.explanation import ModelExplainer
from gradskip_lightning.core.normalisation import Normalisation
from gradskip_lightning.core.validation import required
from gradskip_lightning.engine.discovery.images import alert_text
from gradskip_lightning.engine.discovery.properties import property_alert_text, property_scalars
from gradskip_lightning.engine.discovery.stage import (
    Discovered,
    Discoverer,
    DiscoveryStage,
    StageRun,
    discovery_scalars,
)
from gradskip_lightning.engine.host import Host
from gradskip_lightning.engine.keys import key
from gradskip_lightning.engine.output.report import EpochOutcome, ProbeSheet, epoch_report, epoch_scalars
from gradskip_lightning.engine.output.sinks import Sink, log_to_sinks
from gradskip_lightning.engine.probes import ProbeImages, ProbeSet, ProbeSource
from gradskip_lightning.engine.scoring.budget import Plan, TimeBudget
from gradskip_lightning.engine.scoring.compute import EpochWork
from gradskip_lightning.engine.scoring.distributed import from_rank_zero
from gradskip_lightning.engine.scoring.drift import DriftTracker
from gradskip_lightning.engine.scoring.isolated import explain_isolated
from gradskip_lightning.engine.scoring.record import ProbeRecord
from gradskip_lightning.engine.settings import MethodSettings, ProbeSettings, RenderSettings, ScoreSettings
from gradskip_lightning.engine.setup import DataSetup
from gradskip_lightning.metrics.perturbation import Activation

__all__ = ["EpochRunner", "GivenGroups", "Prepared", "RunSettings"]


#: The settings groups a front door takes, in :class:`RunSettings`' order (None: the group's defaults).
GivenGroups = tuple[
    ProbeSettings | None, MethodSettings | None, ScoreSettings | None, RenderSettings | None, DiscoveryStage | None
]


Group = TypeVar("Group")


def _group(kind: type[Group], given: Group | Mapping[str, Any] | None) -> Group | None:
    """A settings group given as itself or as a mapping of its fields (None: not given)."""
    return kind(**given) if isinstance(given, Mapping) else given


@dataclass(frozen=True)
class RunSettings:
    """The callback's settings an epoch end reads (``normalisation``: the front door's, None when not given)."""

    probes: ProbeSettings
    methods: MethodSettings
    scores: ScoreSettings
    render: RenderSettings
    discovery: DiscoveryStage | None
    log_prefix: str
    progress: bool
    normalisation: Normalisation | None = None

    @classmethod
    def given(
        cls,
        groups: GivenGroups,
        log_prefix: str,
        progress: bool,
        normalisation: Normalisation | Mapping[str, Any] | None = None,
    ) -> RunSettings:
        """The settings of a front door's arguments: each group given, or its defaults (the discovery stage:
        off). A group (or the ``normalisation``) given as a mapping of its fields (a YAML config's, a
        checkpoint's JSON) is built from it."""
        probes, methods, scores, render, discovery = groups
        probes, methods, scores = (
            _group(ProbeSettings, probes),
            _group(MethodSettings, methods),
            _group(ScoreSettings, scores),
        )
        render, discovery = _group(RenderSettings, render), _group(DiscoveryStage, discovery)
        return cls(
            probes or ProbeSettings(), methods or MethodSettings(), scores or ScoreSettings(),
            render or RenderSettings(), discovery, log_prefix, progress, Normalisation.given(normalisation),
        )  # fmt: skip

    def probe_source(self, probe_images: ProbeImages | None) -> ProbeSource:
        """The probe source of a front door's ``probe_images`` (None: drawn as ``probes`` says)."""
        if probe_images is not None and not isinstance(probe_images, ProbeImages):
            raise TypeError(
                f"probe_images must be a ProbeImages(images, labels, masks), got {type(probe_images).__name__}"
            )
        given = None if probe_images is None else probe_images.probe_set
        return ProbeSource(given, self.probes.num_probes, self.probes.probe_seed, self.probes.item_keys)

    @property
    def explained(self) -> list[str]:
        """The methods explained: the callback's, then the discovery stage's that are others
        (explained for the discovery probes only)."""
        names, stage = list(self.methods.names), self.discovery
        extra = () if stage is None else stage.methods(self.methods.method)
        return names + [name for name in extra if name not in names]


@dataclass
class Prepared:
    """What setup built for the epoch ends: an explainer per method, the probes and their display
    sheet, what the data gave, and (rank zero) the sinks."""

    explainers: dict[str, ModelExplainer]
    probes: ProbeSet
    sheet: ProbeSheet
    data: DataSetup
    sinks: list[Sink] = field(default_factory=list)

    @property
    def activation(self) -> Activation:
        """How logits become probabilities: per label for multi-label models and probes."""
        return "sigmoid" if self.data.multilabel or self.probes.multi_hot is not None else "softmax"


@dataclass
class EpochEnd:
    """One epoch end being run: where (``host``), on which module, with what the budget left in."""

    host: Host
    module: nn.Module
    epoch: int
    plan: Plan
    work: EpochWork
    trained: bool
    started: float = field(default_factory=time.perf_counter)


class EpochRunner:
    """The work of the callback's epoch ends over a fit.

    Attributes:
        drift, budget, discoverer: the state that lives over a fit (in the callback's checkpoint).
        discovered: the discovery stage's last successful run of this fit (None before one).
        logged_keys: the keys the last epoch end made monitorable (its NaN ones included).
        seconds: wall seconds of the last epoch end's parts: ``"<method>/maps"``, ``"<method>/scores"``,
            ``"discovery"``, ``"report"`` (building the report and every sink) and ``"total"``.
    """

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        self.drift = DriftTracker(top_k=settings.scores.drift_top_k)
        self.discoverer = Discoverer(settings.discovery, settings.probes.probe_seed, settings.probes.item_keys)
        own = None if settings.discovery is None else settings.discovery.every_n_epochs
        self.budget = TimeBudget(
            settings.probes.max_overhead, settings.methods.method, settings.methods.compare, discovery_every=own
        )
        self.discovered: Discovered | None = None
        self.logged_keys: frozenset[str] = frozenset()
        self.seconds: dict[str, float] = {}
        self._monitored: dict[str, set[str]] = {}  # prefix -> keys made monitorable

    def reset(self) -> None:
        """A new fit on another Trainer: forget drift, discovery, the budget's costs."""
        self.drift.reset()
        self.discoverer.reset()
        self.discovered = None
        self.budget.reset()

    def prefix(self, trained: bool) -> str:
        """The keys' prefix: the callback's, or ``<prefix>validate/`` outside fit."""
        return self.settings.log_prefix if trained else f"{self.settings.log_prefix}validate/"

    def run(self, host: Host, module: nn.Module, epoch: int, prepared: Prepared) -> None:
        """Explain ``module`` (the one the explainers were built on), score, discover, monitor and (rank
        zero) report one epoch end in ``host``'s training loop; never raises."""
        fitting = host.fitting
        plan = from_rank_zero(self.budget.plan(fitting, self.discoverer.due(epoch, fitting)))  # one plan on every rank
        end = EpochEnd(host, module, epoch, plan, EpochWork(scored=plan.scored), fitting)
        prefix = self.prefix(end.trained)
        outcome = EpochOutcome(epoch, host.step, prefix, end.trained, {}, self.settings.methods.method)
        outcome.started = end.started
        method = self.settings.methods.method
        records, error = self._explain(end, prepared, (method,))
        discovery = self._run_discovery(end, prepared) if error is None else None
        if error is None and len(plan.methods) > 1:  # the compared methods last: the budget knows this end's cost
            spent = time.perf_counter() - end.started
            end.plan = from_rank_zero(self.budget.admit_compared(plan, fitting, spent, end.work.seconds))
            compared, error = self._explain(end, prepared, end.plan.methods[1:])
            records.update(compared)
        if error is None:
            self._score(end, prepared, records, outcome)
            self._discover(end, prepared, outcome, discovery)
        else:
            self._skip(end, outcome, error)
        if host.rank_zero:
            began = time.perf_counter()
            report = epoch_report(outcome, prepared.sheet, self.settings.render, prepared.data.normalisation)
            log_to_sinks(prepared.sinks, report, prepared.sheet)
            end.work.add("report", time.perf_counter() - began)
        total = time.perf_counter() - end.started
        if error is None and end.trained:
            self.budget.record(end.plan, total, end.work.seconds)
        self.seconds = {**end.work.seconds, "total": total}

    # ----------------------------------------------------------------------------- the stages

    def _explain(
        self, end: EpochEnd, prepared: Prepared, methods: tuple[str, ...]
    ) -> tuple[dict[str, ProbeRecord], str | None]:
        """The ``methods``' gathered records, explained on the weights the user keeps (:mod:`.averaging`)."""
        if not methods:
            return {}, None
        try:
            with end.host.explained_weights():
                return explain_isolated(
                    end.module,
                    {name: prepared.explainers[name] for name in methods},
                    prepared.probes,
                    self.settings.scores,
                    batch_size=self.settings.probes.explain_batch_size,
                    transplant=prepared.data.transplant,
                    activation=prepared.activation,
                    progress=self.settings.progress and end.host.rank_zero,
                    work=end.work,
                )
        except Exception as err:  # noqa: BLE001 - the weight swap or the gather; the explanation catches its own
            return {}, f"{type(err).__name__}: {err}"

    def _score(self, end: EpochEnd, prepared: Prepared, records: dict[str, ProbeRecord], outcome: EpochOutcome) -> None:
        """The epoch's scalars from the records (the same on every rank), monitorable."""
        method = self.settings.methods.method
        token_maps = required(records[method].token_maps, "the token maps")
        drift = self.drift.update(token_maps, store=end.trained)
        regions = list(prepared.probes.regions or {})
        scalars = epoch_scalars(records, method, drift, regions, epoch=end.epoch, prefix=outcome.prefix)
        scalars[key(None, outcome.prefix, "skipped")] = 0.0
        scalars.update(self.budget.scalars(outcome.prefix) if end.trained else {})
        outcome.records, outcome.drift = records, drift
        self._monitor(end.host, outcome, scalars, set())

    def _run_discovery(self, end: EpochEnd, prepared: Prepared) -> StageRun | None:
        """The discovery stage's run when the plan has it (None when it has not), timed in ``end.work``."""
        stage = self.settings.discovery
        if not end.plan.discovery or stage is None:
            return None
        explainers = {name: prepared.explainers[name] for name in stage.methods(self.settings.methods.method)}
        began = time.perf_counter()
        run = self.discoverer.run(
            end.module,
            explainers,
            batch_size=self.settings.probes.explain_batch_size,
            activation=prepared.activation,
            normalisation=prepared.data.normalisation,
        )
        end.work.add("discovery", time.perf_counter() - began)
        return run

    def _discover(self, end: EpochEnd, prepared: Prepared, outcome: EpochOutcome, run: StageRun | None) -> None:
        """The discovery stage's ``run`` (None: not planned): its scalars, or (failed) its keys NaN and its
        ``skipped`` flag; alerts for newly flagged classes (rank zero)."""
        if run is None:
            return
        patch_size = prepared.explainers[self.settings.methods.method].patch_size  # every method's: one model
        skipped = key("discovery", outcome.prefix, "skipped")
        if run.found is None:  # its keys NaN, but the fit's peak so far stays
            rank_zero_warn(f"GradSkipCallback: shortcut discovery of epoch {end.epoch} skipped. {run.error}")
            kept = key("discovery", outcome.prefix, "peak_suspicion")
            known = {
                k
                for k in self._monitored.get(outcome.prefix, set())
                if k.startswith("discovery/") and k != skipped and not k.startswith(kept)
            }
            self._monitor(end.host, outcome, {**dict.fromkeys(known, math.nan), skipped: 1.0}, known)
            return
        found = run.found
        if run.degenerate:
            rank_zero_warn(
                f"GradSkipCallback: shortcut discovery of epoch {end.epoch}: the maps of discovery probes "
                f"{run.degenerate} (ids) are all zero or not finite (the model's relevance overflowed or vanished), "
                "so they are left out of their class's summary. Check those images, or the model's numerics"
            )
        degenerate = key("discovery", outcome.prefix, "degenerate_maps")
        peak = self.discoverer.record_peak(found) if end.trained else None
        properties = run.properties
        peaks = self.discoverer.record_property_peaks(properties) if end.trained and properties is not None else None
        self._monitor(
            end.host,
            outcome,
            {
                **discovery_scalars(found, patch_size, outcome.prefix, peak),
                skipped: 0.0,
                degenerate: float(len(run.degenerate)),
                **(property_scalars(properties, outcome.prefix, peaks) if properties is not None else {}),
            },
            set(),
        )
        outcome.discovery = (found, required(self.discoverer.probes, "the discovery probes"))
        if end.trained:
            self.discovered = Discovered(end.epoch, found, outcome.discovery[1], patch_size, run.properties)
        outcome.properties = run.properties
        outcome.scalars[key("discovery", outcome.prefix, "time_s")] = end.work.seconds["discovery"]
        if end.host.rank_zero:
            names = prepared.sheet.class_names
            for label in self.discoverer.newly_flagged(found):
                end.host.alert(*alert_text(found, label, names, patch_size, end.epoch))
            if run.properties is not None:
                for name, label in self.discoverer.newly_flagged_properties(run.properties):
                    end.host.alert(*property_alert_text(run.properties, name, label, names, end.epoch))

    def _skip(self, end: EpochEnd, outcome: EpochOutcome, error: str) -> None:
        """A skipped epoch: one warning, every monitored score NaN, ``<prefix>skipped`` = 1."""
        rank_zero_warn(f"GradSkipCallback: explanation of epoch {end.epoch} skipped, training goes on. {error}")
        monitored = self._monitored.get(outcome.prefix, set())
        scalars = {key(None, outcome.prefix, "epoch"): float(end.epoch), key(None, outcome.prefix, "skipped"): 1.0}
        self._monitor(end.host, outcome, scalars, monitored)
        self.logged_keys = frozenset(monitored | set(scalars))

    # ----------------------------------------------------------------------------- helpers

    def _monitor(self, host: Host, outcome: EpochOutcome, scalars: dict[str, float], stale: set[str]) -> None:
        """Add ``scalars`` to the epoch's, make them monitorable, and set the ``stale`` keys NaN there."""
        first = not outcome.scalars
        outcome.scalars.update(scalars)
        host.monitor(scalars, stale)
        self._monitored.setdefault(outcome.prefix, set()).update(scalars)
        self.logged_keys = frozenset(scalars) if first else self.logged_keys | frozenset(scalars)
