"""EpochMonitor as both doors hold it: the settings each door shows are its monitor's, and the arguments
every door shares are refused by the monitor with the same messages."""

from __future__ import annotations

import pytest

from gradskip_lightning import (
    DiscoveryStage,
    GradSkipCallback,
    MethodSettings,
    ProbeSettings,
    RenderSettings,
    ScoreSettings,
)
from gradskip_lightning.engine.monitor import EpochMonitor
from gradskip_lightning.hf_trainer import GradSkipTrainerCallback

GROUPS = dict(
    probes=ProbeSettings(num_probes=4),
    methods=MethodSettings(compare=["rollout"]),
    scores=ScoreSettings(insertion_steps=4),
    render=RenderSettings(overlay_alpha=0.3),
    discovery=DiscoveryStage(probes_per_class=2),
)
DOORS = (GradSkipCallback, GradSkipTrainerCallback)


@pytest.mark.parametrize("door", DOORS)
def test_a_door_shows_its_monitors_settings(door):
    callback = door(**GROUPS, every_n_epochs=3, log_prefix="gs/", progress=False)
    settings = callback.monitor.settings
    for name, group in GROUPS.items():
        assert getattr(callback, name) is getattr(settings, name) == group
    assert (callback.every_n_epochs, callback.log_prefix, callback.progress) == (3, "gs/", False)
    assert callback.method == "gradskip" and callback.logged_keys == frozenset() and callback.discovered is None


@pytest.mark.parametrize("door", DOORS)
def test_a_door_without_groups_shows_the_defaults(door):
    callback = door()
    assert (callback.probes, callback.methods, callback.scores) == (ProbeSettings(), MethodSettings(), ScoreSettings())
    assert callback.render == RenderSettings() and callback.discovery is None


@pytest.mark.parametrize(
    "build",
    [
        lambda every, prefix: EpochMonitor(None, (None,) * 5, every, prefix, True),
        *(lambda every, prefix, door=door: door(every_n_epochs=every, log_prefix=prefix) for door in DOORS),
    ],
)
def test_the_shared_arguments_are_refused_by_the_monitor(build):
    with pytest.raises(ValueError, match="every_n_epochs must be a positive integer, got 0"):
        build(0, "gradskip/")
    with pytest.raises(ValueError, match="outside the run folder"):
        build(1, "../elsewhere/")
    with pytest.raises(TypeError, match="log_prefix must be a string, got int"):
        build(1, 3)
