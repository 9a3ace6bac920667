"""The scaling benchmark varies one factor at a time from its base point and measures the callback's own parts."""

from __future__ import annotations

from benchmarks.__main__ import build_parser
from benchmarks.scaling import BEGIN, END, FACTORS, Point, plan, run


def test_each_factor_gets_its_levels_and_the_base_level_the_others_stay_at_the_base():
    base = Point(probes=32, classes=8, model="main", img_size=28)
    rows = plan(base, {"probes": [128, 8], "classes": [2, 4], "model": ["vit_tiny"], "img_size": [56]})
    assert [(factor, level) for factor, level, _ in rows] == [
        ("probes", 8), ("probes", 32), ("probes", 128), ("classes", 2), ("classes", 4), ("classes", 8),
        ("model", "main"), ("model", "vit_tiny"), ("img_size", 28), ("img_size", 56),
    ]  # fmt: skip
    for factor, level, point in rows:
        assert getattr(point, factor) == level
        assert all(getattr(point, other) == getattr(base, other) for other in FACTORS if other != factor)
    assert plan(base, {"probes": [], "classes": []}) == []


def test_the_probes_and_the_classes_change_what_the_callback_explains_and_forwards(tmp_path):
    page = tmp_path / "cost.md"
    args = build_parser().parse_args(
        ["scaling", "--probes", "4", "--classes", "3", "--models", "--sizes", "--base-probes", "8",
         "--base-classes", "2", "--discovery", "3", "--insertion-steps", "4", "--logger", "csv",
         "--markdown", str(page)]
    )  # fmt: skip
    records = run(args)
    by_row = {(r["factor"], r["level"]): r for r in records}
    assert list(by_row) == [("probes", 4), ("probes", 8), ("classes", 2), ("classes", 3)]
    base = by_row["probes", 8]
    assert by_row["classes", 2]["hook_s"] == base["hook_s"]  # the base point is measured once
    assert all(value == 1.0 for value in base["ratios"].values() if value is not None)
    # the probe count changes the explained images and the images forwarded, not the discovery probes
    assert (by_row["probes", 4]["explained"], base["explained"]) == (4, 8)
    assert by_row["probes", 4]["forwarded"] < base["forwarded"]
    assert by_row["probes", 4]["discovery_probes"] == base["discovery_probes"] == 2 * 3
    # a class more: 3 discovery probes more, each class tested against more recipients
    assert by_row["classes", 3]["discovery_probes"] == 3 * 3
    assert by_row["classes", 3]["discovery_forwarded"] > base["discovery_forwarded"] > 0
    for record in records:
        parts = record["parts"]
        assert parts["maps"] > 0 and parts["scores"] > 0 and parts["discovery"] > 0 and parts["report"] > 0
        assert sum(parts.values()) <= record["hook_s"] + 1e-9
    text = page.read_text()
    assert BEGIN in text and END in text and "Command: `" in text
    assert text.count("| probes | 4 |") == 2 and text.count("| classes | 3 |") == 2  # seconds and ratios
