"""Real 2-process DDP on CPU: the synced metrics equal one process on the union of the data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_tiny_vit

from .ddp_worker import NUM_CLASSES, make_metrics, results, update_all
from .helpers import ddp_dataset

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_process_ddp_sync_equals_single_process_on_the_union(tmp_path):
    out = tmp_path / "ddp.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.metrics.ddp_worker", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    synced = json.loads(out.read_text())
    assert synced.pop("world_size") == 2
    assert synced.pop("rank0_images") == 4  # each rank saw half of the 8 images

    data, model = ddp_dataset(), make_tiny_vit(num_classes=NUM_CLASSES)
    metrics = make_metrics()
    update_all(metrics, model, data)
    single = results(metrics)
    assert synced.keys() == single.keys()
    for key, value in single.items():
        assert abs(synced[key] - value) <= 1e-6, key

    # rank 0's share alone (DistributedSampler: every other image) gives other figures: the sync mattered
    half = make_metrics()
    update_all(half, model, {key: value[0::2] for key, value in data.items()})
    assert max(abs(v - single[k]) for k, v in results(half).items()) > 1e-3
