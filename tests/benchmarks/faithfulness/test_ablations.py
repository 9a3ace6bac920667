"""GradSkip option overrides and the ablation rows built from them."""

from __future__ import annotations

import pytest

from benchmarks.faithfulness.ablations import SETTINGS, ablation_rows, gradskip_overrides
from gradskip_lightning.methods import GradSkipOptions


def test_gradskip_overrides_are_typed_and_validated():
    assert gradskip_overrides(["gate=layer", "alpha=0.25", "value_norm=False"]) == {
        "gate": "layer",
        "alpha": 0.25,
        "value_norm": False,
    }
    for bad in (["gate"], ["nope=1"], ["gate=sideways"], ["value_norm=no"]):
        with pytest.raises(ValueError):
            gradskip_overrides(bad)


def test_every_group_has_one_default_row_equal_to_the_base():
    rows = ablation_rows()
    assert [(r.group, r.name) for r in rows] == [(g, s) for g, s, _ in SETTINGS]
    groups = {r.group for r in rows}
    expected = {"alpha", "grad_threshold", "heads", "gate", "cls_mode", "attention_weighting", "value_norm"}
    assert expected | {"class_specific"} == groups
    defaults = [r for r in rows if r.is_default]
    assert sorted(r.group for r in defaults) == sorted(groups) and all(r.options == {} for r in defaults)
    assert all(r.table == "ablations" and r.kind == "ablation" for r in rows)


def test_a_base_moves_the_default_row():
    rows = ablation_rows({"gate": "token"})
    defaults = {r.name for r in rows if r.is_default}
    assert "gate=token" in defaults and "gate=layer" not in defaults and "alpha=0.5" in defaults
    layer = next(r for r in rows if r.name == "gate=layer")
    assert layer.options == {"gate": "layer"}  # the base's gate is replaced, not kept
    assert next(r for r in rows if r.name == "alpha=0.0").options == {"gate": "token", "alpha": 0.0}


def test_groups_select_ablation_rows():
    rows = ablation_rows(groups=["class_specific"])
    assert {r.group for r in rows} == {"class_specific"} and sum(r.is_default for r in rows) == 1
    preset = next(r for r in rows if r.name == "preset class_specific()")
    assert preset.options == GradSkipOptions.class_specific_overrides()
    with pytest.raises(ValueError, match="unknown ablation groups"):
        ablation_rows(groups=["nope"])
