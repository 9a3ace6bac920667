"""The callback's time budget: its own time at epoch ends against the training epoch's.

With ``max_overhead`` (e.g. 0.02: 2 % of the training epoch) the callback measures each training
epoch (first batch start to validation start, or to the epoch end without validation) and its own
time at the epoch end (explaining, scoring, rendering, logging, files). When over budget it thins
the work, cheapest loss first: the compared methods are explained every n-th explained epoch, then
the explained method's perturbation scores (insertion/deletion, the violation test) every m-th;
the explained method's maps, drift and overlays stay every epoch. It says so once in the log and
every explained epoch in ``<prefix>budget/...`` scalars, never silently. ``trainer.validate()``
always does everything.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from lightning.pytorch.utilities import rank_zero_warn

from .keys import key

__all__ = ["Plan", "TimeBudget", "MAX_STRIDE"]

#: The most epochs apart the budget puts a part of the work.
MAX_STRIDE = 16


@dataclass(frozen=True)
class Plan:
    """What one epoch end computes.

    Attributes:
        methods: the methods explained (the explained one first).
        scored: the methods whose perturbation scores are computed.
    """

    methods: tuple[str, ...]
    scored: frozenset[str]


class TimeBudget:
    """Plans each epoch's work so the callback's time stays at or under ``max_overhead`` of the training epoch.

    Args:
        max_overhead: the callback's time at an epoch end as a fraction of the training epoch's
            (None: no budget, everything every epoch).
        method: the explained method; compared: the comparison methods.

    The costs are the last measured seconds of each part (:meth:`record`): ``fixed`` (the explained
    method's maps, rendering, logging, files), ``scores`` (its perturbation scores) and each
    compared method's (maps and scores). The strides are the smallest with
    fixed + scores / m + sum(compared) / n <= max_overhead x training seconds, n raised first.
    """

    def __init__(self, max_overhead: float | None, method: str, compared: Sequence[str]) -> None:
        if max_overhead is not None and not 0 < max_overhead:
            raise ValueError(f"max_overhead must be a fraction > 0 of the training epoch or None, got {max_overhead}")
        self.max_overhead = max_overhead
        self.method, self.compared = method, tuple(compared)
        self.reset()

    def reset(self) -> None:
        """Forget the measurements and strides (a new fit)."""
        self.compared_every = 1
        self.scores_every = 1
        self.overhead = float("nan")  # the last explained epoch's callback seconds / training seconds
        self._train: list[float] = []
        self._epoch_start: float | None = None
        self._costs: dict[str, float] = {}
        self._since_compared = MAX_STRIDE  # explained epochs since each part last ran: due at once
        self._since_scores = MAX_STRIDE
        self._said = False

    # ------------------------------------------------------------------ training time

    def train_started(self) -> None:
        """The training epoch starts (``on_train_epoch_start``)."""
        self._epoch_start = time.perf_counter()

    def train_ended(self) -> None:
        """The training epoch's batches are done (validation starts, or the epoch end); once per epoch."""
        if self._epoch_start is not None:
            self._train = [*self._train[-2:], time.perf_counter() - self._epoch_start]
            self._epoch_start = None

    @property
    def train_seconds(self) -> float:
        """Median of the last three training epochs' seconds (NaN before the first)."""
        return statistics.median(self._train) if self._train else float("nan")

    # ------------------------------------------------------------------ plan and record

    def plan(self, fitting: bool) -> Plan:
        """The work of this epoch end: everything without a budget, outside fit, or before costs are known."""
        every = (self.method, *self.compared)
        if self.max_overhead is None or not fitting:
            return Plan(every, frozenset(every))
        scores = self._since_scores + 1 >= self.scores_every
        # compared methods on an epoch without the explained method's scores, when those are thinned too
        compared = self._since_compared + 1 >= self.compared_every and (self.scores_every == 1 or not scores)
        methods = (self.method, *(self.compared if compared else ()))
        scored = {self.method} if scores else set()
        return Plan(methods, frozenset(scored | (set(self.compared) if compared else set())))

    def record(self, plan: Plan, total: float, seconds: dict[str, float]) -> None:
        """The epoch end's ``total`` seconds and its parts' (:attr:`~.compute.EpochWork.seconds`:
        ``"<method>/maps"``, ``"<method>/scores"``); re-plan the strides and say so once."""
        if self.max_overhead is None:
            return
        parts = {name: seconds.get(f"{name}/maps", 0.0) + seconds.get(f"{name}/scores", 0.0) for name in plan.methods}
        parts.pop(self.method, None)
        if self.method in plan.scored:
            parts["scores"] = seconds.get(f"{self.method}/scores", 0.0)
        self._since_scores = 0 if self.method in plan.scored else self._since_scores + 1
        ran_compared = any(name in plan.methods for name in self.compared)
        self._since_compared = 0 if ran_compared or not self.compared else self._since_compared + 1
        self._costs.update(parts)
        self._costs["fixed"] = max(0.0, total - sum(parts.values()))  # maps, rendering, logging, files
        train = self.train_seconds
        self.overhead = total / train if train > 0 else float("nan")
        if not train > 0 or "scores" not in self._costs:
            return
        self.compared_every, self.scores_every = self._strides(self.max_overhead * train)
        if (self.compared_every, self.scores_every) != (1, 1) and not self._said:
            self._said = True
            rank_zero_warn(
                f"GradSkipCallback: the epoch end took {total:.2f} s, {100 * self.overhead:.1f} % of the "
                f"{train:.1f} s training epoch, over max_overhead={self.max_overhead}: from now on the compared "
                f"methods {list(self.compared)} are explained every {self.compared_every} explained epoch(s) and "
                f"{self.method}'s perturbation scores computed every {self.scores_every} (logged as budget/...; "
                "raise max_overhead or set it to None to explain everything every epoch)"
            )

    def _strides(self, allowance: float) -> tuple[int, int]:
        compared = sum(self._costs.get(name, 0.0) for name in self.compared)
        fixed, scores = self._costs["fixed"], self._costs["scores"]
        for scores_every in range(1, MAX_STRIDE + 1):
            for compared_every in range(1, MAX_STRIDE + 1) if self.compared else (1,):
                if fixed + scores / scores_every + compared / compared_every <= allowance:
                    return compared_every, scores_every
        return (MAX_STRIDE if self.compared else 1), MAX_STRIDE

    def scalars(self, prefix: str) -> dict[str, float]:
        """The budget's logged scalars (none without a budget): the last epoch end's overhead, the strides."""
        if self.max_overhead is None:
            return {}
        return {
            key(None, prefix, "budget/overhead"): self.overhead,
            key(None, prefix, "budget/compared_every"): float(self.compared_every),
            key(None, prefix, "budget/scores_every"): float(self.scores_every),
        }
