"""The callback benchmark measures the main config's own callback: its settings, discovery included."""

from __future__ import annotations

import argparse

from gradskip_lightning.benchmarks.callback import _callback


def _args(**overrides) -> argparse.Namespace:
    args = {"config": "bloodmnist", "num_probes": None, "insertion_steps": None, "compare": None, "discovery": 0}
    return argparse.Namespace(**{**args, **overrides})


def test_the_main_configs_callback_is_measured_with_its_discovery_stage_and_budget():
    callback = _callback(_args())
    assert callback.compare_methods == ["rollout"] and callback.probes.max_overhead == 0.02
    assert callback.discovery.enabled and callback.discovery.probes_per_class == 8
    override = _callback(_args(discovery=4, max_overhead=None))
    assert override.discovery.enabled and override.discovery.probes_per_class == 4
    assert override.probes.max_overhead is None
