"""The discovery stage's failure modes: it fails alone (its keys NaN, a skipped flag, fresh values
next time), it is refused where it cannot run, and its messages name the options the user set."""

from __future__ import annotations

import csv
import math
import warnings

import pytest
import torch
from lightning.pytorch import Callback, seed_everything
from lightning.pytorch.loggers import CSVLogger

from gradskip_lightning import DiscoveryStage, GradSkipCallback, ProbeSettings, ScoreSettings, explainer_for
from gradskip_lightning.engine.discovery.stage import Discoverer, StageRun
from gradskip_lightning.engine.probes import ProbeSource
from tests.callbacks.helpers import (
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
        discovery=DiscoveryStage(**{"probes_per_class": 4, **discovery}),
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
        failed = StageRun(None, "discovery: RuntimeError: out of memory")
        return failed if len(calls) == 2 else run(self, *args, **kwargs)

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
    peak = f"{D}peak_suspicion"
    assert all(math.isnan(v) for k, v in failed.items() if k != f"{D}skipped" and not k.startswith(peak)), failed
    assert failed[peak] == first[peak] and failed[f"{peak}/class_0"] == first[f"{peak}/class_0"]  # the fit's, kept
    assert math.isfinite(fresh[suspicion]) and fresh[f"{D}skipped"] == 0.0
    assert math.isfinite(trainer.callback_metrics["faithfulness/gradskip/insertion"])  # the rest of epoch 1 ran
    with open(f"{logger.log_dir}/metrics.csv") as handle:
        rows = {int(float(r["gradskip/epoch"])): r for r in csv.DictReader(handle) if r.get("gradskip/epoch")}
    assert rows[1][f"{D}skipped"] == "1.0" and math.isnan(float(rows[1][suspicion]))  # logged NaN, not the old value
    assert math.isfinite(float(rows[2][suspicion])) and rows[2][f"{D}skipped"] == "0.0"


def test_discovery_on_a_segmentation_model_is_refused_at_setup(tmp_path):
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[_callback()], max_epochs=1)
    with pytest.raises(ValueError, match=r"DiscoveryStage\(\) finds a classifier's shortcuts; .*segmentation"):
        trainer.fit(tiny_segmentation_module(), datamodule=tiny_segmentation_data())


def test_too_few_discovery_probes_are_named_by_the_option_the_user_set(tmp_path):
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[_callback(probes_per_class=20)], max_epochs=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(tiny_module(), datamodule=tiny_data(val_size=32))
    said = [str(w.message) for w in caught if "the dataset has only" in str(w.message)]
    assert len(said) == 1 and "discovery.probes_per_class=20 (x 4 classes)" in said[0], said
    assert "probes.num_probes" not in said[0]


class _Altered(torch.utils.data.Dataset):
    """A dataset whose items ``ids`` have their image filled with ``value``."""

    def __init__(self, dataset, ids: set[int], value: float) -> None:
        self.dataset, self.ids, self.value = dataset, ids, value

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        image, *rest = self.dataset[index]
        return (torch.full_like(image, self.value), *rest) if index in self.ids else (image, *rest)


def _data_altered_at_a_discovery_probe(value: float):
    """tiny_data whose validation item drawn as a discovery probe, and not as a probe, is filled with ``value``;
    (the datamodule, that item's id)."""
    data = tiny_data()
    data.setup("fit")
    probes = set(ProbeSource(None, 4, seed=0).draw(data.val_dataset).ids.tolist())
    discovery = ProbeSource(None, 4 * 4, seed=0).draw(data.val_dataset).ids.tolist()
    only = next(i for i in discovery if i not in probes)
    data.val_dataset = _Altered(data.val_dataset, {only}, value)
    data.setup = lambda stage=None: None  # keep the altered split
    return data, only


def test_a_non_finite_image_among_the_discovery_probes_only_is_refused_at_setup_naming_it(tmp_path):
    data, bad = _data_altered_at_a_discovery_probe(math.inf)
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[_callback()], max_epochs=1)
    with pytest.raises(ValueError, match=rf"discovery probe images \[{bad}\] \(ids\) contain NaN or infinite values"):
        trainer.fit(tiny_module(), datamodule=data)
    assert trainer.current_epoch == 0 and trainer.global_step == 0  # before any training


def test_a_degenerate_discovery_map_is_left_out_of_its_class_named_and_counted(tmp_path):
    data, overflowing = _data_altered_at_a_discovery_probe(1e30)  # finite, but the model overflows on it
    seen = Seen()
    trainer = tiny_trainer(tmp_path, logger=False, callbacks=[_callback(), seen], max_epochs=1, num_sanity_val_steps=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(tiny_module(), datamodule=data)
    said = [str(w.message) for w in caught if "are all zero or not finite" in str(w.message)]
    assert len(said) == 1 and f"discovery probes [{overflowing}] (ids)" in said[0], said
    (epoch,) = seen.epochs
    assert epoch[f"{D}degenerate_maps"] == 1.0 and epoch[f"{D}skipped"] == 0.0
    assert all(math.isfinite(epoch[f"{D}consistency/class_{k}"]) for k in range(4))


def test_the_stage_summarises_only_the_usable_maps():
    data, overflowing = _data_altered_at_a_discovery_probe(1e30)
    module = tiny_module()
    explainer = explainer_for(module)
    discoverer = Discoverer(DiscoveryStage(probes_per_class=4), seed=0)
    discoverer.draw(data.val_dataset, explainer)
    run = discoverer.run(module, {explainer.method: explainer}, batch_size=8, activation="softmax")
    assert run.error is None and run.degenerate == [overflowing]
    probes = discoverer.probes
    label = int(probes.labels[probes.ids.tolist().index(overflowing)])
    expected = torch.bincount(probes.labels, minlength=4)
    expected[label] -= 1
    assert run.found.summary.counts.tolist() == expected.tolist()


def test_flat_settings_are_not_arguments_of_the_callback():
    """Issue 28 item 11: a flat ``num_probes`` beside ``probes=ProbeSettings(...)`` cannot silently drop one."""
    with pytest.raises(TypeError, match="num_probes"):
        GradSkipCallback(num_probes=8, probes=ProbeSettings(num_probes=4))  # type: ignore[call-arg]
