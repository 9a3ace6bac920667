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
from gradskip_lightning.engine.output.summary import SummarySink
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
    assert all(sorted(steps) == [0, 1] for steps in run.images.values()), dict(run.images)  # epochs: the UI opens on 0
    assert run.client.get_run(run.run_id).data.tags.get("mlflow.loggedImages") == "True"  # the UI's image charts


def test_each_image_says_what_it_is_above_it_and_is_large_enough_to_read(run, tmp_path):
    probe_id = run.callback.monitor.source.probes.ids[0].item()
    overlay = _png(run, run.images[f"probes/{P}overlay/probe_{probe_id}"][1], tmp_path)
    side = 3 * DISPLAY  # the display-size overlay enlarged by the whole factor reaching 384 px
    strip = overlay.shape[0] - side  # the title above it: lines of 14 px text (18 px each) on white
    assert overlay.shape[1] == side and strip in (2 * 18 + 6, 3 * 18 + 6), overlay.shape
    assert (overlay[:strip] < 128).any() and np.median(overlay[:strip]) == 255 and overlay[strip:].std() > 10
    means = _png(run, run.images[f"discovery/{P}class_means"][1], tmp_path)
    histogram = _png(run, run.images[f"heads/{P}omega/layer_0"][0], tmp_path)
    grid = _png(run, run.images[f"probes/{P}overlays"][0], tmp_path)
    assert min(image.shape[1] for image in (means, histogram, grid)) >= 384
    assert (histogram[-96:] == np.array([31, 119, 180])).all(axis=2).any()  # bars drawn (the histogram's blue)


def test_image_titles_name_the_picture_the_epoch_and_the_key():
    from gradskip_lightning.engine.output.sinks import image_title

    assert image_title(f"heads/{P}omega/layer_1", 2, "gradskip") == (
        f"gradskip head omega of layer 1: histogram over probes and heads, epoch 2 (heads/{P}omega/layer_1)"
    )
    assert image_title(f"probes/{P}overlays/rollout", 0, "gradskip").startswith("rollout relevance overlays")
    assert image_title(f"discovery/{P}class_means", 4, "gradskip").startswith("discovery: each class's mean")
    assert image_title("something/else", 1, "gradskip") == "something/else, epoch 1"


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
    assert steps == {"probes/gs1/overlays": [0], "heads/gs1/omega/layer_0": [0]}  # at the report's epoch
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
    assert _kinds(tmp_path, [csv]) == [MapsFileSink, ImageFileSink, ScalarSink, SummarySink]
    assert _kinds(tmp_path, [board, csv]) == [
        MapsFileSink, ImageFileSink, TensorBoardSink, ScalarSink, ScalarSink, SummarySink
    ]  # fmt: skip
    mlflow_logger = MLFlowLogger(experiment_name="sinks", **store)
    assert _kinds(tmp_path, [csv, mlflow_logger]) == [MapsFileSink, MLflowSink, ScalarSink, ScalarSink, SummarySink]


def test_with_wandb_too_both_get_the_images_and_mlflow_uploads_the_wandb_runs_maps_folder(tmp_path, store):
    wandb_logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="gradskip-test")
    sinks = _sinks(tmp_path, [wandb_logger, MLFlowLogger(experiment_name="both", **store)])
    assert [type(sink) for sink in sinks] == [MapsFileSink, MLflowSink, WandbSink, ScalarSink, SummarySink]
    maps, uploaded = sinks[0].folder, sinks[1].maps_dir
    assert maps == uploaded == Path(wandb_logger.experiment.dir).parent / "gradskip" / "maps"


def test_the_fit_ends_with_a_summary_in_the_mlflow_run(run, tmp_path):
    """The end-of-fit block (also printed): first and last epoch's scores, drift; the run's summary.txt."""
    assert f"{P}summary.txt" in {info.path for info in run.client.list_artifacts(run.run_id, P.strip("/"))}
    text = Path(run.client.download_artifacts(run.run_id, f"{P}summary.txt", str(tmp_path))).read_text()
    history = [m.value for m in run.client.get_metric_history(run.run_id, f"faithfulness/{P}insertion")]
    assert text.startswith("GradSkip summary (gradskip), epoch 0 -> 1:")
    assert f"insertion    {history[0]:.3f} -> {history[-1]:.3f}" in text
    assert "drift        Spearman" in text and "flagged classes (discovery)" in text


def test_the_summary_names_flagged_classes_with_their_pictures(tmp_path, caplog):
    import logging

    sheet = ProbeSheet([0], ["a"], np.zeros(1, np.int64), ["cat", "dog"], np.zeros((1, 8, 8, 3), np.uint8))
    sink = SummarySink(tmp_path, P)
    picture = np.full((8, 8, 3), 200, np.uint8)
    scalars = {f"{P}epoch": 0.0, f"faithfulness/{P}insertion": 0.25, f"discovery/{P}flagged": 0.0}
    sink.log(EpochReport(0, 3, scalars), sheet)
    flagged = EpochReport(1, 7, {**scalars, f"{P}epoch": 1.0, f"faithfulness/{P}insertion": 0.5})
    flagged.images[f"discovery/{P}strategy_maps/class_1"] = picture
    flagged.images[f"discovery/{P}brightness/transfer/class_0"] = picture
    sink.log(flagged, sheet)
    sink.log(EpochReport(0, 0, {f"{P}validate/epoch": 0.0}), sheet)  # validate(): not part of the fit's summary
    thinned = {f"{P}epoch": 2.0, f"faithfulness/{P}insertion": float("nan")}  # a budget left the scores out
    sink.log(EpochReport(2, 9, thinned), sheet)
    with caplog.at_level(logging.INFO):
        sink.finish()
    hotspot = tmp_path / "flagged" / "class_1_hotspot_epoch_0001.png"
    assert np.asarray(Image.open(hotspot)).mean() == 200
    assert sink.text().splitlines() == [
        "GradSkip summary (), epoch 0 -> 2:",
        "  insertion    0.250 -> 0.500 (epoch 1: not computed since)",
        "  flagged classes (discovery):",
        f"    class 0 (cat), brightness, from epoch 1: {tmp_path / 'flagged' / 'class_0_brightness_epoch_0001.png'}",
        f"    class 1 (dog), hotspot, from epoch 1: {hotspot}",
    ]
    assert sink.text() in caplog.text


def test_the_summary_says_when_the_discovery_stage_last_ran_if_not_at_the_last_epoch(tmp_path):
    sheet = ProbeSheet([0], ["a"], np.zeros(1, np.int64), ["cat", "dog"], np.zeros((1, 8, 8, 3), np.uint8))
    sink = SummarySink(tmp_path, P)
    assert sink.text() == ""
    sink.log(EpochReport(0, 3, {f"{P}epoch": 0.0}), sheet)  # no discovery stage: nothing said of it
    assert "discovery" not in sink.text()
    for epoch in (1, 2):
        sink.log(EpochReport(epoch, 3, {f"{P}epoch": float(epoch), f"discovery/{P}flagged": 0.0}), sheet)
    assert sink.text().splitlines()[-1] == "  flagged classes (discovery): none"
    sink.log(EpochReport(3, 3, {f"{P}epoch": 3.0}), sheet)  # a budget left the stage out of the last epoch end
    assert sink.text().splitlines()[-1] == "  flagged classes (discovery): none (the stage last ran after epoch 2)"
