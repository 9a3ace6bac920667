"""The ``coverage`` benchmark on a few names: accepted or refused with a reason, kinds checked."""

from __future__ import annotations

import json

import pytest

from benchmarks.__main__ import main

NAMES = ["vit_tiny_patch16_224", "deit_tiny_patch16_224", "vit_small_patch16_18x2_224", "vit_base_patch16_xp_224"]


def test_coverage_records_acceptance_reasons_and_checks(tmp_path, capsys):
    out = tmp_path / "coverage.json"
    main(["coverage", "--names", *NAMES, "--json", str(out)])
    records = {r["model"]: r for r in json.loads(out.read_text())}
    assert set(records) == set(NAMES)
    assert all(set(r) == {"model", "family", "accepted", "reason", "checked"} for r in records.values())
    vit, deit = records["vit_tiny_patch16_224"], records["deit_tiny_patch16_224"]
    assert vit == {
        "model": vit["model"],
        "family": "vision_transformer",
        "accepted": True,
        "reason": "",
        "checked": True,
    }
    assert deit["accepted"] and deit["checked"] and deit["family"] == "deit"  # another module: checked on its own
    for parallel in ("vit_small_patch16_18x2_224", "vit_base_patch16_xp_224"):
        assert not records[parallel]["accepted"] and records[parallel]["checked"] is None
        assert "Parallel" in records[parallel]["reason"] and "block 0" in records[parallel]["reason"]
    assert "2/4" in capsys.readouterr().out  # accepted / total in the summary


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="resnet18.*not timm models"):
        main(["coverage", "--names", "resnet18"])
