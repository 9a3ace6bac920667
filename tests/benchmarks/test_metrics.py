"""The ``metrics`` benchmark subcommand on a tiny setting: one record, forward calls as batched."""

from __future__ import annotations

import argparse
import math

from gradskip_lightning.benchmarks import metrics as benchmark


def test_run_prints_and_returns_one_record(capsys):
    parser = argparse.ArgumentParser()
    benchmark.add_arguments(parser)
    args = parser.parse_args(["--images", "6", "--steps", "4", "--batch-size", "16", "--repeats", "1"])
    records = benchmark.run(args)
    assert len(records) == 1
    record = records[0]
    assert set(record) == {"images", "steps", "batch_size", "forward_calls", "images_per_s"}
    assert record["forward_calls"] == math.ceil(2 * 6 * (4 + 1) / 16)
    assert record["images"] == 6 and record["steps"] == 4 and record["images_per_s"] > 0
    assert "images/s" in capsys.readouterr().out
