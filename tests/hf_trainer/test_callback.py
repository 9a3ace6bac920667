"""GradSkipTrainerCallback with a real transformers.Trainer fine-tuning a tiny HF ViT: the maps files,
the scores in the evaluation's metrics and the log history, metric_for_best_model, the schedule
under each eval_strategy, invisibility to training, and setup errors before the first step."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from transformers import ViTImageProcessor

from gradskip_lightning import (
    DiscoveryStage,
    MethodSettings,
    Normalisation,
    ProbeImages,
    ProbeSettings,
    ScoreSettings,
    explainer_for,
)
from gradskip_lightning.engine.output.files import read_maps
from gradskip_lightning.engine.setup import data_setup
from gradskip_lightning.hf_trainer import GradSkipTrainerCallback
from gradskip_lightning.hf_trainer.host import model_data
from tests.hf_trainer.helpers import IMAGE_SIZE, PATCH, SquareItems, tiny_trainer, tiny_vit

FAST = dict(probes=ProbeSettings(num_probes=6), scores=ScoreSettings(insertion_steps=4), progress=False)
INSERTION = "faithfulness/gradskip/insertion"


def _rows(trainer, key: str) -> list[dict[str, float]]:
    return [row for row in trainer.state.log_history if key in row]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """Two epochs of 3 steps, evaluated and checkpointed at each end, the best checkpoint chosen by the
    callback's insertion score; then one evaluation outside training."""
    out = tmp_path_factory.mktemp("hf_fit")
    callback = GradSkipTrainerCallback(**FAST, methods=MethodSettings(compare=["rollout"]))
    trainer = tiny_trainer(
        out,
        [callback],
        save_strategy="epoch",
        save_only_model=True,
        metric_for_best_model=INSERTION,
        greater_is_better=True,
    )
    trainer.train()
    evaluated = trainer.evaluate()
    return trainer, callback, out, evaluated


def test_maps_files_are_written_per_trained_epoch(fitted):
    trainer, callback, out, _ = fitted
    record = read_maps(out / "gradskip" / "maps")
    assert [int(e["epoch"]) for e in record.epochs] == [0, 1]  # not the evaluation outside training
    assert [int(e["step"]) for e in record.epochs] == [3, 6]  # the Trainer's global_step at each evaluation
    probes = callback.monitor.source.probes
    np.testing.assert_array_equal(record.probe_ids, probes.ids.numpy())
    assert sorted(record.labels.tolist()) == [0, 0, 1, 1, 2, 2]  # stratified over the 3 classes
    for epoch in record.epochs:
        assert epoch["maps"].shape == (6, IMAGE_SIZE, IMAGE_SIZE)
        assert epoch["token_maps"].shape == (6, IMAGE_SIZE // PATCH, IMAGE_SIZE // PATCH)
        assert str(epoch["method"]) == "gradskip" and np.isfinite(epoch["maps"]).all()
    assert not np.array_equal(record.epochs[0]["maps"], record.epochs[1]["maps"])  # the model trained between
    assert (out / "gradskip" / "images" / "epoch_0001" / "probes_gradskip_overlays.png").is_file()


def test_scores_are_rows_of_the_log_history_at_the_evaluations_steps(fitted):
    trainer, _, out, _ = fitted
    rows = [row for row in _rows(trainer, f"eval_{INSERTION}")]
    assert [(row["step"], row["epoch"], row["eval_gradskip/epoch"]) for row in rows] == [(3, 1.0, 0.0), (6, 2.0, 1.0)]
    record = read_maps(out / "gradskip" / "maps")
    for row, epoch in zip(rows, record.epochs, strict=True):  # the logged score is the mean of the probes'
        assert row[f"eval_{INSERTION}"] == pytest.approx(float(np.mean(epoch["insertion"])), abs=1e-6)
        assert math.isfinite(row[f"eval_{INSERTION}/rollout"]) and row["eval_gradskip/skipped"] == 0.0
    assert not any(INSERTION in key for row in _rows(trainer, "eval_loss") for key in row)  # the Trainer's own rows


def test_metric_for_best_model_reads_the_callbacks_score(fitted):
    trainer, _, out, _ = fitted
    scores = [row[f"eval_{INSERTION}"] for row in _rows(trainer, f"eval_{INSERTION}")]
    assert trainer.state.best_metric == pytest.approx(max(scores))
    best_step = (3, 6)[int(np.argmax(scores))]
    assert trainer.state.best_model_checkpoint == str(out / f"checkpoint-{best_step}")


def test_an_evaluation_outside_training_is_explained_under_validate_keys(fitted):
    trainer, _, _, evaluated = fitted
    value = evaluated["eval_faithfulness/gradskip/validate/insertion"]
    assert math.isfinite(value) and 0.0 <= value <= 1.0
    assert f"eval_{INSERTION}" not in evaluated  # the training's values are kept apart
    (row,) = _rows(trainer, "eval_faithfulness/gradskip/validate/insertion")
    assert row["step"] == 6 and row["eval_faithfulness/gradskip/validate/insertion"] == value


def test_training_does_not_see_the_callback(fitted, tmp_path):
    trainer, _, _, _ = fitted
    plain = tiny_trainer(tmp_path, [])
    plain.train()
    for (name, ours), theirs in zip(trainer.model.state_dict().items(), plain.model.state_dict().values(), strict=True):
        assert torch.equal(ours, theirs), name


def test_without_evaluations_epoch_ends_explain_every_n_and_the_last(tmp_path):
    """eval_strategy="no", every second of 3 epochs: epoch 1 at its end, epoch 2 (not due) at the end of training."""
    callback = GradSkipTrainerCallback(**FAST, every_n_epochs=2)
    trainer = tiny_trainer(tmp_path, [callback], eval_strategy="no", num_train_epochs=3)
    trainer.train()
    record = read_maps(tmp_path / "gradskip" / "maps")
    assert [(int(e["epoch"]), int(e["step"])) for e in record.epochs] == [(1, 6), (2, 9)]
    assert [row["eval_gradskip/epoch"] for row in _rows(trainer, f"eval_{INSERTION}")] == [1.0, 2.0]


def test_evaluations_inside_epochs_are_not_explained_the_epoch_ends_are(tmp_path):
    """eval_strategy="steps" every 2 of 3 steps: step 2 and 4 are inside epochs (said once), epoch 0
    ends without an evaluation (its end explains), step 6 ends epoch 1."""
    callback = GradSkipTrainerCallback(**FAST)
    trainer = tiny_trainer(tmp_path, [callback], eval_strategy="steps", eval_steps=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    said = [w for w in caught if "explains at the end of each epoch only" in str(w.message)]
    assert len(said) == 1
    record = read_maps(tmp_path / "gradskip" / "maps")
    assert [(int(e["epoch"]), int(e["step"])) for e in record.epochs] == [(0, 3), (1, 6)]
    steps = [row["step"] for row in _rows(trainer, "eval_loss")]
    assert steps == [2, 4, 6]
    assert [row["step"] for row in _rows(trainer, f"eval_{INSERTION}")] == [3, 6]


def test_given_probes_and_the_discovery_stage(tmp_path):
    data = SquareItems(6, seed=5)
    probes = ProbeImages(data.images, data.labels)
    discovery = DiscoveryStage(probes_per_class=2)
    callback = GradSkipTrainerCallback(probes, **FAST, discovery=discovery)
    trainer = tiny_trainer(tmp_path, [callback], num_train_epochs=1)
    trainer.train()
    (epoch,) = read_maps(tmp_path / "gradskip" / "maps").epochs
    np.testing.assert_array_equal(epoch["probe_ids"], np.arange(6))
    (row,) = _rows(trainer, f"eval_{INSERTION}")
    assert row["eval_discovery/gradskip/skipped"] == 0.0
    assert {f"eval_discovery/gradskip/suspicion/class_{c}" for c in range(3)} <= set(row)
    assert (tmp_path / "gradskip" / "images" / "epoch_0000" / "discovery_gradskip_class_means.png").is_file()


# ------------------------------------------------------------------------------------- refused before training


def _refused_before_a_step(tmp_path, callback, model=None):
    trainer = tiny_trainer(tmp_path, [callback], model=model)
    with pytest.raises((ValueError, TypeError)) as raised:
        trainer.train()
    assert trainer.state.global_step == 0
    return str(raised.value)


def test_half_precision_weights_are_refused_before_training(tmp_path):
    message = _refused_before_a_step(tmp_path, GradSkipTrainerCallback(**FAST), tiny_vit().to(torch.bfloat16))
    assert "torch.bfloat16" in message and "bf16=True" in message


def test_a_model_of_no_supported_family_is_refused_before_training(tmp_path):
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(embedding_size=8, hidden_sizes=[8, 8], depths=[1, 1], num_labels=3)
    message = _refused_before_a_step(tmp_path, GradSkipTrainerCallback(**FAST), ResNetForImageClassification(config))
    assert "ResNetForImageClassification" in message and "hf_vit" in message and len(message) < 450, message


def test_given_probes_of_the_wrong_size_are_refused_before_training(tmp_path):
    probes = ProbeImages(torch.zeros(3, 3, 24, 24), torch.tensor([0, 1, 2]))
    message = _refused_before_a_step(tmp_path, GradSkipTrainerCallback(probes, **FAST))
    assert "24" in message and "32" in message


def test_arguments_are_validated_where_they_are_given():
    with pytest.raises(TypeError, match="probe_images must be a ProbeImages"):
        GradSkipTrainerCallback(torch.zeros(2, 3, 32, 32))
    with pytest.raises(ValueError, match="every_n_epochs must be a positive integer"):
        GradSkipTrainerCallback(every_n_epochs=0)
    with pytest.raises(ValueError, match="outside the run folder"):
        GradSkipTrainerCallback(log_prefix="../elsewhere/")


def test_metric_for_best_model_on_a_score_not_explained_every_epoch_is_refused_before_training(tmp_path):
    callback = GradSkipTrainerCallback(**FAST, every_n_epochs=2)
    trainer = tiny_trainer(tmp_path, [callback], save_strategy="epoch", metric_for_best_model=INSERTION)
    with pytest.raises(ValueError, match=r"every_n_epochs=2 the evaluations of the first 1 epoch\(s\) have none"):
        trainer.train()
    assert trainer.state.global_step == 0


def test_the_normalisation_is_an_argument_kept_in_the_checkpoints_state_and_taken_over_the_image_processors():
    callback = GradSkipTrainerCallback(normalisation={"mean": [0.4, 0.5, 0.6], "std": [0.2, 0.2, 0.2]}, **FAST)
    assert callback.normalisation == Normalisation(mean=(0.4, 0.5, 0.6), std=(0.2, 0.2, 0.2))
    rebuilt = GradSkipTrainerCallback(**callback.state()["args"])  # as transformers restores a checkpoint's
    assert rebuilt.normalisation == callback.normalisation
    assert GradSkipTrainerCallback(**GradSkipTrainerCallback(**FAST).state()["args"]).normalisation is None
    model = tiny_vit()
    processor = ViTImageProcessor(image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    explainer = explainer_for(model)
    given = data_setup(explainer, model_data(model, processor), callback.normalisation, False)
    assert given.normalisation == callback.normalisation  # the front door's over the image processor's
    default = data_setup(explainer, model_data(model, processor), None, False)
    assert default.normalisation == Normalisation(mean=(0.5,) * 3, std=(0.5,) * 3)
    with pytest.raises(ValueError, match=r"normalisation\.std must be positive"):
        GradSkipTrainerCallback(normalisation={"mean": [0.5], "std": [0.0]})
