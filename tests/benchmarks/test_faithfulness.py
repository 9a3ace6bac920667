"""The faithfulness subcommand end to end at tiny settings, and its rank and markdown helpers."""

from __future__ import annotations

import json
import math

import pytest

from gradskip_lightning.benchmarks.__main__ import main
from gradskip_lightning.benchmarks.faithfulness import ablations, gradskip_overrides
from gradskip_lightning.benchmarks.faithfulness_report import BEGIN, END, ranks, write_markdown

TINY = [
    "--epochs",
    "1",
    "--max-train-batches",
    "2",
    "--test-size",
    "8",
    "--randomisation-images",
    "2",
    "--ig-steps",
    "4",
    "--steps",
    "2",
    "--explain-batch",
    "8",
]
ENGINE = {"gradskip", "raw_attention", "rollout", "chefer", "random"}
PEERS = {"integrated_gradients", "input_x_gradient", "grad_cam"}


def test_faithfulness_subcommand_end_to_end(tmp_path, capsys):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\nhand-written intro\n\n{BEGIN}\nold tables\n{END}\n\nhand-written reading\n")
    out_json = tmp_path / "records.json"
    main(
        [
            "faithfulness",
            *TINY,
            "--save-checkpoints",
            str(tmp_path / "ckpt"),
            "--markdown",
            str(doc),
            "--json",
            str(out_json),
        ]
    )
    printed = capsys.readouterr().out
    assert "bloodmnist skipped" in printed  # no --data-root
    records = json.loads(out_json.read_text())
    methods = {r["method"]: r for r in records if r["table"] == "methods"}
    assert set(methods) == ENGINE | PEERS
    for r in methods.values():
        assert r["dataset"] == "planted_shapes" and r["test_size"] == 8
        for key in ("insertion", "deletion", "fvt_violation", "pointing_game"):
            assert 0.0 <= r[key] <= 1.0, (r["method"], key, r[key])
        assert math.isclose(r["insertion_minus_deletion"], r["insertion"] - r["deletion"], abs_tol=1e-6)
        assert r["ms_per_map"] > 0 and r["gflops_per_map"] > 0
    # Cost: attention-only maps are one forward, GradSkip about two, IG (4 steps) more than three.
    assert math.isclose(methods["raw_attention"]["ratio_to_forward"], 1.0, rel_tol=0.05)
    assert 1.5 < methods["gradskip"]["ratio_to_forward"] <= 2.5 and methods["gradskip"]["cheap"]
    assert methods["integrated_gradients"]["ratio_to_forward"] > 4 and not methods["integrated_gradients"]["cheap"]
    # The random floor ignores the weights: randomising them leaves its maps unchanged.
    assert math.isclose(methods["random"]["randomisation_similarity"], 1.0, abs_tol=1e-6)
    assert methods["gradskip"]["randomisation_similarity"] < 1.0
    rows = [r for r in records if r["table"] == "ablation"]
    assert [(r["group"], r["setting"]) for r in rows] == [(g, s) for g, s, _ in ablations()]
    defaults = [r for r in rows if r["is_default"]]
    assert {r["group"] for r in defaults} == {r["group"] for r in rows}  # each group shows the default
    assert all(r["insertion"] == methods["gradskip"]["insertion"] for r in defaults)
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nhand-written intro") and text.endswith("hand-written reading\n")
    assert "old tables" not in text and "| **gradskip** | yes |" in text and "GradSkip ranks" in text
    # The saved checkpoint reloads to the same model: same accuracy, same GradSkip scores.
    main(
        [
            "faithfulness",
            *TINY,
            "--checkpoint",
            f"planted_shapes={tmp_path / 'ckpt' / 'planted_shapes.ckpt'}",
            "--methods",
            "gradskip",
            "--peers",
            "--no-ablations",
            "--json",
            str(out_json),
        ]
    )
    (again,) = json.loads(out_json.read_text())
    assert again["accuracy"] == methods["gradskip"]["accuracy"]
    assert again["insertion_minus_deletion"] == methods["gradskip"]["insertion_minus_deletion"]


def test_ranks_count_only_cheap_methods_and_share_ties():
    def rec(method, ins_del, pg, cheap=True):
        return {
            "table": "methods",
            "dataset": "d",
            "method": method,
            "cheap": cheap,
            "insertion_minus_deletion": ins_del,
            "pointing_game": pg,
        }

    records = [rec("gradskip", 0.5, 0.8), rec("a", 0.6, 0.8), rec("b", 0.4, 0.9), rec("ig", 0.9, 1.0, cheap=False)]
    assert ranks(records, "d") == {"insertion_minus_deletion": (2, 3), "pointing_game": (2, 3)}
    records[0]["pointing_game"] = None
    assert ranks(records, "d")["pointing_game"] is None


def test_write_markdown_creates_a_file_with_markers(tmp_path):
    path = tmp_path / "new.md"
    write_markdown(
        path,
        [],
        command="cmd",
        machine={"cpu": "x", "logical_cpus": 2, "torch": "t", "threads": 2, "python": "3"},
        wall_seconds=60.0,
    )
    text = path.read_text()
    assert text.startswith(BEGIN) and text.rstrip().endswith(END) and "Command: `cmd`" in text


def test_gradskip_overrides_are_typed_validated_and_become_the_ablation_base():
    assert gradskip_overrides(["gate=layer", "alpha=0.25", "value_norm=False"]) == {
        "gate": "layer",
        "alpha": 0.25,
        "value_norm": False,
    }
    for bad in (["gate"], ["nope=1"], ["gate=sideways"], ["value_norm=no"]):
        with pytest.raises(ValueError):
            gradskip_overrides(bad)
    rows = ablations({"gate": "layer"})
    default_rows = [setting for _, setting, options in rows if options == {"gate": "layer"}]
    assert "gate=layer" in default_rows and "gate=token" not in default_rows and "alpha=0.5" in default_rows
    assert ("gate", "gate=token", {"gate": "token"}) in rows
