"""report_to: the explained epochs in the W&B run the Trainer's WandbCallback started (offline, read
back from its files), in TensorBoard beside the Trainer's own scalars and in the MLflow run the
Trainer's MLflowCallback started (a real SQLite store, read back); other integrations named."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import wandb
from PIL import Image

from gradskip_lightning import MethodSettings, ProbeSettings, ScoreSettings
from gradskip_lightning.hf_trainer import GradSkipTrainerCallback
from gradskip_lightning.hf_trainer.loggers import trainer_outputs
from tests.callbacks.wandb_files import find_runs
from tests.hf_trainer.helpers import tiny_trainer

FAST = dict(probes=ProbeSettings(num_probes=6), scores=ScoreSettings(insertion_steps=4), progress=False)
INSERTION = "faithfulness/gradskip/insertion"


def test_one_wandb_row_per_explained_epoch_at_the_trainers_global_step(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_PROJECT", "gradskip-test")
    callback = GradSkipTrainerCallback(**FAST, methods=MethodSettings(compare=["rollout"]))
    trainer = tiny_trainer(tmp_path / "out", [callback], report_to=["wandb"])
    trainer.train()
    wandb.finish()
    (run,) = find_runs(tmp_path / "wandb_env")
    ours = run.rows_with(INSERTION)
    assert [row["train/global_step"] for row in ours] == [3, 6]
    assert [row["train/global_step"] for row in run.rows_with("eval/loss")] == [3, 6]  # the Trainer's own rows
    assert [row["gradskip/epoch"] for row in ours] == [0, 1]
    first = ours[0]
    assert {f"{INSERTION}/rollout", "gates/gradskip/layer_1", "gradskip/time_s"} <= set(first)
    assert first["probes/gradskip/overlays"]["_type"] == "image-file"
    assert first["probes/gradskip/probes"]["_type"] == "table-file" and "probes/gradskip/probes" not in ours[1]
    image = np.asarray(Image.open(run.root / "files" / first["probes/gradskip/overlays"]["path"]))
    assert image.ndim == 3 and image.std() > 10  # a colour grid, not a blank image
    (artifact,) = [a for a in run.artifacts if a.type == "gradskip-maps"]
    assert {entry.path for entry in artifact.manifest.contents} == {"probes.npz", "epoch_0000.npz", "epoch_0001.npz"}


def test_tensorboard_gets_images_and_scalars_beside_the_trainers(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = tmp_path / "tb"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(folder))
    trainer = tiny_trainer(tmp_path / "out", [GradSkipTrainerCallback(**FAST)], report_to=["tensorboard"])
    trainer.train()
    events = EventAccumulator(str(folder), size_guidance={"images": 0, "histograms": 0, "scalars": 0})
    events.Reload()
    tags = events.Tags()
    assert [e.step for e in events.Scalars(INSERTION)] == [e.step for e in events.Scalars("eval/loss")] == [3, 6]
    assert {"probes/gradskip/overlays", "heads/gradskip/omega"} <= set(tags["images"])
    assert "heads/gradskip/omega/layer_0" in tags["histograms"]
    grid = events.Images("probes/gradskip/overlays")[-1]
    assert np.asarray(Image.open(io.BytesIO(grid.encoded_image_string))).std() > 10


def test_mlflow_gets_scalars_at_the_trainers_step_images_at_the_epoch_and_the_maps(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    from tests.engine.output.test_mlflow import _images

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.chdir(tmp_path)  # the store's default artifact root is ./mlruns
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "hf-gradskip")
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)  # the Trainer's MLflowCallback keeps a URI set before (by another test) over the env
    try:
        trainer = tiny_trainer(tmp_path / "out", [GradSkipTrainerCallback(**FAST)], report_to=["mlflow"])
        trainer.train()
    finally:
        mlflow.set_tracking_uri(previous)
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("hf-gradskip").experiment_id])
    run_id = run.info.run_id
    assert [m.step for m in client.get_metric_history(run_id, INSERTION)] == [3, 6]
    assert [m.step for m in client.get_metric_history(run_id, "eval_loss")] == [3, 6]  # the Trainer's own
    assert [m.value for m in client.get_metric_history(run_id, "gradskip/epoch")] == [0, 1]
    images = _images(client, run_id)
    assert {"probes/gradskip/overlays", "heads/gradskip/omega"} <= set(images)
    assert all(sorted(steps) == [0, 1] for steps in images.values())
    listed = {info.path for info in client.list_artifacts(run_id, "gradskip/maps")}
    assert listed == {f"gradskip/maps/{name}" for name in ("probes.npz", "epoch_0000.npz", "epoch_0001.npz")}
    summary = client.download_artifacts(run_id, "gradskip/summary.txt", str(tmp_path))
    assert open(summary).read().startswith("GradSkip summary (gradskip), epoch 0 -> 1:")


def test_the_default_tensorboard_folder_and_unwritten_integrations(tmp_path, monkeypatch):
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = trainer_outputs(["tensorboard", "comet_ml"], tmp_path / "gradskip", "gradskip/")
    assert outputs.tensorboard is not None and outputs.tensorboard.folder == tmp_path / "gradskip" / "tensorboard"
    assert outputs.wandb_run is None
    (said,) = [str(w.message) for w in caught if "GradSkipTrainerCallback" in str(w.message)]
    assert "['comet_ml']" in said
    assert [type(sink).__name__ for sink in outputs.sinks] == [
        "MapsFileSink", "ImageFileSink", "TensorBoardSink", "ScalarSink", "SummarySink"
    ]  # fmt: skip


def test_wandb_without_an_active_run_writes_the_files_and_says_so(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = trainer_outputs(["wandb"], tmp_path, "gradskip/")
    assert outputs.wandb_run is None and "WandbSink" not in [type(s).__name__ for s in outputs.sinks]
    assert any("no W&B run is active" in str(w.message) for w in caught)


def test_a_failed_upload_of_the_maps_folder_warns_naming_the_run_and_the_folder_and_ends(tmp_path, monkeypatch):
    """The W&B artifact cannot take the maps folder (a file gone before it is hashed: a dangling link): the end of
    training warns, naming the run and the folder that keeps the files, and raises nothing."""
    monkeypatch.setenv("WANDB_PROJECT", "gradskip-test")
    run = wandb.init()
    outputs = trainer_outputs(["wandb"], tmp_path, "gradskip/")
    maps = tmp_path / "maps"
    maps.mkdir()
    np.savez(maps / "epoch_0000.npz", maps=np.zeros((1, 2, 2), np.float32))
    (maps / "epoch_0001.npz").symlink_to(maps / "gone.npz")
    with pytest.warns(UserWarning) as caught:
        outputs.finish()
    wandb.finish()
    (said,) = [str(w.message) for w in caught if "GradSkipCallback" in str(w.message)]
    assert said.startswith(
        "GradSkipCallback: WandbSink failed at the end of fit, the other outputs are written. UploadError: the maps "
        f"folder was not uploaded to the W&B run {run.id} (artifact gradskip-maps-{run.id}) (FileNotFoundError"
    )
    assert said.endswith(f"its files are kept in {maps}")
