"""The discovery stage's failure modes: it fails alone (its keys NaN, a skipped flag, fresh values
next time), it is refused where it cannot run, and its messages name the options the user set."""

from __future__ import annotations

import csv
import math
import warnings

import pytest
from lightning.pytorch import Callback, seed_everything
from lightning.pytorch.loggers import CSVLogger

from gradskip_lightning import DiscoveryStage, GradSkipCallback, ProbeSettings, ScoreSettings
from gradskip_lightning.callback.discovery.stage import Discoverer
from tests.callback.helpers import (
    tiny_data,
    tiny_module,
    tiny_segmentation_data,
    tiny_segmentation_module,
    tiny_trainer,
)

D = "discovery/gradskip/"


def _callback(**discovery) -> GradSkipCallback:
    return GradSkipCallback(
        probes=ProbeSettings(num_probes=4),
        scores=ScoreSettings(insertion_steps=2, fvt_top_k=0),
        discovery=DiscoveryStage(**{"enabled": True, "probes_per_class": 4, **discovery}),
        progress=False,
    )


class Seen(Callback):
    """The discovery values in ``callback_metrics`` after each explained epoch (listed after the callback)."""

    def __init__(self) -> None:
        self.epochs: list[dict[str, float]] = []

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self.epochs.append({k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(D)})


def test_a_discovery_failure_alone_makes_its_values_nan_for_that_epoch_and_the_next_logs_fresh_ones(
    tmp_path, monkeypatch
):
    calls, run = [], Discoverer.run

    def fails_at_epoch_one(self, *args, **kwargs):
        calls.append(1)
        return (None, "discovery: RuntimeError: out of memory") if len(calls) == 2 else run(self, *args, **kwargs)

    monkeypatch.setattr(Discoverer, "run", fails_at_epoch_one)
    seed_everything(0)
    seen, logger = Seen(), CSVLogger(str(tmp_path))
    trainer = tiny_trainer(tmp_path, logger=logger, callbacks=[_callback(), seen], max_epochs=3, num_sanity_val_steps=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(tiny_module(), datamodule=tiny_data())
    assert sum("shortcut discovery of epoch 1 skipped" in str(w.message) for w in caught) == 1
    first, failed, fresh = seen.epochs
    suspicion = f"{D}suspicion/class_0"
    assert math.isfinite(first[suspicion]) and first[f"{D}skipped"] == 0.0
    assert failed[f"{D}skipped"] == 1.0 and math.isnan(failed[suspicion]) and math.isnan(failed[f"{D}max_suspicion"])
    assert all(math.isnan(v) for k, v in failed.items() if k != f"{D}skipped"), failed
    assert math.isfinite(fresh[suspicion]) and fresh[f"{D}skipped"] == 0.0
    assert math.isfinite(trainer.callback_metrics["faithfulness/gradskip/insertion"])  # the rest of epoch 1 ran
    with open(f"{logger.log_dir}/metrics.csv") as handle:
        rows = {int(float(r["gradskip/epoch"])): r for r in csv.DictReader(handle) if r.get("gradskip/epoch")}
    assert rows[1][f"{D}skipped"] == "1.0" and math.isnan(float(rows[1][suspicion]))  # logged NaN, not the old value
    assert math.isfinite(float(rows[2][suspicion])) and rows[2][f"{D}skipped"] == "0.0"


def test_discovery_on_a_segmentation_model_is_refused_at_setup(tmp_path):
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[_callback()], max_epochs=1)
    with pytest.raises(
        ValueError, match=r"DiscoveryStage\(enabled=True\) finds a classifier's shortcuts; .*segmentation"
    ):
        trainer.fit(tiny_segmentation_module(), datamodule=tiny_segmentation_data())


def test_too_few_discovery_probes_are_named_by_the_option_the_user_set(tmp_path):
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[_callback(probes_per_class=20)], max_epochs=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(tiny_module(), datamodule=tiny_data(val_size=32))
    said = [str(w.message) for w in caught if "the dataset has only" in str(w.message)]
    assert len(said) == 1 and "discovery.probes_per_class=20 (x 4 classes)" in said[0], said
    assert "probes.num_probes" not in said[0]
