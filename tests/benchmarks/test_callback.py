"""The callback benchmark measures the main config's own callback: its settings, discovery included."""

from __future__ import annotations

import argparse

from benchmarks.callback import PARTS, HookTimer, configured_callback


def _args(**overrides) -> argparse.Namespace:
    args = {"config": "bloodmnist", "num_probes": None, "insertion_steps": None, "compare": None, "discovery": 0}
    return argparse.Namespace(**{**args, **overrides})


def test_the_main_configs_callback_is_measured_with_its_discovery_stage_and_budget():
    callback = configured_callback(_args())
    assert callback.methods.compare == ("rollout",) and callback.probes.max_overhead == 0.05
    assert callback.discovery is not None and callback.discovery.probes_per_class == 8
    override = configured_callback(_args(discovery=4, max_overhead=None))
    assert override.discovery is not None and override.discovery.probes_per_class == 4
    assert override.probes.max_overhead is None


def test_the_parts_are_the_callbacks_own_timings_and_add_up_under_the_hook(tmp_path):
    from gradskip_lightning import GradSkipCallback, MethodSettings, ProbeSettings, ScoreSettings
    from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer

    callback = GradSkipCallback(
        probes=ProbeSettings(num_probes=8), scores=ScoreSettings(insertion_steps=4),
        methods=MethodSettings(compare=["rollout"]), progress=False,
    )  # fmt: skip
    hook = HookTimer(callback)
    trainer = tiny_trainer(tmp_path, logger=False, max_epochs=2, callbacks=[hook.start(), callback, hook])
    trainer.fit(tiny_module(), datamodule=tiny_data())
    assert set(callback.epoch_seconds) == {
        "gradskip/maps",
        "gradskip/scores",
        "rollout/maps",
        "rollout/scores",
        "report",
        "total",
    }
    assert len(hook.parts) == 2 and set(hook.parts[0]) == set(PARTS) - {"other"}
    assert hook.scored == [["gradskip", "rollout"]] * 2
    for seconds, parts in zip(hook.seconds, hook.parts):
        assert parts["maps"] > 0 and parts["scores"] > 0 and parts["report"] > 0
        assert sum(parts.values()) <= seconds  # the callback's parts lie inside the hook's wall time


def test_a_method_whose_scores_waited_has_no_scores_seconds(tmp_path):
    from gradskip_lightning import GradSkipCallback, MethodSettings, ProbeSettings, ScoreSettings
    from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer

    callback = GradSkipCallback(
        probes=ProbeSettings(num_probes=8, max_overhead=1e-6), scores=ScoreSettings(insertion_steps=4),
        methods=MethodSettings(compare=["rollout"]), progress=False,
    )  # fmt: skip
    hook = HookTimer(callback)
    trainer = tiny_trainer(tmp_path, logger=False, max_epochs=2, callbacks=[hook.start(), callback, hook])
    trainer.fit(tiny_module(), datamodule=tiny_data())
    # every epoch end is over this budget: the first scores GradSkip alone (rollout, its cost predicted, waits),
    # the second nothing
    assert hook.scored == [["gradskip"], []]
    assert set(callback.epoch_seconds) == {"gradskip/maps", "report", "total"}
