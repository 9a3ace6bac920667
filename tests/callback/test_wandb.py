"""A real Trainer + WandbLogger (offline) run, read back from the files W&B wrote."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import wandb
from lightning.pytorch import seed_everything
from lightning.pytorch.loggers import WandbLogger
from PIL import Image

from gradskip_lightning import GradSkipCallback

from .helpers import tiny_data, tiny_module, tiny_trainer
from .wandb_files import find_runs

P = "gradskip/"
NUM_PROBES = 8
LAYERS = 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("wandb_run")
    with pytest.MonkeyPatch.context() as mp:  # module-scoped: set up the offline env here too
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        for var in ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR"):
            (root / var).mkdir()
            mp.setenv(var, str(root / var))
        seed_everything(0)
        callback = GradSkipCallback(num_probes=NUM_PROBES, compare_methods=["rollout"], insertion_steps=8)
        logger = WandbLogger(save_dir=str(root), offline=True, project="gradskip-test")
        trainer = tiny_trainer(root, logger=logger, callbacks=[callback])
        trainer.fit(tiny_module(), datamodule=tiny_data())
        wandb.finish()
    (result,) = find_runs(root / "wandb")
    return result


def _rows(run):
    return run.rows_with(f"{P}insertion")


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
    probe_ids = sorted(int(k.rsplit("_", 1)[1]) for k in first if k.startswith(f"{P}overlay/probe_"))
    assert len(probe_ids) == NUM_PROBES
    scalars = ["insertion", "deletion", "ins_minus_del", "fvt_violation", "pointing_game", "time_s"]
    scalars += [f"gate/layer_{layer}" for layer in range(LAYERS)]
    scalars += [f"compare/rollout/{k}" for k in ("insertion", "deletion", "ins_minus_del", "fvt_violation")]
    drift = [f"drift/{ref}/{kind}" for ref in ("prev", "first") for kind in ("spearman", "topk_iou")]
    for row in (first, second):
        for key in scalars:
            assert isinstance(row[P + key], float), key
        for key in ("insertion", "deletion", "fvt_violation", "pointing_game", "compare/rollout/insertion"):
            assert 0.0 <= row[P + key] <= 1.0, key
        assert row[f"{P}ins_minus_del"] == pytest.approx(row[f"{P}insertion"] - row[f"{P}deletion"], abs=1e-6)
        assert all(0.0 <= row[f"{P}gate/layer_{layer}"] <= 1.0 for layer in range(LAYERS))
        assert 0.0 < row[f"{P}time_s"] < 60.0
        for part in ("omega", "grad_flow", "sparsity"):
            assert row[f"{P}heads/{part}"]["_type"] == "image-file"
            for layer in range(LAYERS):
                hist = row[f"{P}heads/{part}/layer_{layer}"]
                assert hist["_type"] == "histogram" and sum(hist["values"]) == NUM_PROBES * 3  # probes x heads
        assert row[f"{P}overlays"]["_type"] == row[f"{P}compare/rollout/overlays"]["_type"] == "image-file"
        assert row[f"{P}table"]["_type"] == "incremental-table-file"
    assert not any(key in first for key in (P + k for k in drift))  # nothing to compare with yet
    for key in drift:
        assert -1.0 <= second[P + key] <= 1.0, key
    assert f"{P}probes" in first and f"{P}probes" not in second


def test_overlays_are_captioned_uint8_images(run):
    first, _ = _rows(run)
    for key, media in first.items():
        if not key.startswith(f"{P}overlay/probe_"):
            continue
        assert re.fullmatch(r"label=\w+ square pred=\w+ square p=[01]\.\d\d", media["caption"]), media["caption"]
        pixels = np.asarray(Image.open(run.root / "files" / media["path"]))
        assert pixels.shape == (128, 128, 3) and pixels.dtype == np.uint8
        assert pixels.std() > 10  # a real colour map over the image, not a black square


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
    table = json.loads((run.root / "files" / second[f"{P}table"]["path"]).read_text())
    assert table["columns"][:4] == ["epoch", "probe_id", "overlay", "label"]
    assert len(table["data"]) == NUM_PROBES and {r[0] for r in table["data"]} == {1}
    (epoch_file,) = run.root.glob("gradskip/maps/epoch_0001.npz")
    with np.load(epoch_file) as saved:
        assert saved["maps"].shape == (NUM_PROBES, 32, 32)
        assert saved["insertion"].mean() == pytest.approx(second[f"{P}insertion"], abs=1e-6)
        insertion_col = table["columns"].index("insertion")
        np.testing.assert_allclose([r[insertion_col] for r in table["data"]], saved["insertion"], atol=1e-6)


def test_timeline_renders_from_the_wandb_run_folder(run, tmp_path):
    from gradskip_lightning.timeline import main

    out = main([str(run.root), "-o", str(tmp_path / "timeline.png")])
    assert Image.open(out).size == (int(1.5 * 3 * 100), int(1.6 * NUM_PROBES * 100))  # image + 2 epochs
