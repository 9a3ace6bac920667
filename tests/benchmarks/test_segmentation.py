"""The segmentation subcommand: its --quick path end to end, the Grad-CAM peer, the test subset and
the intervals and paired differences of per-seed scores."""

from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks.__main__ import main
from benchmarks.faithfulness.bootstrap import BootstrapSettings
from benchmarks.segmentation.methods import (
    METHODS,
    POOLED,
    SCORES,
    SegmentationLogits,
    grad_cam,
    grad_cam_layer,
)
from benchmarks.segmentation.models import make_datamodule, square_subset
from benchmarks.segmentation.records import SegmentationScoreRecord
from benchmarks.segmentation.report import BEGIN, END
from benchmarks.segmentation.summary import SeedScores, interval_records, paired_differences
from gradskip_lightning.training.segmentation import SegmentationModule
from tests.families.segformer.conftest import tiny_segformer

LOCALISATION = ("pixel_accuracy", "mean_iou", "average_precision")
TOL = 1e-9


@pytest.mark.slow
def test_quick_run_writes_records_markdown_figure_and_reloads(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\nintro\n\n{BEGIN}\nold tables\n{END}\n\nreading\n")
    out, figure, ckpt = tmp_path / "seg.json", tmp_path / "seg.png", tmp_path / "ckpt"
    argv = ["segmentation", "--quick", "--save-checkpoints", str(ckpt), "--markdown", str(doc), "--figure", str(figure)]
    main(argv + ["--json", str(out)])
    records = json.loads(out.read_text())
    by_kind = {
        kind: [r for r in records if r["record"] == kind] for kind in ("model", "score", "interval", "difference")
    }
    assert sum(map(len, by_kind.values())) == len(records)
    assert [(m["seed"], m["images"], m["epochs"]) for m in by_kind["model"]] == [(0, 8, 1), (1, 8, 1)]
    for model in by_kind["model"]:
        assert 0 <= model["empty_regions"] <= 8
        assert 0.0 <= model["val_miou"] <= 1.0 and 0.0 <= model["test_pixel_accuracy"] <= 1.0
    assert {(r["seed"], r["method"]) for r in by_kind["score"]} == {(s, m) for s in (0, 1) for m in METHODS}
    assert {r["method"]: r["kind"] for r in by_kind["score"]}["grad_cam"] == "peer"
    for record in by_kind["score"]:
        assert record["ms_per_map"] > 0
        assert all(0.0 <= record["scores"][name] <= 1.0 for name in LOCALISATION), record
        assert all(0.0 <= record["pooled"][s.name] <= 1.0 for s in POOLED), record
        ins, dele = record["scores"]["insertion"], record["scores"]["deletion"]
        assert math.isclose(record["scores"]["insertion_minus_deletion"], ins - dele, abs_tol=1e-9)
    random = [r for r in by_kind["score"] if r["method"] == "random"]
    assert all(
        0.3 < r["scores"]["pixel_accuracy"] < 0.7 for r in random
    )  # half the pixels lie above a noise map's mean
    assert [r["method"] for r in by_kind["interval"]] == list(METHODS)
    for record in by_kind["interval"]:
        assert record["seeds"] == [0, 1]
        for interval in [*record["scores"].values(), *record["pooled"].values()]:
            assert interval["low"] - TOL <= interval["mean"] <= interval["high"] + TOL
    assert {(d["reference"], d["score"]) for d in by_kind["difference"]} == {
        (m, s.name) for m in METHODS if m != "gradskip" for s in SCORES
    }
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nintro\n\n") and text.endswith("\n\nreading\n") and "old tables" not in text
    assert "| **gradskip** |" in text and "| gradskip − grad_cam |" in text and "decode_head.activation" in text
    floor = {d["subject"] for d in by_kind["difference"] if d["reference"] == "random" and d["score"] == "insertion"}
    assert floor == set(METHODS) - {"random"}
    assert "Insertion above the random floor" in text and "| start image (its own score: nothing inserted) |" in text
    assert "| rollout − random |" not in text and "| chefer | " in text
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.stat().st_size < 300_000

    reloaded = tmp_path / "reloaded.json"
    argv = ["segmentation", "--quick", "--seeds", "0", "--methods", "gradskip", "--checkpoints", str(ckpt)]
    main(argv + ["--json", str(reloaded)])
    again = json.loads(reloaded.read_text())
    model = next(r for r in again if r["record"] == "model")
    assert model["checkpoint"].endswith("planted_segformer-seed0.ckpt") and model["epochs"] is None
    first = next(r for r in by_kind["score"] if (r["seed"], r["method"]) == (0, "gradskip"))
    second = next(r for r in again if r["record"] == "score")
    assert second["scores"] == pytest.approx(first["scores"], abs=1e-6)


def test_grad_cam_maps_respond_to_the_target_class():
    model = tiny_segformer()
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    maps = {c: grad_cam(model, images, torch.tensor([c, c])) for c in (1, 2)}
    for found in maps.values():
        assert found.shape == (2, 64, 64) and torch.isfinite(found).all()
        assert found.min() >= 0.0 and found.max() <= 1.0 + 1e-6  # ReLU, min-max normalised
    assert (maps[1] - maps[2]).abs().amax(dim=(1, 2)).min() > 0.05
    assert all(p.grad is None for p in model.parameters())  # the library's backward is cleaned up


def test_grad_cam_layer_is_the_fused_decoder_map_on_the_logits_grid():
    module = SegmentationModule(num_classes=3, img_size=64, hidden_sizes=(8, 8, 16, 16), decoder_hidden_size=16)
    seen = []
    handle = grad_cam_layer(module).register_forward_hook(lambda _m, _i, out: seen.append(out.shape))
    logits = SegmentationLogits(module)(torch.zeros(2, 3, 64, 64))
    handle.remove()
    assert seen == [torch.Size([2, 16, 16, 16])] and logits.shape == (2, 3, 16, 16)
    assert SegmentationLogits(tiny_segformer())(torch.zeros(1, 3, 64, 64)).shape == (1, 3, 16, 16)  # HF model too


def test_square_subset_targets_the_square_and_masks_its_pixels():
    datamodule = make_datamodule()
    subset = square_subset(datamodule, 6, seed=0)
    label_maps = torch.stack([datamodule.test_dataset[int(i)][1] for i in subset.indices])
    assert subset.images.shape == (6, 3, 64, 64) and subset.targets.shape == (6,)
    assert ((subset.targets >= 1) & (subset.targets < datamodule.num_classes)).all()
    assert torch.equal(subset.masks, label_maps == subset.targets[:, None, None])
    assert (subset.masks.sum(dim=(1, 2)) == 12 * 12).all()  # the whole 12 px square
    assert torch.equal(square_subset(datamodule, 6, seed=0).indices, subset.indices)


def _runs(method: str, value: float) -> list[SeedScores]:
    """Two seeds of constant per-image scores (4 images) for ``method``."""
    runs = []
    for seed in (0, 1):
        values = {s.name: torch.full((4,), value, dtype=torch.float64) + 0.01 * seed for s in SCORES}
        record = SegmentationScoreRecord(
            "d",
            seed,
            method,
            "engine",
            4,
            1.0 + seed,
            {k: v.mean().item() for k, v in values.items()},
            {s.name: value for s in POOLED},
        )
        runs.append(SeedScores(record, values))
    return runs


def test_differences_give_verdicts_by_direction_and_intervals_span_the_seeds():
    runs = _runs("gradskip", 0.8) + _runs("rollout", 0.5) + _runs("random", 0.8)
    settings = BootstrapSettings(200)
    intervals = interval_records(runs, settings)
    assert [r.method for r in intervals] == ["gradskip", "rollout", "random"]
    gradskip = intervals[0]
    assert gradskip.ms_per_map == 1.5 and gradskip.seeds == (0, 1)
    assert gradskip.scores["mean_iou"].low == pytest.approx(0.8) and gradskip.scores["mean_iou"].high == pytest.approx(
        0.81
    )
    verdicts = {(d.reference, d.score): d.verdict for d in paired_differences(runs, settings)}
    assert verdicts[("rollout", "mean_iou")] == "ahead" and verdicts[("rollout", "deletion")] == "behind"
    assert verdicts[("random", "mean_iou")] == "tied"
    assert paired_differences(_runs("rollout", 0.5), settings) == []  # no GradSkip or floor, nothing to compare
    # Every other method against the random floor, on insertion only; GradSkip's pair is its own.
    floor = [d for d in paired_differences(runs, settings) if d.reference == "random" and d.subject != "gradskip"]
    assert [(d.subject, d.score, d.verdict) for d in floor] == [("rollout", "insertion", "behind")]
    assert floor[0].difference.mean == pytest.approx(-0.3)
