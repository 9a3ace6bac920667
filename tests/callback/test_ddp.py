"""A real 2-process DDP run on CPU: no hang, rank zero logs, figures equal a single-process run."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from . import ddp_run

SCRIPT = Path(ddp_run.__file__)


def _rows(log_dir: Path) -> list[dict[str, float]]:
    with open(log_dir / "metrics.csv") as handle:
        return [
            {k: float(v) for k, v in row.items() if v}
            for row in csv.DictReader(handle)
            if row.get("gradskip/insertion")
        ]


@pytest.mark.slow
def test_ddp_two_processes_log_once_and_match_one_process(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "2"],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ddp_run.main(tmp_path, devices=1)  # the single-process reference, in this process
    ddp_dir, single_dir = tmp_path / "devices_2" / "version_0", tmp_path / "devices_1" / "version_0"
    ddp_rows, single_rows = _rows(ddp_dir), _rows(single_dir)
    assert len(ddp_rows) == 2 and len(single_rows) == 2  # validate, then the fit epoch: once each, from rank 0
    assert sorted(p.name for p in (tmp_path / "devices_2").iterdir()) == ["version_0"]
    validate_ddp, validate_single = ddp_rows[0], single_rows[0]
    keys = [k for k in validate_single if k.startswith("gradskip/") and k != "gradskip/time_s"]
    assert {
        "gradskip/insertion",
        "gradskip/compare/rollout/deletion",
        "gradskip/gate/layer_1",
        "gradskip/pointing_game",
    } <= set(keys)
    assert set(keys) <= set(validate_ddp)
    for key in keys:
        assert validate_ddp[key] == pytest.approx(validate_single[key], abs=1e-5), key
    with (
        np.load(ddp_dir / "gradskip" / "maps" / "probes.npz") as ddp,
        np.load(single_dir / "gradskip" / "maps" / "probes.npz") as one,
    ):
        np.testing.assert_array_equal(ddp["probe_ids"], one["probe_ids"])
