"""The callback's discovery stage: a stamp nobody named is flagged on its class and place, a clean model raises
no alarm, the keys and images reach a real offline W&B run, the probes and the peak suspicion survive a
checkpoint and a resume."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import wandb
from lightning.pytorch import Callback, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from PIL import Image

from gradskip_lightning import DiscoveryStage, GradSkipCallback, ProbeSettings, ScoreSettings
from gradskip_lightning.engine.discovery.properties import PROPERTY_VALUES
from gradskip_lightning.shortcuts.tags import SpuriousTag
from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer
from tests.callbacks.wandb_files import find_runs, read_records, use_offline_wandb
from tests.conftest import TRAIN_SEED

P = "gradskip/"
D = f"discovery/{P}"
#: An 8 x 8 checkerboard exactly on patch (1, 1) of the tiny ViT (8 px patches), on class 1: a place and a class
#: that no config or other test uses.
STAMP_CLASS, STAMP_BOX = 1, (8, 8, 16, 16)
CHECKERBOARD = tuple(tuple(float((row + col) % 2) for col in range(8)) for row in range(8))
#: Long enough for every seed's model to learn the stamp: 4 epochs on 256 images left it unlearned on 6 of 8
#: seeds (flip rate 0.06-0.29); 8 on 512 learned it on 8 of 8 (flip rate 1.00, suspicion 0.56; the clean
#: models' highest suspicion 0.058 against the 0.15 threshold).
EPOCHS, TRAIN_SIZE = 8, 512


def _callback(**discovery) -> GradSkipCallback:
    return GradSkipCallback(
        probes=ProbeSettings(num_probes=4),
        scores=ScoreSettings(insertion_steps=2, fvt_top_k=0),
        discovery=DiscoveryStage(**{"probes_per_class": 8, **discovery}),
        progress=False,
    )


class KeptTransfers(Callback):
    """Records, after each epoch end of ``callback`` (listed after it), the stage's kept property transfers: the
    object and its bytes."""

    def __init__(self, callback: GradSkipCallback) -> None:
        self.callback, self.kept = callback, []

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        transfers = self.callback.monitor.runner.discoverer.transfers
        self.kept.append((id(transfers), None if transfers is None else transfers.kept_bytes))


def _train(root, stamped: bool, seed: int = TRAIN_SEED, **kwargs):
    """EPOCHS of the tiny ViT on TRAIN_SIZE planted-shapes images, the stamp on every class-1 image (or none)."""
    seed_everything(seed)
    tag = SpuriousTag(STAMP_CLASS, p_in=1.0 if stamped else 0.0, p_out=0.0, pattern=CHECKERBOARD, position=(8, 8))
    callback = _callback()
    callbacks = [callback, KeptTransfers(callback)]
    trainer = tiny_trainer(root, max_epochs=EPOCHS, callbacks=callbacks, num_sanity_val_steps=0, **kwargs)
    module = tiny_module(seed)
    module.hparams.lr = 3e-3
    trainer.fit(module, datamodule=tiny_data(tag=tag, train_size=TRAIN_SIZE, val_size=64, batch_size=32, seed=seed))
    return trainer, callback


@pytest.fixture(scope="module")
def stamped(tmp_path_factory):
    root = tmp_path_factory.mktemp("stamped")
    with pytest.warns(UserWarning, match="class 'green square' may use a shortcut") as caught:
        trainer, callback = _train(root, stamped=True, logger=CSVLogger(str(root)))
    return trainer, callback, [str(w.message) for w in caught]


@pytest.mark.trained
def test_a_stamp_nobody_named_is_flagged_on_its_class_with_its_hotspot_on_the_stamp(stamped):
    trainer, _, warnings = stamped
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(D)}
    threshold = DiscoveryStage().alert_threshold
    suspicion = [metrics[f"{D}suspicion/class_{c}"] for c in range(4)]
    assert (
        suspicion[STAMP_CLASS] >= threshold and max(s for c, s in enumerate(suspicion) if c != STAMP_CLASS) < threshold
    )
    box = [metrics[f"{D}hotspot/{side}/class_{STAMP_CLASS}"] for side in ("top", "left", "bottom", "right")]
    assert box[0] <= STAMP_BOX[0] and box[1] <= STAMP_BOX[1] and box[2] >= STAMP_BOX[2] and box[3] >= STAMP_BOX[3]
    assert (box[2] - box[0]) * (box[3] - box[1]) <= 32 * 32 / 2  # on the stamp, not everywhere
    assert metrics[f"{D}flip_rate/class_{STAMP_CLASS}"] > 0.8 > metrics[f"{D}random_flip_rate/class_{STAMP_CLASS}"]
    assert metrics[f"{D}flagged"] == 1.0 and metrics[f"{D}p_value/class_{STAMP_CLASS}"] <= DiscoveryStage().alpha
    assert metrics[f"{D}peak_suspicion/class_{STAMP_CLASS}"] >= suspicion[STAMP_CLASS]
    (alert,) = [w for w in warnings if "may use a shortcut" in w]  # once per fit, not every epoch
    assert f"rows {int(box[0])}-{int(box[2])}, columns {int(box[1])}-{int(box[3])} px" in alert and "flips" in alert


def test_the_scalars_are_logged_and_the_images_written(stamped):
    trainer, _, _ = stamped
    import csv

    with open(f"{trainer.logger.log_dir}/metrics.csv") as handle:
        rows = [r for r in csv.DictReader(handle) if r.get(f"{D}suspicion/class_1")]
    assert len(rows) == EPOCHS  # every explained epoch
    names = {"suspicion", "flip_rate", "random_flip_rate", "other_class_flip_rate", "constancy", "consistency"}
    assert {f"{D}{n}/class_{c}" for n in names for c in range(4)} <= set(rows[0])
    grids = sorted((trainer.logger.log_dir and __import__("pathlib").Path(trainer.log_dir)).rglob("*class_means.png"))
    assert len(grids) == EPOCHS
    strategies = list(grids[-1].parent.glob(f"*strategy_maps_class_{STAMP_CLASS}.png"))
    assert len(strategies) == 1 and np.asarray(Image.open(strategies[0])).shape[2] == 3


@pytest.mark.trained
def test_a_clean_model_raises_no_alarm_at_the_default_threshold(tmp_path, recwarn):
    trainer, _ = _train(tmp_path, stamped=False, logger=False)
    suspicion = [float(trainer.callback_metrics[f"{D}suspicion/class_{c}"]) for c in range(4)]
    assert max(s for s in suspicion if not math.isnan(s)) < DiscoveryStage().alert_threshold
    assert not [w for w in recwarn if "may use a shortcut" in str(w.message)]


def test_the_property_tests_transfer_each_probe_once_a_fit(stamped):
    trainer, _, _ = stamped
    (recorder,) = [c for c in trainer.callbacks if isinstance(c, KeptTransfers)]
    assert len(recorder.kept) == EPOCHS and len({kept for kept, _ in recorder.kept}) == 1  # one for the fit
    grown = [after - before for (_, before), (_, after) in zip(recorder.kept, recorder.kept[1:])]
    assert recorder.kept[0][1] > 0 and sum(grown) < recorder.kept[0][1]  # later epoch ends transfer little anew


def test_the_discovery_probes_are_kept_in_the_checkpoint_and_restored(stamped):
    _, callback, _ = stamped
    state = callback.state_dict()
    ids = state["discovery"]["ids"]
    assert isinstance(ids, torch.Tensor) and len(ids) == 32 and state["discovery"]["alerted"] == [STAMP_CLASS]
    assert len(state["discovery"]["peak"]) == 4 and all(isinstance(v, float) for v in state["discovery"]["peak"])
    fresh = _callback()
    fresh.load_state_dict(state)
    discoverer = fresh.monitor.runner.discoverer
    assert torch.equal(discoverer.source.restored_ids, ids) and discoverer.alerted == {STAMP_CLASS}
    pixel_ids = state["discovery"]["pixel_ids"]  # 32 a class asked, the 64 validation images there are
    assert sorted(pixel_ids.tolist()) == list(range(64)) and set(ids.tolist()) <= set(pixel_ids.tolist())
    assert torch.equal(discoverer.pixel_source.restored_ids, pixel_ids)
    assert discoverer.peak == state["discovery"]["peak"]
    fresh.load_state_dict({k: v for k, v in state.items() if k != "discovery"})  # a checkpoint from before


def test_the_discovery_keys_and_image_reach_an_offline_wandb_run(tmp_path, monkeypatch):
    use_offline_wandb(monkeypatch, tmp_path)
    seed_everything(0)
    logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="gradskip-test")
    callback = _callback(  # every class with a test fires: alerts to read back
        alert_threshold=0.0, alpha=1.0, properties=["colour", "noise"], property_alert_threshold=0.0
    )
    trainer = tiny_trainer(tmp_path, logger=logger, callbacks=[callback], max_epochs=1)
    with pytest.warns(UserWarning, match="may use a shortcut"):  # offline: the run file keeps it, the console says it
        trainer.fit(tiny_module(), datamodule=tiny_data())
    wandb.finish()
    monitored = trainer.callback_metrics  # what EarlyStopping and ModelCheckpoint read
    assert {f"{D}{test}flagged/class_{c}" for test in ("", "colour/") for c in range(4)} <= set(monitored)
    (run,) = find_runs(tmp_path / "wandb")
    (row,) = run.rows_with(f"{D}suspicion/class_0")
    names = ("suspicion", "p_value", "peak_suspicion", "tested_share", "flip_rate", "constancy", "consistency",
             "concentration", "hotspot/top", "strategies")  # fmt: skip
    for name in names:
        assert all(isinstance(row[f"{D}{name}/class_{c}"], (int, float)) for c in range(4)), (name, row)
    assert row[f"{D}peak_suspicion"] == row[f"{D}max_suspicion"]  # the first epoch: the peak is this epoch's
    assert all(
        0 <= row[f"{D}p_value/class_{c}"] <= 1
        for c in range(4)
        if row[f"{D}p_value/class_{c}"] == row[f"{D}p_value/class_{c}"]
    )
    assert row[f"{D}flagged"] >= 1 and row[f"{P}epoch"] == 0
    flags = [row[f"{D}flagged/class_{c}"] for c in range(4)]  # per class, 1 or 0, summing to the count
    assert set(flags) <= {0, 1} and sum(flags) == row[f"{D}flagged"]
    media = row[f"{D}class_means"]
    assert media["_type"] == "image-file"
    pixels = np.asarray(Image.open(run.root / "files" / media["path"]))
    assert pixels.dtype == np.uint8 and pixels.shape[2] == 3 and pixels.std() > 10
    assert row[f"{D}strategy_maps/class_0"]["_type"] == "image-file"
    for name in ("colour", "noise"):  # the global property transplants: every class flagged at threshold 0
        for value in PROPERTY_VALUES:
            assert all(isinstance(row[f"{D}{name}/{value}/class_{c}"], (int, float)) for c in range(4)), (name, value)
        assert row[f"{D}{name}/flagged"] == sum(not math.isnan(row[f"{D}{name}/suspicion/class_{c}"]) for c in range(4))
        assert row[f"{D}{name}/flagged"] == sum(row[f"{D}{name}/flagged/class_{c}"] for c in range(4))
        assert 0 <= row[f"{D}{name}/max_suspicion"] <= 1
        for c in range(4):  # NaN (no recipients) where the suspicion is NaN
            value, suspicion = row[f"{D}{name}/p_value/class_{c}"], row[f"{D}{name}/suspicion/class_{c}"]
            assert 0 <= value <= 1 or (math.isnan(value) and math.isnan(suspicion)), (name, c, value)
    assert f"{D}brightness/suspicion/class_0" not in row  # only the properties asked for
    picture = row[f"{D}colour/transfer/class_0"]
    pixels = np.asarray(Image.open(run.root / "files" / picture["path"]))
    assert picture["_type"] == "image-file" and pixels.shape[2] == 3 and pixels.std() > 10
    (path,) = (run.root).glob("run-*.wandb")
    alerts = [r.alert for r in read_records(path) if r.WhichOneof("record_type") == "alert"]
    stamps = [a for a in alerts if "may use a shortcut" in a.title]
    colours = [a for a in alerts if "may use a colour shortcut" in a.title]
    assert len(stamps) == row[f"{D}flagged"] and len(colours) == row[f"{D}colour/flagged"]
    assert "giving other classes' probes its colour statistics flips" in colours[0].text
    assert "adjusted p-value" in colours[0].text and "(alpha 1)" in colours[0].text


class PeakSeen(Callback):
    """After each explained epoch (listed after the callback): the logged suspicion and peak per class, of the
    hotspot test (``logged``) and of the colour transplant (``colour``); at each training epoch's start, the peaks
    the callback holds (restored from the checkpoint on a resume)."""

    def __init__(self, callback: GradSkipCallback) -> None:
        self.callback, self.logged, self.held, self.colour, self.held_colour = callback, [], [], [], []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        discoverer = self.callback.monitor.runner.discoverer
        self.held.append(list(discoverer.peak))
        self.held_colour.append(list(discoverer.property_peak.get("colour", [])))

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:  # a NaN value (e.g. a class no probe is predicted away from) is left out
            values = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(D)}
            for prefix, seen in ((D, self.logged), (f"{D}colour/", self.colour)):
                suspicion = [values.get(f"{prefix}suspicion/class_{c}", math.nan) for c in range(4)]
                seen.append((suspicion, [values.get(f"{prefix}peak_suspicion/class_{c}", math.nan) for c in range(4)]))


def test_the_peak_suspicion_survives_a_checkpoint_resume(tmp_path):
    seed_everything(0)
    first = _callback(properties=("colour",))  # without the signature, colour is tested for every class
    seen = PeakSeen(first)
    checkpoints = ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), filename="last")
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[first, checkpoints, seen], max_epochs=1,
                           enable_checkpointing=True, num_sanity_val_steps=0)  # fmt: skip
    trainer.fit(tiny_module(), datamodule=tiny_data())
    ((suspicion, peak),) = seen.logged
    assert np.allclose(peak, suspicion, equal_nan=True)  # the first epoch's peak is its suspicion
    ((colour, colour_peak),) = seen.colour
    assert np.allclose(colour_peak, colour, equal_nan=True) and not np.isnan(colour).all()
    path = tmp_path / "ckpt" / "last.ckpt"
    checkpoint = torch.load(path, weights_only=True)
    stored = checkpoint["callbacks"][first.state_key]["discovery"]
    assert np.allclose(stored["peak"], peak, equal_nan=True)
    assert np.allclose(stored["property_peak"]["colour"], colour_peak, equal_nan=True)
    # an untrained model's suspicion is about 0: say an earlier epoch of this fit had flagged classes 0 and 3
    earlier = [0.7, peak[1], math.nan, 0.4]
    stored["peak"] = earlier
    earlier_colour = [0.9, math.nan, colour_peak[2], 0.5]  # and class 0's colour
    stored["property_peak"]["colour"] = earlier_colour
    torch.save(checkpoint, path)

    resumed = _callback(properties=("colour",))
    later = PeakSeen(resumed)
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[resumed, later], max_epochs=2, num_sanity_val_steps=0)
    trainer.fit(tiny_module(), datamodule=tiny_data(), ckpt_path=str(path))
    assert np.allclose(later.held[0], earlier, equal_nan=True)  # restored before the resumed epoch
    ((now, now_peak),) = later.logged
    assert np.allclose(now_peak, np.fmax(earlier, now), equal_nan=True)  # 0.7 and 0.4 kept: suspicion is now about 0
    assert resumed.state_dict()["discovery"]["peak"] == pytest.approx(now_peak, nan_ok=True)
    assert np.allclose(later.held_colour[0], earlier_colour, equal_nan=True)
    ((now_colour, now_colour_peak),) = later.colour
    assert np.allclose(now_colour_peak, np.fmax(earlier_colour, now_colour), equal_nan=True)
    assert now_colour_peak[0] == pytest.approx(0.9) and now_colour_peak[3] >= 0.5


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"probes_per_class": 0}, ValueError, "probes_per_class"),
        ({"pixel_probes_per_class": 4}, ValueError, "pixel_probes_per_class .4. must be at least probes_per_class"),
        ({"every_n_epochs": 1.5}, ValueError, "every_n_epochs"),
        ({"hotspot_share": 2.0}, ValueError, "hotspot_share"),
        ({"consistency": 1}, TypeError, "consistency"),
        ({"method": "lrp2"}, ValueError, "discovery method"),
        ({"method": ("chefer", "lrp2")}, ValueError, "discovery method"),
        ({"method": ()}, ValueError, "discovery method"),
        ({"method": ("chefer", "chefer")}, ValueError, "twice"),
        ({"alpha": 0.0}, ValueError, "alpha"),
        ({"neighbour_relevance": -0.1}, ValueError, "neighbour_relevance"),
    ],
)
def test_bad_discovery_settings_are_a_clear_error(change, error, match):
    with pytest.raises(error, match=match):
        DiscoveryStage(**change)


@pytest.mark.parametrize(
    ("chosen", "summarised", "explainers"),
    [
        ({"method": "lrp"}, ("lrp",), ["gradskip", "lrp"]),
        ({}, ("chefer", "gradskip"), ["gradskip", "chefer"]),  # the default, chosen by the discovery benchmark
        ({"method": None}, ("gradskip",), ["gradskip"]),  # the callback's own method
        ({"method": ["rollout", "lrp"]}, ("rollout", "lrp"), ["gradskip", "rollout", "lrp"]),  # a YAML list
    ],
)
def test_the_stage_can_summarise_other_methods_maps(tmp_path, monkeypatch, chosen, summarised, explainers):
    from gradskip_lightning.engine.discovery.stage import Discoverer

    used, run = [], Discoverer.run

    def recorded(self, pl_module, by_method, *args, **kwargs):
        used.append(tuple(by_method))
        assert all(explainer.method == name for name, explainer in by_method.items())
        return run(self, pl_module, by_method, *args, **kwargs)

    monkeypatch.setattr(Discoverer, "run", recorded)
    seed_everything(0)
    callback = _callback(**chosen)
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[callback], max_epochs=2, num_sanity_val_steps=0)
    trainer.fit(tiny_module(), datamodule=tiny_data())
    assert used == [summarised, summarised] and list(callback.monitor.prepared.explainers) == explainers
    assert f"{D}suspicion/class_0" in trainer.callback_metrics
    for name in set(summarised) - {"gradskip"}:  # explained for discovery only, not scored
        assert f"faithfulness/{P}insertion/{name}" not in trainer.callback_metrics
