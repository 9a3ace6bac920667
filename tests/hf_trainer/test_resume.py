"""GradSkipTrainerCallback across ``trainer.train(resume_from_checkpoint=...)``: a fresh Trainer and callback
resumed from an epoch's checkpoint log the drift and discovery peaks the uninterrupted run logs, from the
state the checkpoint's ``trainer_state.json`` keeps (``ExportableState``); without that state they differ."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
from transformers import ViTForImageClassification

from gradskip_lightning import DiscoveryStage, ProbeSettings, ScoreSettings
from gradskip_lightning.engine.output.files import read_maps
from gradskip_lightning.hf_trainer import GradSkipTrainerCallback
from tests.hf_trainer.helpers import tiny_trainer

EPOCHS = 3
STEPS_PER_EPOCH = 3
#: the values that carry over a fit: drift against the previous and the first explained epoch, the peaks
CARRIED = ("drift/gradskip/prev/", "drift/gradskip/first/", "discovery/gradskip/peak_suspicion")


def _callback(probe_seed: int = 0) -> GradSkipTrainerCallback:
    return GradSkipTrainerCallback(
        probes=ProbeSettings(num_probes=6, probe_seed=probe_seed),
        scores=ScoreSettings(insertion_steps=4),
        discovery=DiscoveryStage(probes_per_class=2),
        progress=False,
    )


def _last_row(trainer) -> dict[str, float]:
    """The explained scalars of the last epoch (``eval_`` dropped)."""
    rows = [row for row in trainer.state.log_history if "eval_gradskip/epoch" in row]
    assert rows[-1]["eval_gradskip/epoch"] == EPOCHS - 1
    return {key.removeprefix("eval_"): value for key, value in rows[-1].items() if key.startswith("eval_")}


def _carried(row: dict[str, float]) -> dict[str, float]:
    return {key: value for key, value in row.items() if key.startswith(CARRIED)}


def _assert_same(resumed: dict[str, float], expected: dict[str, float]) -> None:
    """The same keys and values, bit for bit (NaN where NaN: a class with no finite suspicion yet)."""
    assert sorted(resumed) == sorted(expected)
    np.testing.assert_array_equal([resumed[key] for key in sorted(resumed)], [expected[key] for key in sorted(resumed)])


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Three epochs, checkpointed at each end (optimizer, scheduler and RNG states too)."""
    out = tmp_path_factory.mktemp("hf_uninterrupted")
    trainer = tiny_trainer(out, [_callback()], num_train_epochs=EPOCHS, save_strategy="epoch")
    trainer.train()
    return out, _last_row(trainer)


def _resume(out, checkpoint, probe_seed: int = 7, **kwargs) -> tuple[dict[str, float], GradSkipTrainerCallback]:
    """A fresh Trainer and callback (probes of another seed: the checkpoint's win) resumed from ``checkpoint``,
    with no warning of the callback's. The model is read with ``from_pretrained``: the Trainer's own reload
    (``load_state_dict`` of the saved file) misses every ViT layer in transformers 5.x (the file keeps the
    older key names)."""
    callback = _callback(probe_seed)
    model = ViTForImageClassification.from_pretrained(checkpoint)
    trainer = tiny_trainer(out, [callback], model, num_train_epochs=EPOCHS, save_strategy="no", **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train(resume_from_checkpoint=str(checkpoint))
    assert not [str(w.message) for w in caught if "GradSkip" in str(w.message)]
    return _last_row(trainer), callback


def test_a_resumed_run_logs_the_drift_and_peaks_of_the_uninterrupted_one(uninterrupted, tmp_path):
    out, expected = uninterrupted
    resumed, _ = _resume(tmp_path, out / f"checkpoint-{STEPS_PER_EPOCH * (EPOCHS - 1)}")
    assert resumed["faithfulness/gradskip/insertion"] == expected["faithfulness/gradskip/insertion"]  # same weights
    carried = _carried(expected)
    assert len(carried) == 4 + 1 + 3 and all(isinstance(value, float) for value in carried.values())
    _assert_same(_carried(resumed), carried)
    (epoch,) = read_maps(tmp_path / "gradskip" / "maps").epochs  # the resumed run explains its one epoch
    assert int(epoch["epoch"]) == EPOCHS - 1 and int(epoch["step"]) == STEPS_PER_EPOCH * EPOCHS


def test_a_resume_restored_by_the_trainer_itself_carries_the_same_state(uninterrupted, tmp_path):
    """``restore_callback_states_from_checkpoint``: the Trainer builds the callback again from the saved arguments."""
    out, expected = uninterrupted
    checkpoint = out / f"checkpoint-{STEPS_PER_EPOCH * (EPOCHS - 1)}"
    resumed, given = _resume(tmp_path, checkpoint, restore_callback_states_from_checkpoint=True)
    _assert_same(_carried(resumed), _carried(expected))
    assert given.monitor.probes is None  # the Trainer explained with the callback it rebuilt, not this one


def test_without_the_saved_state_the_resumed_run_would_differ(uninterrupted, tmp_path):
    out, expected = uninterrupted
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(out / f"checkpoint-{STEPS_PER_EPOCH * (EPOCHS - 1)}", checkpoint)
    state_file = checkpoint / "trainer_state.json"
    state = json.loads(state_file.read_text())
    del state["stateful_callbacks"]["GradSkipTrainerCallback"]
    state_file.write_text(json.dumps(state))
    resumed, _ = _resume(tmp_path / "run", checkpoint, probe_seed=0)
    assert resumed["faithfulness/gradskip/insertion"] == expected["faithfulness/gradskip/insertion"]  # same probes
    carried = _carried(resumed)
    assert not any(key.startswith("drift/") for key in carried)  # no references to drift from
    assert carried != _carried(expected)
