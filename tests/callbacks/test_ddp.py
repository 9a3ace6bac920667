"""A real 2-process DDP run on CPU, for a ViT classifier and a SegFormer: no hang, rank zero logs,
figures equal a single-process run."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from . import ddp_run

SCRIPT = Path(ddp_run.__file__)


def _rows(log_dir: Path, key: str) -> list[dict[str, float]]:
    with open(log_dir / "metrics.csv") as handle:
        return [{k: float(v) for k, v in row.items() if v} for row in csv.DictReader(handle) if row.get(key)]


@pytest.fixture(scope="module", params=["vit", "segformer"])
def ddp_out(request, tmp_path_factory) -> tuple[Path, str]:
    """The output folder of one real 2-process DDP run of ddp_run.py, and the model family."""
    out = tmp_path_factory.mktemp(f"ddp_{request.param}")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), "2", request.param],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out, request.param


@pytest.mark.slow
def test_ddp_two_processes_log_once_and_match_one_process(ddp_out, tmp_path):
    import shutil

    out, family = ddp_out
    shutil.copytree(out, tmp_path, dirs_exist_ok=True)
    ddp_run.main(tmp_path, devices=1, family=family)  # the single-process reference, in this process
    ddp_dir, single_dir = tmp_path / "devices_2" / "version_0", tmp_path / "devices_1" / "version_0"
    for key in ("faithfulness/gradskip/validate/insertion", "faithfulness/gradskip/insertion"):  # validate, then fit
        assert len(_rows(ddp_dir, key)) == len(_rows(single_dir, key)) == 1, key
    assert sorted(p.name for p in (tmp_path / "devices_2").iterdir() if p.is_dir()) == ["version_0"]
    (validate_ddp,), (validate_single,) = (
        _rows(ddp_dir, "faithfulness/gradskip/validate/insertion"),
        _rows(single_dir, "faithfulness/gradskip/validate/insertion"),
    )
    keys = [k for k in validate_single if "gradskip/validate/" in k and not k.endswith("time_s")]
    assert {
        "faithfulness/gradskip/validate/insertion",
        "faithfulness/gradskip/validate/deletion/rollout",
        "gates/gradskip/validate/layer_1",
        "regions/gradskip/validate/pointing_game",
        "regions/gradskip/validate/mass/object",
        "regions/gradskip/validate/rank/object/rollout",
        "regions/gradskip/validate/mean_iou",
        "regions/gradskip/validate/average_precision/rollout",
    } <= set(keys)
    assert set(keys) <= set(validate_ddp)
    for key in keys:
        assert validate_ddp[key] == pytest.approx(validate_single[key], abs=1e-5, nan_ok=True), key
    with (
        np.load(ddp_dir / "gradskip" / "maps" / "probes.npz") as ddp,
        np.load(single_dir / "gradskip" / "maps" / "probes.npz") as one,
    ):
        np.testing.assert_array_equal(ddp["probe_ids"], one["probe_ids"])


@pytest.mark.slow
def test_ddp_discovery_figures_equal_one_process(ddp_out, tmp_path):
    """The discovery summary syncs (ClassMapSummary), every rank transplants alike: one process's figures."""
    import shutil

    out, family = ddp_out
    if family != "vit":
        pytest.skip("discovery runs on classification models")
    shutil.copytree(out, tmp_path, dirs_exist_ok=True)
    ddp_run.main(tmp_path, devices=1, family=family)
    (ddp,) = _rows(tmp_path / "devices_2" / "version_0", "discovery/gradskip/validate/suspicion/class_0")
    (single,) = _rows(tmp_path / "devices_1" / "version_0", "discovery/gradskip/validate/suspicion/class_0")
    keys = [k for k in single if k.startswith("discovery/") and not k.endswith("time_s")]
    assert {f"discovery/gradskip/validate/{n}/class_{c}" for n in ("suspicion", "strategies") for c in range(4)} <= set(
        keys
    )
    for key in keys:
        assert ddp[key] == pytest.approx(single[key], abs=1e-5, nan_ok=True), key
    ranks = [json.loads((out / "devices_2" / f"callback_metrics_rank{r}.json").read_text()) for r in (0, 1)]
    assert "discovery/gradskip/suspicion/class_0" in ranks[0] and ranks[0] == ranks[1]


@pytest.mark.slow
def test_ddp_ranks_run_the_same_number_of_forwards_with_an_uneven_probe_count(ddp_out):
    """9 probes on 2 ranks: shards are padded to 5 each, so sharded strategies (FSDP) cannot hang."""
    counts = [int((ddp_out[0] / "devices_2" / f"forwards_rank{r}.txt").read_text()) for r in (0, 1)]
    assert counts[0] == counts[1] > 0, counts


@pytest.mark.slow
def test_ddp_every_rank_holds_the_same_monitorable_scalars(ddp_out):
    """EarlyStopping/ModelCheckpoint read ``callback_metrics`` on every rank: the values must agree."""
    import json

    ranks = [json.loads((ddp_out[0] / "devices_2" / f"callback_metrics_rank{r}.json").read_text()) for r in (0, 1)]
    assert "regions/gradskip/mass/object" in ranks[0] and "faithfulness/gradskip/insertion/rollout" in ranks[0]
    assert ranks[0] == ranks[1]


@pytest.mark.slow
def test_fsdp2_ranks_skip_together_when_one_ranks_probe_fails(tmp_path):
    """FSDP2 (ModelParallelStrategy + fully_shard, gloo): each forward is a collective, so a failure on
    one rank's shard must stop every rank at the same point; the job finishes, the epoch skipped."""
    import json

    from . import fsdp_run

    done = subprocess.run(
        [sys.executable, str(Path(fsdp_run.__file__)), str(tmp_path)],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads((tmp_path / f"result_rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["epochs"] for r in results] == [1, 1] and [r["skipped"] for r in results] == [1.0, 1.0]
    (warning,) = results[0]["warnings"]
    assert "epoch 0 skipped" in warning and "probe ids [1]" in warning
