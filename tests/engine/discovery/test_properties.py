"""The discovery stage's global property transplants: a colour cast the model learned is flagged for colour on
its class and alerted once, with its picture; the options are checked; the alerts survive a checkpoint; a
failure fails the stage alone."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch import seed_everything
from lightning.pytorch.loggers import CSVLogger
from PIL import Image

from benchmarks.shortcuts import SHORTCUTS, add_shortcut
from gradskip_lightning import DiscoveryStage, GradSkipCallback, ProbeSettings, ScoreSettings
from gradskip_lightning.engine.discovery import stage
from gradskip_lightning.shortcuts.image_properties import PROPERTY_NAMES
from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer
from tests.conftest import TRAIN_SEED

D = "discovery/gradskip/"
#: The discovery benchmark's colour cast ((0.12, 0, -0.12) in pixel units) on the blue squares' class. Over seeds
#: 0-5 of this training its colour suspicion was 0.92-1.00 at every epoch end, every other (class, property) at most
#: 0.30, the hotspot's suspicion at most 0.016.
CAST_CLASS = 2
EPOCHS, TRAIN_SIZE = 8, 512


def _callback(**discovery) -> GradSkipCallback:
    return GradSkipCallback(
        probes=ProbeSettings(num_probes=4),
        scores=ScoreSettings(insertion_steps=2, fvt_top_k=0),
        discovery=DiscoveryStage(**{"probes_per_class": 8, **discovery}),
        progress=False,
    )


def cast_data(seed: int):
    """Planted-shapes data whose class-2 images (train, validation, test) carry the colour cast."""
    data = tiny_data(train_size=TRAIN_SIZE, val_size=64, batch_size=32, seed=seed)
    add_shortcut(data, CAST_CLASS, SHORTCUTS["cast"].change)
    return data


@pytest.fixture(scope="module")
def cast(tmp_path_factory):
    root = tmp_path_factory.mktemp("cast")
    seed_everything(TRAIN_SEED)
    callback = _callback()
    trainer = tiny_trainer(root, max_epochs=EPOCHS, callbacks=[callback], num_sanity_val_steps=0,
                           logger=CSVLogger(str(root)))  # fmt: skip
    module = tiny_module(TRAIN_SEED)
    module.hparams.lr = 3e-3
    with pytest.warns(UserWarning) as caught:
        trainer.fit(module, datamodule=cast_data(TRAIN_SEED))
    return trainer, callback, [str(w.message) for w in caught]


@pytest.mark.trained
def test_a_learned_colour_cast_is_flagged_for_colour_on_its_class_only_and_alerted_once(cast):
    trainer, callback, warnings = cast
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(D)}
    threshold = DiscoveryStage().property_alert_threshold
    colour = metrics[f"{D}colour/suspicion/class_{CAST_CLASS}"]
    assert colour >= threshold and metrics[f"{D}colour/flip_rate/class_{CAST_CLASS}"] > 0.8
    # a single property of a class whose signature shows nothing is not tested: NaN, not logged
    others = {(n, c): metrics.get(f"{D}{n}/suspicion/class_{c}", math.nan) for n in PROPERTY_NAMES for c in range(4)}
    del others[("colour", CAST_CLASS)], others[("signature", CAST_CLASS)]  # the signature holds the colour
    assert max(v for v in others.values() if not math.isnan(v)) < threshold, others
    assert metrics[f"{D}signature/flagged/class_{CAST_CLASS}"] == 1.0 and metrics[f"{D}signature/flagged"] == 1.0
    assert metrics[f"{D}colour/p_value/class_{CAST_CLASS}"] <= DiscoveryStage().alpha  # the calibrated rule's
    assert metrics[f"{D}colour/flagged"] == 1.0 and metrics[f"{D}colour/max_suspicion"] == colour
    assert metrics[f"{D}flagged"] == 0.0  # a cast has no place: the hotspot test does not see it
    alerts = [w for w in warnings if "may use a colour shortcut" in w or "may use a brightness shortcut" in w]
    assert len(alerts) == 1 and "class 2 (blue square)" in alerts[0]  # once per fit, not every epoch
    (signature,) = [w for w in warnings if "may use a signature shortcut" in w]
    assert "The axis that carries most of it: colour" in signature  # the signature's excess is the colour's
    assert "it alone carries the shortcut" in signature
    # and the yellow squares' tone at epochs 0 and 1 (suspicion 0.46, 0.68; 0.19 at the end): the brightest pixels
    # of these images are the squares, not the background, and the young model tells the yellow class, the
    # brightest, by its brightness: the tone property's known limit where objects outshine the background
    assert callback.state_dict()["discovery"]["alerted_properties"] == [
        ["colour", CAST_CLASS],
        ["signature", CAST_CLASS],
        ["tone", 3],
    ]


def test_the_flagged_class_is_pictured_before_and_after_the_transfer(cast):
    trainer, _, _ = cast
    pictures = sorted(Path(trainer.log_dir).rglob(f"*colour_transfer_class_{CAST_CLASS}.png"))
    assert pictures, "no picture of the flagged class"
    pixels = np.asarray(Image.open(pictures[-1]))
    assert pixels.dtype == np.uint8 and pixels.shape[2] == 3 and pixels.shape[1] > pixels.shape[0] / 4
    with open(f"{trainer.logger.log_dir}/metrics.csv") as handle:
        rows = [r for r in csv.DictReader(handle) if r.get(f"{D}colour/suspicion/class_0")]
    assert len(rows) == EPOCHS
    assert {f"{D}{name}/{value}/class_{c}" for name in DiscoveryStage().properties_for(3) for c in range(4)
            for value in ("suspicion", "flip_rate", "control_flip_rate", "separability")} <= set(rows[0])  # fmt: skip


def test_the_property_alerts_survive_a_checkpoint(tmp_path):
    callback = _callback()
    callback.monitor.runner.discoverer.alerted_properties = {("colour", 2), ("noise", 0)}
    state = callback.state_dict()
    assert state["discovery"]["alerted_properties"] == [["colour", 2], ["noise", 0]]
    torch.save(state, tmp_path / "callback.pt")
    restored = _callback()
    restored.load_state_dict(torch.load(tmp_path / "callback.pt", weights_only=True))  # as a checkpoint loads
    assert restored.monitor.runner.discoverer.alerted_properties == {("colour", 2), ("noise", 0)}
    older = {**state, "discovery": {k: v for k, v in state["discovery"].items() if k != "alerted_properties"}}
    restored.load_state_dict(older)  # a checkpoint from before the property transplants
    assert restored.monitor.runner.discoverer.alerted_properties == set()


def test_properties_off_logs_no_property_key(tmp_path):
    seed_everything(0)
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[_callback(properties=[])], max_epochs=1)
    trainer.fit(tiny_module(), datamodule=tiny_data())
    assert f"{D}suspicion/class_0" in trainer.callback_metrics
    assert not [k for k in trainer.callback_metrics if any(k.startswith(f"{D}{name}/") for name in PROPERTY_NAMES)]


def test_a_failed_property_transfer_fails_the_stage_alone(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(stage, "discover_properties", broken)
    seed_everything(0)
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[_callback()], max_epochs=1)
    with pytest.warns(UserWarning, match=r"discovery of epoch 0 skipped. discovery \(global properties\): Runtime"):
        trainer.fit(tiny_module(), datamodule=tiny_data())
    assert trainer.callback_metrics[f"{D}skipped"] == 1.0
    assert "faithfulness/gradskip/insertion" in trainer.callback_metrics  # the rest of the epoch is logged


def test_the_default_takes_every_property_that_applies_and_a_named_one_must_apply():
    assert DiscoveryStage().properties_for(3) == PROPERTY_NAMES
    assert DiscoveryStage(properties=["hue"]).properties_for(3) == ("hue",)
    greyscale = (
        "brightness", "sharpness", "noise", "compression", "stripes", "interlacing", "fixed_pattern", "illumination",
    )  # fmt: skip
    assert DiscoveryStage().properties_for(1) == greyscale
    assert DiscoveryStage(properties=["noise", "colour"]).properties == ("noise", "colour")  # a YAML list
    assert DiscoveryStage(properties=()).properties_for(3) == ()
    with pytest.raises(ValueError, match=r"discovery.properties has 'colour', which needs 3-channel images; the "
                                         r"images have 1: leave it out"):  # fmt: skip
        DiscoveryStage(properties=["colour"]).properties_for(1)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"properties": ["sparkle"]}, ValueError, r"discovery.properties must be one of \('colour'"),
        ({"properties": ["noise", "noise"]}, ValueError, "discovery.properties names 'noise' twice"),
        ({"properties": "colour"}, TypeError, "discovery.properties must be None or a list of names"),
        ({"property_alert_threshold": 1.5}, ValueError, "property_alert_threshold"),
        ({"property_alert_threshold": True}, ValueError, "property_alert_threshold"),
    ],
)
def test_bad_property_settings_are_a_clear_error(change, error, match):
    with pytest.raises(error, match=match):
        DiscoveryStage(**change)
