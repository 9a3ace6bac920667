"""The method registry: names, Literal, specs and option validation."""

from __future__ import annotations

import dataclasses
from typing import get_args, get_type_hints

import pytest

from gradskip_lightning.methods import PASS_METHODS, GradSkipOptions, MethodName


def test_names_literal_and_specs_agree():
    assert PASS_METHODS.names == get_args(MethodName) == tuple(PASS_METHODS)
    assert {n for n, s in PASS_METHODS.items() if s.step.mode != "forward"} == {"gradskip", "chefer", "lrp"}
    assert {n for n, s in PASS_METHODS.items() if s.step.mode == "conservative"} == {"lrp"}
    assert all(dataclasses.is_dataclass(spec.options) for spec in PASS_METHODS.values())


def test_choice_options_are_literals_a_cli_can_list():
    hints = get_type_hints(GradSkipOptions)
    assert get_args(hints["gate"]) == ("token", "layer", "off")
    assert get_args(hints["attention_weighting"]) == ("abs_grad", "pos_grad", "signed_grad", "none")
    assert get_args(hints["normalisation"]) == ("rows", "layer")
    assert get_args(hints["token_weighting"]) == ("off", "grad_x_act")
    assert get_args(hints["readout"]) == ("relevance", "grad_x_act")
    assert get_args(hints["cls_mode"]) == ("readout", "paper")
    assert get_args(hints["head_selection"]) == ("top_omega", "top_sparsity", "bottom_sparsity")


def test_unknown_method_and_options_raise():
    with pytest.raises(ValueError, match="Unknown method 'lime'.*gradskip"):
        PASS_METHODS["lime"]
    with pytest.raises(ValueError, match=r"takes no option\(s\) \['alpha'\]; it takes \[\]"):
        PASS_METHODS["rollout"].make_options("rollout", alpha=0.5)
    assert PASS_METHODS["random"].make_options("random", seed=3).seed == 3
