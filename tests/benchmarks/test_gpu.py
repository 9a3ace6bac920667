"""The ``gpu`` benchmark: a clear no-CUDA message, and its checks run on CPU with a tiny ViT."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import gpu
from benchmarks.__main__ import main


def test_without_cuda_nothing_runs_and_every_record_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "gpu.json"
    main(["gpu", "--json", str(out)])
    assert "No CUDA device is present" in capsys.readouterr().out
    records = json.loads(out.read_text())
    assert [r["check"] for r in records] == ["batch_equals_singles", "mixed_precision_fit", "oom_skipped", "ms_per_map"]
    assert all(r["passed"] is None and r["skipped"] == "no CUDA device" for r in records)


def test_batch_equals_singles_on_cpu():
    record = gpu.check_batch_equals_singles("cpu", "vit_tiny_test", batch_size=3)
    assert record["passed"] is True and record["device"] == "cpu"
    assert set(record["max_relative_difference"]) == set(gpu.DETERMINISTIC_METHODS)
    assert max(record["max_relative_difference"].values()) < 1e-5  # the CPU unit tests' bound
    assert gpu.check_batch_equals_singles("cpu", "vit_tiny_test", batch_size=2, tolerance=-1.0)["passed"] is False


def test_ms_per_map_records_on_cpu():
    records = gpu.check_ms_per_map("cpu", model="vit_tiny_test", batch_size=2, repeats=1)
    assert [r["method"] for r in records] == ["gradskip", "chefer"]
    assert all(r["passed"] and r["ms_per_map"] > 0 and r["peak_memory_mib"] is None for r in records)


@pytest.mark.slow
def test_an_explain_path_that_cannot_allocate_is_skipped_and_training_finishes(tmp_path):
    record = gpu.check_oom_skipped("cpu", tmp_path)  # CPU: the allocator's RuntimeError instead of CUDA OOM
    assert record["passed"] is True, record
    assert record["steps"] == 8
    assert any("epoch 1 skipped" in message and "allocate" in message for message in record["warnings"])


@pytest.mark.slow
def test_bf16_mixed_fit_writes_finite_maps_on_cpu(tmp_path):
    record = gpu.check_mixed_precision_fit("cpu", "bf16-mixed", tmp_path)
    assert record["passed"] is True, record
    assert record["map_files"] == ["epoch_0000.npz", "epoch_0001.npz"] and record["steps"] == 8
