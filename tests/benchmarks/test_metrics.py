"""The ``metrics`` benchmark subcommand on a tiny setting: one record per batch size, forward calls as batched."""

from __future__ import annotations

import argparse
import math

from benchmarks import metrics as benchmark


def test_run_sweeps_batch_sizes_and_returns_one_record_each(capsys):
    parser = argparse.ArgumentParser()
    benchmark.add_arguments(parser)
    args = parser.parse_args(["--images", "6", "--steps", "4", "--batch-sizes", "16", "64", "--repeats", "1"])
    records = benchmark.run(args)
    assert [r["batch_size"] for r in records] == [16, 64]
    record = records[0]
    assert {"images", "steps", "batch_size", "forward_calls", "ms_per_image", "images_per_s"} <= set(record)
    # 2 x 6 x 3 inner steps in batches of 16; the clean images, the blurred starts and one zeros image
    assert record["forwarded_images"] == 2 * 6 * 3 + 6 + 6 + 1
    assert record["forward_calls"] == math.ceil(2 * 6 * 3 / 16) + 3
    assert record["images"] == 6 and record["steps"] == 4 and record["images_per_s"] > 0
    out = capsys.readouterr().out
    assert "ms per forwarded image" in out and "default batch size on cpu: 64" in out
