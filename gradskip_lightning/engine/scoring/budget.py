"""The callback's time budget: its own time at epoch ends against the training time.

With ``max_overhead`` (e.g. 0.05: 5 % of the training time) the callback measures each training
epoch (first batch start to validation start, or to the epoch end without validation) and its own
time at the epoch end (explaining, scoring, discovery, rendering, logging, files). When over budget
it thins the work, cheapest loss first: the compared methods are explained every n-th explained
epoch, then the explained method's perturbation scores (insertion/deletion, the violation test) are
computed every m-th explained epoch, and only when even n = m = :data:`MAX_STRIDE` does not fit is
the discovery stage run at every d-th of its epochs (the scores are a trend that a missed point barely
changes; discovery is the alarm, and an alarm an epoch late costs an epoch of learning the shortcut);
the explained method's maps, drift and overlays stay every epoch. A thinned part runs on an epoch of
its own where it can (the most valuable due part first, :data:`PARTS` reversed), so no epoch end
carries them all.

The strides fit one training epoch, planned from the second epoch end on: the first one's costs overstate the
next (first calls; a young model, whose discovery tests go further: the main config's first epoch end took twice
the discovery and three times the fixed seconds of the next), and a stride planned from them would skip the
alarm at the second epoch end, where a shortcut is often first learned. The fit's account keeps the whole: the
parts run in order of value (the explained method, discovery, then the compared methods), and while the fit's
callback time would pass ``max_overhead`` of its training time, the scores due at an epoch end wait for a later
one (planned before it, from the slowest of their last three costs; nothing waits before its costs are known),
and so do the compared methods (decided once the explained method and discovery have run, from this epoch end's
seconds so far: at the first one, their cost is predicted as the explained method's maps and scores each). Discovery
never waits. It says so once in the log and every explained epoch in ``<prefix>budget/...`` scalars, never silently.
``trainer.validate()`` always does everything.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from lightning.pytorch.utilities import rank_zero_warn

from gradskip_lightning.engine.keys import key

__all__ = ["MAX_STRIDE", "PARTS", "Part", "Plan", "TimeBudget"]

#: The most epochs apart the budget puts a part of the work.
MAX_STRIDE = 16

#: A part of the epoch end's work that the budget can put on fewer epochs.
Part = Literal["compared", "scores", "discovery"]
#: The parts, from the least valuable: when several thinned parts are due, the last runs first.
PARTS: tuple[Part, ...] = ("compared", "scores", "discovery")


@dataclass(frozen=True)
class Plan:
    """What one epoch end computes.

    Attributes:
        methods: the methods explained (the explained one first).
        scored: the methods whose perturbation scores are computed.
        discovery: whether the discovery stage runs.
        discovery_due: whether its own schedule had it at this epoch (its stride counts these epochs).
    """

    methods: tuple[str, ...]
    scored: frozenset[str]
    discovery: bool = False
    discovery_due: bool = False


class TimeBudget:
    """Plans each epoch's work so the callback's time stays at or under ``max_overhead`` of the training time.

    Args:
        max_overhead: the callback's time as a fraction of the training time, at each epoch end and over the
            fit (None: no budget, everything every epoch).
        method: the explained method; compared: the comparison methods.
        discovery_every: the discovery stage's own period in explained epochs (None: the stage is off).

    The costs are the last measured seconds of each part (:meth:`record`): ``fixed`` (the explained
    method's maps, rendering, logging, files), ``scores`` (its perturbation scores), ``compared``
    (the compared methods' maps and scores) and ``discovery``. The strides (:attr:`every`) fit
    fixed + scores / m + compared / n + discovery / (discovery_every x d) <= max_overhead x training
    seconds, the most valuable part's stride the smallest that fits: d first, then m, then n. Over the fit,
    a due scores part waits while the callback's seconds so far plus this epoch end's planned ones would
    exceed max_overhead x the training seconds so far (:meth:`plan`), and due compared methods wait while
    the seconds so far, this epoch end's included, plus theirs would (:meth:`admit_compared`).
    """

    def __init__(
        self, max_overhead: float | None, method: str, compared: Sequence[str], discovery_every: int | None = None
    ) -> None:
        if max_overhead is not None and not 0 < max_overhead:
            raise ValueError(f"max_overhead must be a fraction > 0 of the training epoch or None, got {max_overhead}")
        self.max_overhead = max_overhead
        self.method, self.compared, self.discovery_every = method, tuple(compared), discovery_every
        #: The parts this callback has: the compared methods if any, discovery if on, the scores always.
        self.parts: tuple[Part, ...] = tuple(
            part
            for part in PARTS
            if (part != "compared" or self.compared) and (part != "discovery" or discovery_every is not None)
        )
        self.reset()

    def reset(self) -> None:
        """Forget the measurements and strides (a new fit)."""
        self.every: dict[Part, int] = dict.fromkeys(self.parts, 1)
        self.overhead = float("nan")  # the last explained epoch's callback seconds / training seconds
        self._train: list[float] = []
        self._fit_train = 0.0  # the fit's training seconds, every epoch
        self._fit_spent = 0.0  # the fit's callback seconds, every epoch end it planned
        self._epoch_start: float | None = None
        self._costs: dict[str, list[float]] = {}  # each part's last three seconds, the last last
        # epochs since each part last ran (discovery: its own epochs): every part is due at once
        self._since: dict[Part, int] = dict.fromkeys(self.parts, MAX_STRIDE)
        self._said = False
        self._said_fit = False
        self._ends = 0  # epoch ends recorded in this fit

    @property
    def compared_every(self) -> int:
        """Every how many explained epochs the compared methods are explained."""
        return self.every.get("compared", 1)

    @property
    def scores_every(self) -> int:
        """Every how many explained epochs the explained method's perturbation scores are computed."""
        return self.every["scores"]

    # ------------------------------------------------------------------ training time

    def train_started(self) -> None:
        """The training epoch starts (``on_train_epoch_start``)."""
        self._epoch_start = time.perf_counter()

    def train_ended(self) -> None:
        """The training epoch's batches are done (validation starts, or the epoch end); once per epoch."""
        if self._epoch_start is not None:
            seconds = time.perf_counter() - self._epoch_start
            self._train = [*self._train[-2:], seconds]
            self._fit_train += seconds
            self._epoch_start = None

    @property
    def train_seconds(self) -> float:
        """Median of the last three training epochs' seconds (NaN before the first)."""
        return statistics.median(self._train) if self._train else float("nan")

    # ------------------------------------------------------------------ plan and record

    def plan(self, fitting: bool, discovery_due: bool = False) -> Plan:
        """The work of this epoch end: everything without a budget, outside fit, or before costs are known.

        ``discovery_due``: the discovery stage's own schedule has it at this epoch."""
        every = (self.method, *self.compared)
        if self.max_overhead is None or not fitting:
            return Plan(every, frozenset(every), discovery_due, discovery_due)
        offered = [p for p in self.parts if p != "discovery" or discovery_due]
        due = [p for p in offered if self._since[p] + 1 >= self.every[p]]
        thinned = [p for p in due if self.every[p] > 1]
        runs = {p for p in due if self.every[p] == 1} | set(thinned[-1:])  # one thinned part: the most valuable
        runs = self._within_fit(runs)
        compared = self.compared if "compared" in runs else ()
        scored = {*compared, *((self.method,) if "scores" in runs else ())}
        return Plan((self.method, *compared), frozenset(scored), "discovery" in runs, discovery_due)

    def _within_fit(self, runs: set[Part]) -> set[Part]:
        """``runs`` less its scores part while the fit's callback seconds with it would pass max_overhead x the
        fit's training seconds, each part counted at the most of its last three costs (the compared methods are
        decided later, :meth:`admit_compared`; discovery always stays; nothing is dropped before the costs are
        known)."""
        if "scores" not in runs or not self._fit_train > 0 or any(p not in self._costs for p in ("fixed", *self.parts)):
            return runs
        assert self.max_overhead is not None
        slowest = {part: max(seconds) for part, seconds in self._costs.items()}  # a slower epoch end does not tip it
        allowance = self.max_overhead * self._fit_train - self._fit_spent - slowest["fixed"]
        if sum(slowest[p] for p in runs - {"compared"}) <= allowance:
            return runs
        self._say_waiting("the scores")
        return runs - {"scores"}

    def admit_compared(self, plan: Plan, fitting: bool, spent: float, seconds: Mapping[str, float]) -> Plan:
        """``plan``, less its compared methods while the fit's account cannot hold them, decided once this epoch
        end's explained method and discovery have run (``spent`` seconds so far, ``seconds`` its parts as in
        :meth:`record`).

        The compared methods cost the most of their last three runs; before a first run, the explained method's
        maps and scores on this epoch end, once per compared method (the same probes and scores; a compared
        method's maps cost no more than GradSkip's), which also stands for their cost in the strides until they
        run. The report that follows costs the most of its last three.
        """
        if self.max_overhead is None or not fitting or not self._fit_train > 0 or len(plan.methods) < 2:
            return plan
        if "compared" not in self._costs:  # the prediction stands for their cost (the strides' too) until they run
            own = seconds.get(f"{self.method}/scores", max(self._costs.get("scores", [0.0])))
            self._costs["compared"] = [len(self.compared) * (seconds.get(f"{self.method}/maps", 0.0) + own)]
        cost = max(self._costs["compared"])
        report = max(self._costs.get("report", [0.0]))
        if self._fit_spent + spent + cost + report <= self.max_overhead * self._fit_train:
            return plan
        self._say_waiting(f"the compared methods {list(self.compared)}")
        return Plan((self.method,), plan.scored - set(self.compared), plan.discovery, plan.discovery_due)

    def _say_waiting(self, what: str) -> None:
        """Say once in the fit that a part waits for the fit's account."""
        if self._said_fit:
            return
        self._said_fit = True
        rank_zero_warn(
            f"GradSkipCallback: with {what} at this epoch end the fit's callback time would pass "
            f"max_overhead={self.max_overhead} of its training time (so far {self._fit_spent:.2f} s of "
            f"{self._fit_train:.1f} s): they wait for a later epoch end while it would (logged as "
            "budget/fit_overhead)"
        )

    def record(self, plan: Plan, total: float, seconds: dict[str, float]) -> None:
        """The epoch end's ``total`` seconds and its parts' (:attr:`~.compute.EpochWork.seconds`:
        ``"<method>/maps"``, ``"<method>/scores"``, ``"discovery"``); re-plan the strides and say so once."""
        if self.max_overhead is None:
            return
        self._fit_spent += total
        ran: dict[Part, bool] = {
            "compared": any(name in plan.methods for name in self.compared),
            "discovery": plan.discovery,
            "scores": self.method in plan.scored,
        }
        parts: dict[str, float] = {}
        if ran["compared"]:
            parts["compared"] = sum(
                seconds.get(f"{name}/maps", 0.0) + seconds.get(f"{name}/scores", 0.0) for name in self.compared
            )
        if ran["discovery"]:
            parts["discovery"] = seconds.get("discovery", 0.0)
        if ran["scores"]:
            parts["scores"] = seconds.get(f"{self.method}/scores", 0.0)
        for part in self.parts:
            if ran[part]:
                self._since[part] = 0
            elif part != "discovery" or plan.discovery_due:
                self._since[part] += 1
        parts["fixed"] = max(0.0, total - sum(parts.values()))  # maps, rendering, logging, files
        parts["report"] = seconds.get("report", 0.0)  # within fixed: what follows the compared methods
        for name, cost in parts.items():
            self._costs[name] = [*self._costs.get(name, [])[-2:], cost]
        train = self.train_seconds
        self.overhead = total / train if train > 0 else float("nan")
        self._ends += 1
        if self._ends < 2 or not train > 0 or any(part not in self._costs for part in self.parts):
            return  # the first epoch end's costs (first calls, a young model) overstate the next: fit's account only
        self.every = self._strides(self.max_overhead * train)
        if any(stride > 1 for stride in self.every.values()) and not self._said:
            self._said = True
            full = self._costs["fixed"][-1] + sum(self._per_epoch(part, 1) for part in self.parts)
            rank_zero_warn(
                f"GradSkipCallback: an epoch end with every part would take {full:.2f} s, {100 * full / train:.1f} % "
                f"of the {train:.1f} s training epoch, over max_overhead={self.max_overhead}: from now on "
                f"{self._described()} "
                "(logged as budget/...; raise max_overhead or set it to None to do everything every epoch)"
            )

    def _per_epoch(self, part: Part, stride: int) -> float:
        """The seconds per explained epoch of ``part`` run every ``stride``-th time it is offered."""
        own = (self.discovery_every or 1) if part == "discovery" else 1
        return self._costs[part][-1] / (own * stride)

    def _strides(self, allowance: float) -> dict[Part, int]:
        """The strides (each at most :data:`MAX_STRIDE`) that fit ``allowance`` seconds, the most valuable part's
        (:data:`PARTS`, last) the smallest, then the next's: the compared methods are thinned before the scores,
        the scores before discovery; all at most when even that does not fit."""
        ranges = [range(1, MAX_STRIDE + 1)] * len(self.parts)
        for strides in itertools.product(*ranges[::-1]):  # the most valuable part varies slowest
            every = dict(zip(self.parts, strides[::-1], strict=True))
            if self._costs["fixed"][-1] + sum(self._per_epoch(p, s) for p, s in every.items()) <= allowance:
                return every
        return dict.fromkeys(self.parts, MAX_STRIDE)

    def _described(self) -> str:
        what = {
            "compared": f"the compared methods {list(self.compared)} are explained every {{}} explained epoch(s)",
            "discovery": "the discovery stage runs at every {} of its epochs",
            "scores": f"{self.method}'s perturbation scores are computed every {{}} explained epoch(s)",
        }
        return ", ".join(what[part].format(self.every[part]) for part in self.parts)

    def scalars(self, prefix: str) -> dict[str, float]:
        """The budget's logged scalars (none without a budget): the last epoch end's overhead, the fit's so far,
        the strides."""
        if self.max_overhead is None:
            return {}
        fit = self._fit_spent / self._fit_train if self._fit_train > 0 else float("nan")
        overheads = {"budget/overhead": self.overhead, "budget/fit_overhead": fit}
        strides = {f"budget/{part}_every": float(self.every[part]) for part in self.parts}
        return {key(None, prefix, name): value for name, value in {**overheads, **strides}.items()}
