"""A SegFormer trained by ``train.py fit --config configs/planted_segformer.yaml`` with the callback:
what it logged to an offline W&B run, read back from the run's files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import wandb
from PIL import Image

import train
from tests.callbacks.wandb_files import find_runs, use_offline_wandb

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")]
CONFIG = Path(__file__).resolve().parents[2] / "configs" / "planted_segformer.yaml"
P = "gradskip/"
PROBES = 8
HEADS = [1, 2, 2, 4]  # per stage, one block each: the padded head statistics keep each stage's count


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("segformer_run")
    with pytest.MonkeyPatch.context() as mp:
        use_offline_wandb(mp, root)
        train.main([
            "fit", "--config", str(CONFIG), "--trainer.max_epochs=2", "--trainer.enable_progress_bar=false",
            f"--trainer.logger.init_args.save_dir={root}", f"--trainer.default_root_dir={root}",
            "--data.train_size=64", "--data.val_size=32", "--data.test_size=32",
            "--model.hidden_sizes=[8, 8, 16, 16]", "--model.depths=[1, 1, 1, 1]", "--model.decoder_hidden_size=16",
            f"--trainer.callbacks.probes.num_probes={PROBES}", "--trainer.callbacks.scores.insertion_steps=8",
        ])  # fmt: skip
        wandb.finish()
    (result,) = find_runs(root)
    return result


def _rows(run):
    return run.rows_with(f"faithfulness/{P}insertion")


def test_every_epoch_logs_segmentation_scores_of_both_methods(run):
    first, second = _rows(run)
    assert [first[f"{P}epoch"], second[f"{P}epoch"]] == [0, 1]
    for row in (first, second):
        for method in ("", "/rollout"):
            for name in ("pixel_accuracy", "mean_iou", "average_precision", "pointing_game", "mass/object"):
                assert 0.0 <= row[f"regions/{P}{name}{method}"] <= 1.0, name
            insertion, deletion = (row[f"faithfulness/{P}{k}{method}"] for k in ("insertion", "deletion"))
            assert np.isfinite([insertion, deletion]).all()  # mean region logits: any sign
            assert row[f"faithfulness/{P}ins_minus_del{method}"] == pytest.approx(insertion - deletion, abs=1e-6)
        assert [row[f"gates/{P}layer_{layer}"] for layer in range(4)] == pytest.approx([0.5] * 4, abs=0.5)
        assert f"gates/{P}layer_4" not in row  # one gate per block: 4 blocks
    assert -1.0 <= second[f"drift/{P}prev/spearman"] <= 1.0 and f"drift/{P}prev/spearman" not in first


def test_head_statistics_keep_each_stages_heads(run):
    first, _ = _rows(run)
    for layer, heads in enumerate(HEADS):
        hist = first[f"heads/{P}omega/layer_{layer}"]
        assert hist["_type"] == "histogram" and sum(hist["values"]) == PROBES * heads  # no NaN padding counted
    image = np.asarray(Image.open(run.root / "files" / first[f"heads/{P}omega"]["path"]))
    assert image.shape[:2] == (4 * 16, max(HEADS) * 16)  # layer x head cells of 16 px


def test_overlays_table_and_maps_file(run):
    _, second = _rows(run)
    grid = np.asarray(Image.open(run.root / "files" / second[f"probes/{P}overlays"]["path"]))
    assert grid.dtype == np.uint8 and grid.shape[2] == 3 and grid.std() > 10
    table = json.loads((run.root / "files" / second[f"probes/{P}table"]["path"]).read_text())
    assert {"pixel_accuracy", "mean_iou", "ap", "mass/object"} <= set(table["columns"])
    assert len(table["data"]) == PROBES
    with np.load(run.root / "gradskip" / "maps" / "epoch_0001.npz") as saved:
        assert saved["maps"].shape == (PROBES, 64, 64) and saved["token_maps"].shape == (PROBES, 16, 16)
        np.testing.assert_allclose(saved["token_maps"].sum(axis=(1, 2)), 1.0, rtol=1e-5)
        assert saved["targets"].min() >= 1  # the square's class, never the background
        for name in ("pixel_accuracy", "mean_iou", "average_precision"):
            assert saved[name].mean() == pytest.approx(second[f"regions/{P}{name}"], abs=1e-6)
