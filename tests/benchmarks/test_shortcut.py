"""The shortcut subcommand: its detection scores on hand-made numbers, and its quick path end to end."""

from __future__ import annotations

import json
import math
from dataclasses import fields

import pytest
import torch

from benchmarks.__main__ import main
from benchmarks.shortcut.detection import (
    detection_auroc,
    first_flag_epoch,
    flag_threshold,
    spurious_epoch,
)
from benchmarks.shortcut.records import DetectionRecord
from benchmarks.shortcut.report import BEGIN, END
from gradskip_lightning.methods import PASS_METHODS

PEERS = {"integrated_gradients", "input_x_gradient", "grad_cam"}
FIELDS = {
    "dataset",
    "seed",
    "method",
    "tag_mass_spurious",
    "tag_mass_clean",
    "tag_rank_spurious",
    "detection_auroc",
    "first_flag_epoch",
    "spurious_epoch",
    "spurious_score",
}


def test_detection_auroc_counts_pairs_and_half_ties():
    assert detection_auroc(torch.tensor([0.6, 0.7]), torch.tensor([0.1, 0.2, 0.3])) == 1.0
    assert detection_auroc(torch.tensor([0.1, 0.2]), torch.tensor([0.6, 0.7])) == 0.0
    # pairs (spurious, clean): 0.3>0.2 yes, 0.3>0.4 no, 0.2=0.2 half, 0.2<0.4 no -> 1.5 / 4
    assert detection_auroc(torch.tensor([0.3, 0.2]), torch.tensor([0.2, 0.4])) == pytest.approx(0.375)
    assert detection_auroc(torch.full((4,), 0.5), torch.full((3,), 0.5)) == 0.5


def test_detection_auroc_leaves_out_nan_and_rejects_bad_shapes():
    assert detection_auroc(torch.tensor([0.9, math.nan]), torch.tensor([math.nan, 0.1])) == 1.0
    assert math.isnan(detection_auroc(torch.tensor([math.nan]), torch.tensor([0.1])))
    with pytest.raises(ValueError, match="spurious must be"):
        detection_auroc(torch.zeros(2, 2), torch.zeros(2))


def test_first_flag_epoch_compares_the_mean_with_the_clean_95th_percentile():
    clean = torch.tensor([[0.0, 0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8, 0.9]])  # 10 masses
    assert flag_threshold(clean) == pytest.approx(0.855)  # 0.8 + 0.55 * 0.1
    spurious = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0, 1.0],  # one probe above, mean 0.2: not flagged
            [0.85, 0.85, 0.85, 0.85, 0.85],  # mean 0.85 < 0.855: not flagged
            [0.9, 0.9, 0.9, 0.9, 0.8],  # mean 0.88: flagged
            [1.0, 1.0, 1.0, 1.0, 1.0],
        ]
    )
    assert first_flag_epoch(spurious, clean) == 3.0
    assert first_flag_epoch(spurious, clean, times=torch.tensor([0.25, 0.5, 0.75, 1.0])) == 0.75
    assert first_flag_epoch(spurious[:2], clean) is None
    assert first_flag_epoch(torch.tensor([[math.nan, 0.9]]), clean) == 1.0  # NaN probes left out of the mean
    with pytest.raises(ValueError, match="trace points, probes"):
        first_flag_epoch(torch.zeros(3), clean)
    with pytest.raises(ValueError, match="times must be"):
        first_flag_epoch(spurious, clean, times=torch.tensor([1.0, 2.0]))


def test_spurious_epoch_is_the_first_epoch_at_the_threshold():
    assert spurious_epoch(torch.tensor([0.1, 0.84, 0.85, 0.2])) == 3.0
    assert spurious_epoch(torch.tensor([0.1, 0.9]), times=torch.tensor([0.5, 1.0])) == 1.0
    assert spurious_epoch(torch.tensor([0.1, 0.84])) is None


@pytest.mark.slow
def test_quick_path_writes_one_record_per_dataset_seed_method(tmp_path):
    doc = tmp_path / "shortcut.md"
    doc.write_text(f"# Shortcut\n\nreading\n\n{BEGIN}\nold\n{END}\n\nafter\n")
    out = tmp_path / "shortcut.json"
    argv = ["shortcut", "--quick", "--epochs", "1", "--max-train-batches", "2", "--probes", "4", "--ig-steps", "2"]
    argv += ["--traces-per-epoch", "2"]
    main(argv + ["--json", str(out), "--markdown", str(doc)])
    records = json.loads(out.read_text())
    assert {f.name for f in fields(DetectionRecord)} == FIELDS
    assert all(set(record) == FIELDS for record in records)
    methods = set(PASS_METHODS.names) | PEERS
    assert {(r["dataset"], r["seed"], r["method"]) for r in records} == {
        (dataset, 0, method) for dataset in ("planted_shapes", "planted_shapes control") for method in methods
    }
    assert len(records) == 2 * len(methods)
    for record in records:
        for name in ("tag_mass_spurious", "tag_mass_clean", "tag_rank_spurious", "detection_auroc", "spurious_score"):
            assert 0.0 <= record[name] <= 1.0, (record["method"], name, record[name])
        assert record["first_flag_epoch"] in (None, 0.5, 1.0)
        assert record["spurious_epoch"] in (None, 0.5, 1.0)
    random = [r for r in records if r["method"] == "random"]
    assert all(r["tag_mass_spurious"] < 0.3 for r in random)  # 64 of 1024 px: the random floor is near 1/16
    text = doc.read_text()
    assert text.startswith("# Shortcut\n\nreading\n\n") and text.endswith("\n\nafter\n") and "old" not in text
    assert "### planted_shapes control" in text and "| gradskip |" in text
    assert "\n| 0.5 | " in text and "\n| 1 | " in text  # the curve rows: two trace points
