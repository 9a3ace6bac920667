"""A real Trainer + WandbLogger (offline) run, read back from the files W&B wrote."""

from __future__ import annotations

import json

import numpy as np
import pytest
import wandb
from lightning.pytorch import seed_everything
from lightning.pytorch.loggers import WandbLogger
from PIL import Image

from gradskip_lightning import GradSkipCallback, MethodSettings, ProbeSettings
from gradskip_lightning.engine.settings import ScoreSettings
from tests.callbacks.helpers import tiny_data, tiny_module, tiny_trainer
from tests.callbacks.wandb_files import find_runs, use_offline_wandb

P = "gradskip/"
NUM_PROBES = 8
LAYERS = 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("wandb_run")
    with pytest.MonkeyPatch.context() as mp:  # module-scoped: set up the offline env here too
        use_offline_wandb(mp, root)
        seed_everything(0)
        scores = ScoreSettings(insertion_steps=8, class_sensitivity=True)  # off by default: one more explain
        callback = GradSkipCallback(
            scores=scores, probes=ProbeSettings(num_probes=NUM_PROBES), methods=MethodSettings(compare=["rollout"])
        )
        logger = WandbLogger(save_dir=str(root), offline=True, project="gradskip-test")
        trainer = tiny_trainer(root, logger=logger, callbacks=[callback])
        trainer.fit(tiny_module(), datamodule=tiny_data())
        wandb.finish()
    (result,) = find_runs(root / "wandb")
    return result


def _rows(run):
    return run.rows_with(f"faithfulness/{P}insertion")


def test_one_row_per_epoch_at_lightnings_epoch_steps(run):
    rows = _rows(run)
    summary = [(row.get("trainer/global_step"), sorted(row)[:3]) for row in run.history]
    assert [row[f"{P}epoch"] for row in rows] == [0, 1], summary
    val_steps = [row["trainer/global_step"] for row in run.rows_with("val/loss")]
    train_steps = [row["trainer/global_step"] for row in run.rows_with("train/loss_epoch")]
    # Lightning logs epoch-end metrics at its count of stepped batches (4 per epoch, less the last).
    assert [row["trainer/global_step"] for row in rows] == val_steps == train_steps == [3, 7]


def test_every_key_is_logged_with_sane_values(run):
    first, second = _rows(run)
    assert not any("/overlay/probe_" in k for k in first)  # per-probe overlays are off by default
    scores = ["insertion", "deletion", "ins_minus_del", "fvt_violation"]
    scalars = [f"faithfulness/{P}{k}{m}" for k in scores for m in ("", "/rollout")]
    scalars += [f"regions/{P}{k}{m}" for k in ("pointing_game", "mass/object", "rank/object") for m in ("", "/rollout")]
    scalars += [f"gates/{P}layer_{layer}" for layer in range(LAYERS)] + [f"{P}time_s", f"{P}epoch"]
    drift = [f"drift/{P}{ref}/{kind}" for ref in ("prev", "first") for kind in ("spearman", "topk_iou")]
    for row in (first, second):
        ours = {k for k in row if P in k}
        sections = {k.split("/")[0] for k in ours}
        assert sections <= {"faithfulness", "regions", "drift", "gates", "heads", "probes", "gradskip"}, sections
        for key in scalars:
            assert isinstance(row[key], (int, float)), key
            assert key == f"{P}time_s" or 0.0 <= row[key] <= 1.0 + (key == f"{P}epoch"), key
        assert row[f"faithfulness/{P}ins_minus_del"] == pytest.approx(
            row[f"faithfulness/{P}insertion"] - row[f"faithfulness/{P}deletion"], abs=1e-6
        )
        assert 0.0 < row[f"{P}time_s"] < 60.0
        for part in ("omega", "grad_flow", "sparsity"):
            assert row[f"heads/{P}{part}"]["_type"] == "image-file"
            for layer in range(LAYERS):
                hist = row[f"heads/{P}{part}/layer_{layer}"]
                assert hist["_type"] == "histogram" and sum(hist["values"]) == NUM_PROBES * 3  # probes x heads
        assert row[f"probes/{P}overlays"]["_type"] == row[f"probes/{P}overlays/rollout"]["_type"] == "image-file"
        assert row[f"probes/{P}table"]["_type"] == "incremental-table-file"
    assert not any(key in first for key in drift)  # nothing to compare with yet
    for key in drift:
        assert -1.0 <= second[key] <= 1.0, key
    assert f"probes/{P}probes" in first and f"probes/{P}probes" not in second


def test_class_sensitivity_is_logged_per_method_and_in_the_table(run):
    assert not ScoreSettings().class_sensitivity
    for row in _rows(run):
        assert -1.0 <= row[f"faithfulness/{P}class_sensitivity"] <= 1.0
        # rollout does not read the class: the runner-up's map is the same map
        assert row[f"faithfulness/{P}class_sensitivity/rollout"] == pytest.approx(1.0)
    _, second = _rows(run)
    table = json.loads((run.root / "files" / second[f"probes/{P}table"]["path"]).read_text())
    (epoch_file,) = run.root.glob("gradskip/maps/epoch_0001.npz")
    with np.load(epoch_file) as saved:
        values = saved["class_sensitivity"]
        assert values.shape == (NUM_PROBES,) and np.nanmean(values) == pytest.approx(
            second[f"faithfulness/{P}class_sensitivity"], abs=1e-6
        )
        index = table["columns"].index("class_sensitivity")
        np.testing.assert_allclose([r[index] for r in table["data"]], values, atol=1e-6)


def test_grid_is_a_uint8_colour_image(run):
    first, _ = _rows(run)
    media = first[f"probes/{P}overlays"]
    pixels = np.asarray(Image.open(run.root / "files" / media["path"]))
    assert pixels.dtype == np.uint8 and pixels.shape[2] == 3 and pixels.shape[0] >= 2 * 128
    assert pixels.std() > 10  # a real colour map over the images, not a black square


def test_probe_images_are_uploaded_once_and_maps_artifact_is_logged(run):
    def images(artifact):
        return {entry.digest for entry in artifact.manifest.contents if entry.path.endswith(".png")}

    probes = [a for a in run.artifacts if "gradskipprobes" in a.name]
    increments = [a for a in run.artifacts if a.type == "wandb-run-incremental-table"]
    assert len(probes) == 1 and len(images(probes[0])) == NUM_PROBES
    assert len(increments) == 2
    for increment in increments:  # each increment holds only its epoch's overlays
        assert len(images(increment)) == NUM_PROBES and not images(increment) & images(probes[0])
    (maps,) = [a for a in run.artifacts if a.type == "gradskip-maps"]
    assert sorted(e.path for e in maps.manifest.contents) == ["epoch_0000.npz", "epoch_0001.npz", "probes.npz"]


def test_table_rows_and_npz_match_the_logged_scores(run):
    _, second = _rows(run)
    table = json.loads((run.root / "files" / second[f"probes/{P}table"]["path"]).read_text())
    assert table["columns"][:4] == ["epoch", "probe_id", "overlay", "label"]
    assert {"mass/object", "rank/object", "pointing_hit"} <= set(table["columns"])
    assert len(table["data"]) == NUM_PROBES and {r[0] for r in table["data"]} == {1}
    (epoch_file,) = run.root.glob("gradskip/maps/epoch_0001.npz")
    with np.load(epoch_file) as saved:
        assert saved["maps"].shape == (NUM_PROBES, 32, 32)
        assert saved["insertion"].mean() == pytest.approx(second[f"faithfulness/{P}insertion"], abs=1e-6)
        assert list(saved["region_names"]) == ["object"] and saved["region_mass"].shape == (NUM_PROBES, 1)
        assert saved["region_mass"].mean() == pytest.approx(second[f"regions/{P}mass/object"], abs=1e-6)
        for column, values in (("insertion", saved["insertion"]), ("mass/object", saved["region_mass"][:, 0])):
            index = table["columns"].index(column)
            np.testing.assert_allclose([r[index] for r in table["data"]], values, atol=1e-6)


def test_timeline_renders_from_the_wandb_run_folder(run, tmp_path):
    from gradskip_lightning.timeline import CHART_INCHES, GAP_INCHES, HEADER_INCHES, ROW_INCHES, bands, main

    out = main([str(run.root), "-o", str(tmp_path / "timeline.png")])
    count = bands(NUM_PROBES, 3, ROW_INCHES, HEADER_INCHES + CHART_INCHES)  # image + 2 epochs a band
    assert count == 2
    height = (HEADER_INCHES + ROW_INCHES * NUM_PROBES / count + CHART_INCHES) * 100  # header, probes, region chart
    assert Image.open(out).size == (int((1.5 * 3 * count + GAP_INCHES) * 100), int(height))


def test_the_end_of_fit_summary_is_in_the_runs_summary(run):
    text = run.summary["gradskip/summary"]
    insertion = [row[f"faithfulness/{P}insertion"] for row in run.rows_with(f"faithfulness/{P}insertion")]
    assert text.startswith("GradSkip summary (gradskip), epoch 0 -> 1:")
    assert f"insertion    {insertion[0]:.3f} -> {insertion[-1]:.3f}" in text and "mass on object" in text
