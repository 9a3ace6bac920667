"""With an MLFlowLogger the images, the histograms and the maps files go to the MLflow run, next to the
scalars: a real Trainer on a real SQLite store, read back with ``MlflowClient``."""

from __future__ import annotations

import io
import re
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.loggers import CSVLogger, MLFlowLogger, TensorBoardLogger, WandbLogger
from PIL import Image

from gradskip_lightning import DiscoveryStage, GradSkipCallback, ProbeSettings, RenderSettings, ScoreSettings
from gradskip_lightning.callbacks.sinks import make_sinks
from gradskip_lightning.engine.output.files import read_maps
from gradskip_lightning.engine.output.report import EpochReport, ProbeSheet
from gradskip_lightning.engine.output.sinks import (
    ImageFileSink,
    MapsFileSink,
    MLflowSink,
    ScalarSink,
    TensorBoardSink,
    WandbSink,
)
from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer

mlflow = pytest.importorskip("mlflow")  # an MLFlowLogger needs it

P = "gradskip/"
NUM_PROBES, LAYERS, PATCHES = 4, 2, 4  # the tiny ViT: 2 blocks, 4 x 4 patches of 8 px
DISPLAY = RenderSettings().display_size
#: MLflow's step-wise image files: images/<key, "/" -> "~">+step+<step>+timestamp+<ms>+<uuid>.png (before
#: MLflow 3.x: "#" for "/", "%" for "+")
IMAGE_FILE = re.compile(r"images/(?P<key>.+?)[+%]step[+%](?P<step>\d+)[+%]timestamp[+%]\d+[+%][0-9a-f-]+\.png")


def _images(client, run_id: str) -> dict[str, dict[int, str]]:
    """A run's step-wise images: key -> step -> artifact path of the full-size PNG."""
    images: dict[str, dict[int, str]] = defaultdict(dict)
    for info in client.list_artifacts(run_id, "images"):
        match = IMAGE_FILE.fullmatch(info.path)
        if match:
            images[re.sub("[~#]", "/", match["key"])][int(match["step"])] = info.path
    return images


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> dict[str, str]:
    """One SQLite store for the module (creating one runs MLflow's schema migrations: seconds)."""
    root = tmp_path_factory.mktemp("mlflow_store")
    return {"tracking_uri": f"sqlite:///{root}/mlflow.db", "artifact_location": str(root / "artifacts")}


@pytest.fixture(scope="module")
def run(tmp_path_factory, store):
    """Two epochs of the tiny ViT with per-probe overlays and the discovery stage, logged to MLflow."""
    root = tmp_path_factory.mktemp("mlflow_run")
    seed_everything(0)
    logger = MLFlowLogger(**store)
    callback = GradSkipCallback(
        probes=ProbeSettings(num_probes=NUM_PROBES),
        scores=ScoreSettings(insertion_steps=4),
        render=RenderSettings(probe_overlays=True),
        discovery=DiscoveryStage(probes_per_class=2, batch_size=16),
        progress=False,
    )
    trainer = tiny_trainer(root, logger=logger, callbacks=[callback])
    trainer.fit(tiny_module(), datamodule=tiny_data())
    client = mlflow.MlflowClient(tracking_uri=store["tracking_uri"])
    images = _images(client, logger.run_id)
    return SimpleNamespace(
        root=root, client=client, run_id=logger.run_id, trainer=trainer, callback=callback, images=images
    )


def _png(run, path: str, tmp_path: Path) -> np.ndarray:
    """The PNG file of an image artifact, as a (H, W, 3) uint8 array."""
    data = Path(run.client.download_artifacts(run.run_id, path, str(tmp_path))).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    image = Image.open(io.BytesIO(data))
    assert image.mode == "RGB"
    return np.asarray(image)


def test_the_scalars_reach_mlflow_once_at_lightnings_epoch_steps(run):
    history = run.client.get_metric_history(run.run_id, f"faithfulness/{P}insertion")
    val_steps = [m.step for m in run.client.get_metric_history(run.run_id, "val/loss")]
    assert [m.step for m in history] == val_steps == [3, 7]  # one value per epoch, at Lightning's own step
    assert history[-1].value == pytest.approx(float(run.trainer.callback_metrics[f"faithfulness/{P}insertion"]))
    assert all(0.0 <= m.value <= 1.0 for m in history)
    assert len(run.client.get_metric_history(run.run_id, f"{P}time_s")) == 2


def test_every_image_and_histogram_is_a_stepwise_image_under_its_key(run):
    probe_ids = run.callback.monitor.source.probes.ids.tolist()
    expected = {f"probes/{P}overlays", f"discovery/{P}class_means"}
    expected |= {f"probes/{P}overlay/probe_{i}" for i in probe_ids}
    for part in ("omega", "grad_flow", "sparsity"):
        expected |= {f"heads/{P}{part}"} | {f"heads/{P}{part}/layer_{layer}" for layer in range(LAYERS)}
    strategy_maps = {k for k in run.images if k.startswith(f"discovery/{P}strategy_maps/class_")}
    assert set(run.images) - strategy_maps == expected
    assert all(sorted(steps) == [3, 7] for steps in run.images.values()), dict(run.images)
    assert run.client.get_run(run.run_id).data.tags.get("mlflow.loggedImages") == "True"  # the UI's image charts


def test_the_overlay_carries_its_caption_and_the_class_means_grid_its_tiles(run, tmp_path):
    probe_id = run.callback.monitor.source.probes.ids[0].item()
    overlay = _png(run, run.images[f"probes/{P}overlay/probe_{probe_id}"][7], tmp_path)
    assert overlay.shape == (DISPLAY + 12, DISPLAY, 3)  # the caption strip under the overlay
    assert (overlay[DISPLAY:] < 128).any() and overlay[:DISPLAY].std() > 10  # caption text, a coloured map
    means = _png(run, run.images[f"discovery/{P}class_means"][7], tmp_path)
    tile_height, tile_width = DISPLAY + 12, DISPLAY  # each class: its mean map, captioned
    assert means.shape == (2 * (tile_height + 2) + 2, 2 * (tile_width + 2) + 2, 3)  # 4 classes in 2 x 2, pad 2
    histogram = _png(run, run.images[f"heads/{P}omega/layer_0"][3], tmp_path)
    assert histogram.shape == (96 + 12, 256, 3) and (histogram[:96] != 255).any()  # bars drawn


def test_the_maps_files_are_the_runs_artifacts_and_read_back(run, tmp_path):
    listed = [info.path for info in run.client.list_artifacts(run.run_id, f"{P}maps")]
    assert listed == [f"{P}maps/epoch_0000.npz", f"{P}maps/epoch_0001.npz", f"{P}maps/probes.npz"]
    folder = Path(run.client.download_artifacts(run.run_id, f"{P}maps", str(tmp_path)))
    with np.load(folder / "epoch_0001.npz") as epoch:
        assert (int(epoch["epoch"]), int(epoch["step"])) == (1, 7)
        assert epoch["maps"].shape == (NUM_PROBES, 32, 32) and np.isfinite(epoch["maps"]).all()
        assert epoch["token_maps"].shape == (NUM_PROBES, PATCHES, PATCHES)
        np.testing.assert_array_equal(epoch["probe_ids"], run.callback.monitor.source.probes.ids.numpy())
    record = read_maps(folder)  # what the timeline command reads
    assert [int(e["epoch"]) for e in record.epochs] == [0, 1] and not record.skipped


def test_the_local_folder_is_the_runs_own_and_holds_no_png_copies(run):
    folder = run.root / P.strip("/") / run.run_id
    assert sorted(p.name for p in (folder / "maps").iterdir()) == ["epoch_0000.npz", "epoch_0001.npz", "probes.npz"]
    assert not list(run.root.rglob("*.png"))  # the images live in MLflow's artifact store only (no ImageFileSink)


def test_image_keys_lose_the_characters_mlflow_refuses_as_the_scalars_do(tmp_path, store):
    logger = MLFlowLogger(experiment_name="keys", **store)
    sink = MLflowSink(logger, tmp_path / "maps", "gradskip/maps")
    image = np.zeros((8, 8, 3), np.uint8)
    report = EpochReport(0, 5, {"faithfulness/gs+1/insertion": 0.5}, images={"probes/gs+1/overlays": image})
    report.histograms["heads/gs+1/omega/layer_0"] = np.array([0.1, 0.2, 0.2])
    sheet = ProbeSheet([], [], np.zeros(0, np.int64), [], np.zeros((0, 8, 8, 3), np.uint8))  # unused by both
    sink.log(report, sheet)
    with pytest.warns(RuntimeWarning, match="Replacing faithfulness/gs.1/insertion"):
        ScalarSink(logger).log(report, sheet)
    steps = {key: list(by_step) for key, by_step in _images(logger.experiment, logger.run_id).items()}
    assert steps == {"probes/gs1/overlays": [5], "heads/gs1/omega/layer_0": [5]}
    assert logger.experiment.get_metric_history(logger.run_id, "faithfulness/gs1/insertion")[0].step == 5
    sink.finish()  # no maps written: nothing uploaded, no error
    assert not logger.experiment.list_artifacts(logger.run_id, "gradskip")


def test_an_unwritable_artifact_store_warns_each_epoch_and_at_the_end_and_the_fit_finishes(tmp_path, store):
    """The artifact location lies under a file (no folder can be made there, root or not): every upload fails, the
    fit and its MLflow run finish, and the warning names the store and the local folder holding the maps files."""
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    location = blocker / "artifacts"
    logger = MLFlowLogger(tracking_uri=store["tracking_uri"], artifact_location=str(location), experiment_name="out")
    callback = GradSkipCallback(
        probes=ProbeSettings(num_probes=2), scores=ScoreSettings(insertion_steps=2), progress=False
    )
    trainer = tiny_trainer(tmp_path, logger=logger, callbacks=[callback], max_epochs=1, limit_train_batches=1)
    with pytest.warns(UserWarning) as caught:
        trainer.fit(tiny_module(), datamodule=tiny_data())
    ours = [str(w.message) for w in caught if "GradSkipCallback: MLflowSink failed" in str(w.message)]
    maps = tmp_path / P.strip("/") / logger.run_id / "maps"
    assert ours[0].startswith("GradSkipCallback: MLflowSink failed at epoch 0, the other outputs are written.")
    assert ours[-1].startswith("GradSkipCallback: MLflowSink failed at the end of fit, the other outputs are written. ")
    assert f"not uploaded to {location}/{logger.run_id}/artifacts/{P}maps (NotADirectoryError" in ours[-1]
    assert ours[-1].endswith(f"its files are kept in {maps}")
    assert sorted(p.name for p in maps.iterdir()) == ["epoch_0000.npz", "probes.npz"]
    client = mlflow.MlflowClient(tracking_uri=store["tracking_uri"])
    assert client.get_run(logger.run_id).info.status == "FINISHED"
    assert client.get_metric_history(logger.run_id, f"faithfulness/{P}insertion")  # the scalars reached the store


def _sinks(tmp_path: Path, loggers: list) -> list:
    trainer = Trainer(default_root_dir=str(tmp_path), logger=loggers, accelerator="cpu", enable_progress_bar=False)
    return make_sinks(trainer, P, tmp_path / "gradskip")


def _kinds(tmp_path: Path, loggers: list) -> list[type]:
    return [type(sink) for sink in _sinks(tmp_path, loggers)]


def test_mlflow_replaces_the_png_files_and_other_loggers_keep_their_sinks(tmp_path, store):
    csv, board = CSVLogger(str(tmp_path)), TensorBoardLogger(str(tmp_path))
    assert _kinds(tmp_path, [csv]) == [MapsFileSink, ImageFileSink, ScalarSink]
    assert _kinds(tmp_path, [board, csv]) == [MapsFileSink, ImageFileSink, TensorBoardSink, ScalarSink, ScalarSink]
    mlflow_logger = MLFlowLogger(experiment_name="sinks", **store)
    assert _kinds(tmp_path, [csv, mlflow_logger]) == [MapsFileSink, MLflowSink, ScalarSink, ScalarSink]


def test_with_wandb_too_both_get_the_images_and_mlflow_uploads_the_wandb_runs_maps_folder(tmp_path, store):
    wandb_logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="gradskip-test")
    sinks = _sinks(tmp_path, [wandb_logger, MLFlowLogger(experiment_name="both", **store)])
    assert [type(sink) for sink in sinks] == [MapsFileSink, MLflowSink, WandbSink, ScalarSink]
    maps, uploaded = sinks[0].folder, sinks[1].maps_dir
    assert maps == uploaded == Path(wandb_logger.experiment.dir).parent / "gradskip" / "maps"
