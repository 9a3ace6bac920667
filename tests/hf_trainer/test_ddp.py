"""A real 2-process DDP fine-tune (torch.distributed.run, gloo, CPU) with GradSkipTrainerCallback:
no hang, every rank holds the same values, and the maps files and scalars equal a 1-process run's."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from . import ddp_run

SCRIPT = Path(ddp_run.__file__)
ROOT = SCRIPT.parents[2]
#: Float rounding of other batch compositions (training and explanation): measured up to 3e-7.
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The output folder of a 2-process run (a subprocess) and of the 1-process reference (this process)."""
    out = tmp_path_factory.mktemp("hf_ddp")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = subprocess.run(
        [*command, str(SCRIPT), str(out)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ddp_run.main(out)
    return out


def _scalars(out: Path, world: int, rank: int) -> dict:
    return json.loads((out / f"devices_{world}" / f"scalars_rank{rank}.json").read_text())


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= TOLERANCE


@pytest.mark.slow
def test_two_processes_write_the_maps_files_of_one(runs):
    files = sorted(p.name for p in (runs / "devices_1" / "gradskip" / "maps").iterdir())
    assert files == sorted(p.name for p in (runs / "devices_2" / "gradskip" / "maps").iterdir())
    assert files == ["epoch_0000.npz", "epoch_0001.npz", "probes.npz"]
    for name in files:
        with (
            np.load(runs / "devices_1" / "gradskip" / "maps" / name) as one,
            np.load(runs / "devices_2" / "gradskip" / "maps" / name) as two,
        ):
            assert set(one.files) == set(two.files)
            for key in one.files:
                if one[key].dtype.kind == "f":
                    np.testing.assert_allclose(two[key], one[key], atol=TOLERANCE, rtol=0, err_msg=f"{name} {key}")
                else:
                    np.testing.assert_array_equal(two[key], one[key], err_msg=f"{name} {key}")


@pytest.mark.slow
def test_two_processes_log_the_scalars_of_one_and_every_rank_holds_them(runs):
    ranks = [_scalars(runs, 2, rank) for rank in (0, 1)]
    one = _scalars(runs, 1, 0)
    assert ranks[0]["world"] == 2 and one["world"] == 1
    assert ranks[0] == ranks[1]  # metric_for_best_model and the log history agree on every rank
    assert [row["step"] for row in ranks[0]["rows"]] == [row["step"] for row in one["rows"]] == [3, 6]
    compared = 0
    for two_values, one_values in [*zip(ranks[0]["rows"], one["rows"]), (ranks[0]["evaluated"], one["evaluated"])]:
        keys = [k for k in one_values if "gradskip/" in k and not k.endswith(("time_s", "overhead"))]
        assert set(keys) <= set(two_values)
        assert all(_close(two_values[k], one_values[k]) for k in keys), [
            (k, two_values[k], one_values[k]) for k in keys if not _close(two_values[k], one_values[k])
        ]
        compared += len(keys)
    assert "eval_discovery/gradskip/suspicion/class_0" in one["rows"][0]  # the discovery stage's collectives too
    assert "eval_faithfulness/gradskip/validate/insertion/rollout" in one["evaluated"]
    assert compared > 150
