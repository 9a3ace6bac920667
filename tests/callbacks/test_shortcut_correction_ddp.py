"""A real 2-process DDP run on CPU with a correction: no hang, each rank draws its own images, rank zero logs the
share pasted over both ranks' images."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from . import correction_ddp_run as ddp_run


@pytest.mark.slow
def test_each_rank_pastes_on_its_own_draws_and_the_logged_share_counts_every_ranks_images(tmp_path):
    done = subprocess.run(
        [sys.executable, str(Path(ddp_run.__file__)), str(tmp_path), "2"],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "devices_2"
    ranks = [json.loads((folder / f"rank{r}.json").read_text()) for r in range(2)]
    flags = [[flag for batch in rank for flag in batch] for rank in ranks]
    assert [len(f) for f in flags] == [32, 32]  # 64 training images split between the ranks
    assert flags[0] != flags[1]  # seeded by rank: not the same draws on both
    with open(folder / "version_0" / "metrics.csv") as handle:
        (row,) = [r for r in csv.DictReader(handle) if r.get("correction/gradskip/active")]
    assert float(row["correction/gradskip/active"]) == 1.0
    assert float(row["correction/gradskip/pasted_share"]) == pytest.approx(sum(map(sum, flags)) / 64)
    assert float(row["correction/gradskip/erased_share/class_1"]) == 1.0  # every class-1 image, both ranks
