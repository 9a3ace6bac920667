"""The faithfulness subcommand end to end on its --quick path (the tiny ViT and the small Swin): records,
intervals, markdown, reload."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.__main__ import main
from benchmarks.faithfulness.ablations import SETTINGS
from benchmarks.faithfulness.cli import PROFILES
from benchmarks.faithfulness.report import BEGIN, END
from benchmarks.faithfulness.scores import SCORES
from gradskip_lightning.methods import PASS_METHODS

ENGINE = set(PASS_METHODS.names)  # every registered method is benchmarked
PEERS = {"integrated_gradients", "input_x_gradient", "grad_cam"}
TOL = 1e-9


def _contains(interval: dict) -> bool:
    return interval["low"] - TOL <= interval["mean"] <= interval["high"] + TOL


@pytest.mark.slow
def test_quick_run_records_intervals_markdown_and_reload(tmp_path, capsys):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\nhand-written intro\n\n{BEGIN}\nold tables\n{END}\n\nhand-written reading\n")
    out_json = tmp_path / "records.json"
    ckpt = tmp_path / "ckpt"
    main(["faithfulness", "--quick", "--save-checkpoints", str(ckpt), "--markdown", str(doc), "--json", str(out_json)])
    records = json.loads(out_json.read_text())
    kinds = ("model", "score", "interval", "difference")
    by_kind = {kind: [r for r in records if r["record"] == kind] for kind in kinds}
    assert sum(map(len, by_kind.values())) == len(records)
    assert [(m["dataset"], m["seed"], m["images"]) for m in by_kind["model"]] == [
        (dataset, seed, 16) for dataset in ("planted_shapes", "planted_shapes_swin") for seed in (0, 1)
    ]
    vit = [r for r in by_kind["score"] if r["dataset"] == "planted_shapes"]

    # One score record per (seed, row): every method, then every ablation setting.
    methods = [r for r in by_kind["score"] if r["row"]["table"] == "methods"]
    assert {(r["dataset"], r["seed"], r["row"]["name"]) for r in methods} == {
        (d, s, m) for d in ("planted_shapes", "planted_shapes_swin") for s in (0, 1) for m in ENGINE | PEERS
    }
    for r in methods:
        assert set(r["scores"]) == {s.name for s in SCORES}
        for name in ("insertion", "deletion", "fvt_violation", "pointing_game"):
            assert 0.0 <= r["scores"][name] <= 1.0, (r["row"]["name"], name)
        ins, dele, diff = (r["scores"][k] for k in ("insertion", "deletion", "insertion_minus_deletion"))
        assert math.isclose(diff, ins - dele, abs_tol=1e-6)
        assert r["ms_per_map"] > 0 and r["gflops_per_map"] > 0
    first = {r["row"]["name"]: r for r in methods if r["seed"] == 0 and r["dataset"] == "planted_shapes"}
    assert math.isclose(first["raw_attention"]["ratio_to_forward"], 1.0, rel_tol=0.05)
    assert first["gradskip"]["cheap"] and not first["integrated_gradients"]["cheap"]
    # The random floor ignores the weights: randomising them leaves its maps unchanged.
    assert math.isclose(first["random"]["scores"]["randomisation_similarity"], 1.0, abs_tol=1e-6)
    ablations = [r for r in vit if r["row"]["table"] == "ablations" and r["seed"] == 0]
    assert [(r["row"]["group"], r["row"]["name"]) for r in ablations] == [(g, s) for g, s, _ in SETTINGS]
    assert all(r["images"] == 8 and "randomisation_similarity" not in r["scores"] for r in ablations)

    # Intervals: one per (dataset, row), over both seeds, each containing its mean.
    vit_intervals = [r for r in by_kind["interval"] if r["dataset"] == "planted_shapes"]
    intervals = {(r["row"]["table"], r["row"]["group"], r["row"]["name"]): r for r in vit_intervals}
    assert len(intervals) == len(ENGINE | PEERS) + len(SETTINGS)
    for r in by_kind["interval"]:
        assert r["seeds"] == [0, 1]
        for interval in r["scores"].values():
            assert _contains(interval), (r["row"]["name"], interval)
    gradskip = intervals[("methods", "", "gradskip")]["scores"]["insertion"]
    seed_means = [r["scores"]["insertion"] for r in vit if r["row"] == first["gradskip"]["row"]]
    assert math.isclose(gradskip["mean"], sum(seed_means) / 2, rel_tol=1e-9)

    # Paired differences: GradSkip against each other method, each ablation setting against its default.
    differences = by_kind["difference"]
    method_pairs = {(d["reference"], d["score"]) for d in differences if d["table"] == "methods"}
    assert method_pairs == {(m, s.name) for m in (ENGINE | PEERS) - {"gradskip"} for s in SCORES}
    for d in differences:
        assert _contains(d["difference"]) and d["verdict"] in ("ahead", "tied", "behind")
        assert (d["verdict"] == "tied") == (d["difference"]["low"] <= 0.0 <= d["difference"]["high"])
    rollout = next(
        d
        for d in differences
        if d["dataset"] == "planted_shapes" and d["reference"] == "rollout" and d["score"] == "insertion"
    )
    assert math.isclose(
        rollout["difference"]["mean"],
        gradskip["mean"] - intervals[("methods", "", "rollout")]["scores"]["insertion"]["mean"],
        abs_tol=1e-9,
    )
    ablation_pairs = [d for d in differences if d["table"] == "ablations" and d["dataset"] == "planted_shapes"]
    assert {d["subject"] for d in ablation_pairs} == {r["row"]["name"] for r in ablations if not r["row"]["is_default"]}
    # The default row is GradSkip's own scores on the first 8 images, so setting "gate=layer" vs itself is absent.
    assert all(d["subject"] != d["reference"] for d in ablation_pairs)

    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nhand-written intro") and text.endswith("hand-written reading\n")
    assert "old tables" not in text and "| **gradskip** | yes |" in text and "| gradskip − rollout |" in text
    assert "hierarchical bootstrap (500 resamples" in text
    floor = {d["subject"] for d in differences if d["reference"] == "random" and d["score"] == "insertion"}
    assert floor == (ENGINE | PEERS) - {"random"}  # every method's insertion against the floor's
    assert "#### planted_shapes: insertion above the random floor" in text and "| lrp | " in text

    # The saved checkpoints reload to the same models: same GradSkip scores; explicit options beat --quick;
    # a seed without a checkpoint is trained.
    main(
        [
            "faithfulness",
            "--quick",
            "--datasets",
            "planted_shapes",
            "--seeds",
            "1",
            "2",
            "--checkpoints",
            str(ckpt),
            "--methods",
            "gradskip",
            "--peers",
            "--no-ablations",
            "--json",
            str(out_json),
        ]
    )
    again = json.loads(out_json.read_text())
    loaded, trained_now = [r for r in again if r["record"] == "model"]
    assert loaded["seed"] == 1 and loaded["checkpoint"].endswith("planted_shapes-seed1.ckpt")
    assert (trained_now["seed"], trained_now["checkpoint"], trained_now["epochs"]) == (2, None, 1)
    out = capsys.readouterr().out
    assert "planted_shapes-seed2.ckpt not found" in out and "planted_shapes_deep" not in out
    score = next(r for r in again if r["record"] == "score" and r["seed"] == 1)
    trained = next(r for r in methods if r["seed"] == 1 and r["row"]["name"] == "gradskip")
    assert score["scores"] == trained["scores"]


def test_quick_mode_runs_the_swin_beside_the_vit_and_skips_the_settings_it_refuses(tmp_path, capsys):
    assert PROFILES.quick["datasets"] == ["planted_shapes", "planted_shapes_swin"]
    out_json, ckpt = tmp_path / "records.json", tmp_path / "ckpt"
    tiny = ["--datasets", "planted_shapes_swin", "--seeds", "0", "--test-size", "4", "--randomisation-images", "2"]
    ablations = ["--ablation-groups", "class_specific", "--ablation-size", "4", "--bootstrap-resamples", "50"]
    main(["faithfulness", "--quick", *tiny, *ablations, "--save-checkpoints", str(ckpt), "--json", str(out_json)])
    records = json.loads(out_json.read_text())
    (model,) = [r for r in records if r["record"] == "model"]
    assert (model["dataset"], model["seed"], model["images"]) == ("planted_shapes_swin", 0, 4)
    scores = [r for r in records if r["record"] == "score"]
    methods = {r["row"]["name"]: r for r in scores if r["row"]["table"] == "methods"}
    assert set(methods) == ENGINE | PEERS  # the Swin family has every method; Grad-CAM reads its last stage
    for r in methods.values():
        assert r["dataset"] == "planted_shapes_swin" and 0.0 <= r["scores"]["pointing_game"] <= 1.0
    # FLOPs through the Swin's own explain mode: a forward method costs one forward, GradSkip about two.
    assert math.isclose(methods["rollout"]["ratio_to_forward"], 1.0, rel_tol=0.05)
    assert 1.5 < methods["gradskip"]["ratio_to_forward"] < 2.5 and not methods["integrated_gradients"]["cheap"]
    # The randomisation cascade walks the Swin's blocks: the random floor is unchanged, GradSkip's maps are not.
    assert math.isclose(methods["random"]["scores"]["randomisation_similarity"], 1.0, abs_tol=1e-6)
    assert methods["gradskip"]["scores"]["randomisation_similarity"] < 0.99
    # The class-specific settings a Swin refuses are skipped with a note, the others scored.
    ablated = [r["row"]["name"] for r in scores if r["row"]["table"] == "ablations"]
    assert ablated == ["defaults", "pos_grad, value_norm=False"]
    assert (
        "normalisation=layer: skipped, gradskip does not implement normalisation='layer' for this model family"
        in capsys.readouterr().out
    )

    # The saved Swin reloads (ViTClassifier's Swin options in its hyperparameters) to the same scores.
    again = ["--checkpoints", str(ckpt), "--methods", "gradskip", "--peers", "--no-ablations"]
    main(["faithfulness", "--quick", *tiny, *again, "--json", str(out_json)])
    (score,) = [r for r in json.loads(out_json.read_text()) if r["record"] == "score"]
    assert score["scores"] == methods["gradskip"]["scores"]
