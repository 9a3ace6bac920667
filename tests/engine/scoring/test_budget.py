"""The time budget: over ``max_overhead`` the callback explains the compared methods and computes the
perturbation scores on fewer epochs, and says so once in the log and every epoch in scalars."""

from __future__ import annotations

import csv
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest
from lightning.pytorch import seed_everything
from lightning.pytorch.loggers import CSVLogger

from gradskip_lightning import GradSkipCallback, MethodSettings
from gradskip_lightning.engine.discovery.stage import DiscoveryStage
from gradskip_lightning.engine.scoring.budget import MAX_STRIDE, Plan, TimeBudget
from gradskip_lightning.engine.settings import ProbeSettings, ScoreSettings
from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer

EPOCHS = 5


def _rows(log_dir: str | Path) -> list[dict[str, float]]:
    with open(Path(log_dir) / "metrics.csv") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("gradskip/epoch")]
    return [{k: float(v) for k, v in row.items() if v} for row in rows]


def _fit(
    tmp_path: Path, max_overhead: float | None, discovery: bool = False
) -> tuple[list[dict[str, float]], list[str], dict[str, int]]:
    seed_everything(0)
    logger = CSVLogger(save_dir=str(tmp_path), name="csv")
    callback = GradSkipCallback(
        probes=ProbeSettings(num_probes=8, max_overhead=max_overhead),
        scores=ScoreSettings(insertion_steps=4),
        discovery=DiscoveryStage(probes_per_class=2) if discovery else None,
        progress=False,
        methods=MethodSettings(compare=["rollout"]),
    )
    trainer = tiny_trainer(tmp_path, logger=logger, callbacks=[callback], max_epochs=EPOCHS, num_sanity_val_steps=0)
    calls: Counter[str] = Counter()  # per explainer (the discovery stage's own, Chefer, too)
    module = tiny_module()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        original = GradSkipCallback.setup

        def setup(self, trainer, pl_module, stage):  # count each explainer's explain calls
            original(self, trainer, pl_module, stage)
            for name, explainer in self.monitor.prepared.explainers.items():
                explain = explainer.explain

                def counted(*args, _name=name, _explain=explain, **kwargs):
                    calls[_name] += 1
                    return _explain(*args, **kwargs)

                explainer.explain = counted

        GradSkipCallback.setup = setup
        try:
            trainer.fit(module, datamodule=tiny_data())
        finally:
            GradSkipCallback.setup = original
    messages = [str(w.message) for w in caught if "max_overhead" in str(w.message)]
    return _rows(logger.log_dir), messages, calls


def test_over_budget_the_compared_methods_and_scores_run_less_often_and_it_is_said(tmp_path):
    rows, messages, calls = _fit(tmp_path / "tight", max_overhead=1e-6)  # any epoch end is over this budget
    assert len(rows) == EPOCHS  # the explained method's maps every epoch
    # said once each: the first epoch end's compared methods wait for the fit's account (their cost predicted
    # from the explained method's), then the strides (planned from the second epoch end) thin
    assert len(messages) == 2 and "fit's callback time" in messages[0] and "every" in messages[1]
    assert "the compared methods ['rollout']" in messages[0]
    compared = [row for row in rows if "faithfulness/gradskip/insertion/rollout" in row]
    scored = [row for row in rows if "faithfulness/gradskip/insertion" in row]
    assert not compared and len(scored) == 1  # the scores at the first epoch end only, which measured their cost
    assert calls["rollout"] == 0 and calls["gradskip"] == EPOCHS  # one chunk of 8 probes per explain
    assert all(row["gradskip/budget/compared_every"] == MAX_STRIDE for row in rows[2:])
    assert all(row["gradskip/budget/scores_every"] == MAX_STRIDE for row in rows[2:])
    assert all(row["gradskip/budget/overhead"] > 0 for row in rows[1:])

    rows, messages, calls = _fit(tmp_path / "loose", max_overhead=1e6)  # never over budget
    assert not messages and calls == {"gradskip": EPOCHS, "rollout": EPOCHS}
    assert all("faithfulness/gradskip/insertion/rollout" in row for row in rows)
    assert all(row["gradskip/budget/compared_every"] == 1 for row in rows)

    rows, messages, _ = _fit(tmp_path / "tight-discovery", max_overhead=1e-6, discovery=True)
    assert len(messages) == 2 and "discovery stage runs at every 16" in messages[1]
    # the stage at the first two epoch ends: no stride is planned from the first one's costs
    assert [("discovery/gradskip/max_suspicion" in row) for row in rows] == [True, True] + [False] * (EPOCHS - 2)
    assert all(row["gradskip/budget/discovery_every"] == MAX_STRIDE for row in rows[2:])

    rows, messages, _ = _fit(tmp_path / "off", max_overhead=None)
    assert not messages and all("gradskip/budget/overhead" not in row for row in rows)


def test_strides_thin_the_compared_methods_first_then_the_scores():
    budget = TimeBudget(0.02, "gradskip", ["rollout"])
    budget._train = [100.0]  # a 100 s training epoch: 2 s allowance
    everything = budget.plan(fitting=True)
    assert everything == Plan(("gradskip", "rollout"), frozenset({"gradskip", "rollout"}))
    seconds = {"gradskip/maps": 0.2, "gradskip/scores": 1.0, "rollout/maps": 0.1, "rollout/scores": 1.9}
    budget.record(everything, total=3.5, seconds=seconds)  # the first epoch end: it plans no stride
    assert (budget.compared_every, budget.scores_every) == (1, 1) and budget.plan(fitting=True) == everything
    with pytest.warns(UserWarning, match=r"every part would take 3.50 s, 3.5 % of the 100.0 s training epoch"):
        budget.record(everything, total=3.5, seconds=seconds)  # fixed 0.5 s: 0.5 + 1.0 + 2.0 / n <= 2 -> n = 4
    assert (budget.compared_every, budget.scores_every) == (4, 1)
    assert budget.overhead == pytest.approx(0.035)
    plans = []
    for _ in range(8):
        plans.append(budget.plan(fitting=True))
        ran = {name: value for name, value in seconds.items() if name.split("/")[0] in plans[-1].methods}
        budget.record(plans[-1], total=0.5 + sum(ran.values()) - 0.2, seconds=ran)
    assert [len(plan.methods) for plan in plans] == [1, 1, 1, 2, 1, 1, 1, 2]
    assert all("gradskip" in plan.scored for plan in plans)
    assert budget.plan(fitting=False).methods == ("gradskip", "rollout")  # validate(): everything


def test_the_compared_methods_are_thinned_first_then_the_scores_and_discovery_last():
    budget = TimeBudget(0.02, "gradskip", ["rollout"], discovery_every=1)
    budget._train = [100.0]  # 2 s allowance
    everything = budget.plan(fitting=True, discovery_due=True)
    assert everything.discovery and everything.methods == ("gradskip", "rollout")
    seconds = {"gradskip/maps": 0.2, "gradskip/scores": 0.5, "rollout/maps": 0.1, "rollout/scores": 0.9, "discovery": 1}
    budget.record(everything, total=3.0, seconds=seconds)  # the first epoch end plans nothing; the second:
    budget.record(everything, total=3.0, seconds=seconds)
    # fixed 0.5 + discovery 1 / d + scores 0.5 / m + compared 1.0 / n <= 2: d = 1, then m = 2, then n = 4 (2.0)
    assert budget.every == {"compared": 4, "scores": 2, "discovery": 1}
    scalars = budget.scalars("gradskip/")
    assert scalars["gradskip/budget/discovery_every"] == 1 and scalars["gradskip/budget/compared_every"] == 4
    ran_parts = []
    for _ in range(12):
        plan = budget.plan(fitting=True, discovery_due=True)
        parts = {
            "compared": "rollout" in plan.methods,
            "scores": "gradskip" in plan.scored,
            "discovery": plan.discovery,
        }
        ran_parts.append({name for name, ran in parts.items() if ran})
        ran = {
            k: v for k, v in seconds.items() if k.split("/")[0] in plan.methods or (k == "discovery" and plan.discovery)
        }
        ran = {k: v for k, v in ran.items() if k != "gradskip/scores" or parts["scores"]}
        budget.record(plan, total=0.5 + sum(ran.values()) - 0.2, seconds=ran)
    assert all("discovery" in parts for parts in ran_parts)  # the alarm at every epoch end
    assert all(len(parts - {"discovery"}) <= 1 for parts in ran_parts)  # one thinned part per epoch end
    assert [e for e, parts in enumerate(ran_parts) if "scores" in parts] == [1, 3, 5, 7, 9, 11]
    assert [e for e, parts in enumerate(ran_parts) if "compared" in parts] == [4, 8]  # when the scores are not due
    assert budget.plan(fitting=False, discovery_due=True).discovery  # validate(): everything
    seconds["discovery"] = 4.0  # the stage alone over the allowance: thinned once the others are at their most
    budget.record(everything, total=6.0, seconds=seconds)
    # 0.5 + 4 / d + 0.5 / m + 1.0 / n <= 2: d = 3 (1.83), then m = 5 (0.1), then n = 15 (0.067)
    assert budget.every == {"compared": 15, "scores": 5, "discovery": 3}


def test_the_discovery_stride_counts_only_the_stages_own_epochs():
    budget = TimeBudget(0.02, "gradskip", [], discovery_every=2)
    budget._train = [100.0]
    budget.record(budget.plan(True, True), total=2.1, seconds={"gradskip/scores": 0.1, "discovery": 2.0})
    # fixed 0 + 0.1 + 2.0 / 2 <= 2: the own period already halves discovery's cost
    assert budget.every == {"scores": 1, "discovery": 1}
    budget.record(budget.plan(True, True), total=8.1, seconds={"gradskip/scores": 0.1, "discovery": 8.0})
    assert budget.every == {"scores": 1, "discovery": 3}  # 8 / 2 / 3 + 0.1 = 1.43 <= 2 (own period 1: d = 5)
    due = [False, True] * 4  # the stage's own schedule: every 2nd explained epoch
    runs = []
    for own in due:
        plan = budget.plan(True, own)
        runs.append(plan.discovery)
        seconds = {
            **({"gradskip/scores": 0.1} if "gradskip" in plan.scored else {}),
            **({"discovery": 8.0} if plan.discovery else {}),
        }
        budget.record(plan, sum(seconds.values()), seconds)
    assert runs == [False, False, False, False, False, True, False, False]  # its 3rd own epoch after the last run


def _trained(budget: TimeBudget, seconds: float) -> None:
    """A training epoch of ``seconds`` for ``budget``."""
    budget._epoch_start = time.perf_counter() - seconds
    budget.train_ended()


def test_over_the_fit_the_scores_and_compared_methods_wait_and_the_first_epoch_end_stays_near_the_budget():
    budget = TimeBudget(0.05, "gradskip", ["rollout"], discovery_every=1)
    costs = {
        "gradskip/maps": 0.2,
        "gradskip/scores": 0.9,
        "rollout/maps": 0.15,
        "rollout/scores": 0.3,
        "discovery": 0.6,
    }
    fit_overheads, ran = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(12):  # as the runner does: the explained method, discovery, then the compared methods
            _trained(budget, 30.0)  # 1.5 s a training epoch within the budget
            plan = budget.plan(fitting=True, discovery_due=True)
            seconds = {
                name: value
                for name, value in costs.items()
                if (name == "discovery" and plan.discovery)
                or name == "gradskip/maps"
                or (name == "gradskip/scores" and "gradskip" in plan.scored)
            }
            plan = budget.admit_compared(plan, True, sum(seconds.values()), seconds)
            if "rollout" in plan.methods:
                seconds.update({name: costs[name] for name in ("rollout/maps", "rollout/scores")})
            budget.record(plan, total=0.1 + sum(seconds.values()), seconds=seconds)  # fixed 0.3 s with the maps
            fit_overheads.append(budget.scalars("")["budget/fit_overhead"])
            parts = {
                "compared": "rollout" in plan.methods,
                "scores": "gradskip" in plan.scored,
                "discovery": plan.discovery,
            }
            ran.append({part for part, on in parts.items() if on})
    # the first epoch end measures the explained method and discovery; the compared methods, predicted to cost as
    # much as the explained method (1.1 s), would take it to 9.7 % of its 30 s epoch: they wait, and it stays at 6 %
    assert ran[0] == {"scores", "discovery"} and fit_overheads[0] == pytest.approx(1.8 / 30)
    assert all(overhead <= 0.05 + 1e-9 for overhead in fit_overheads[1:])
    assert all("discovery" in parts for parts in ran)  # never waits
    assert ran[1] == {"discovery"}  # what the strides had due waits while the fit is over
    assert sum("scores" in parts for parts in ran[2:]) >= 3 and sum("compared" in parts for parts in ran[2:]) >= 2
    said = [str(w.message) for w in caught if "budget/fit_overhead" in str(w.message)]
    assert len(said) == 1 and "the compared methods ['rollout']" in said[0]
    assert budget.admit_compared(everything := budget.plan(False, True), False, 100.0, {}) == everything  # validate()
