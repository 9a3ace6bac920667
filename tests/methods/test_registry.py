"""The method registry: names, Literal, specs and option validation."""

from __future__ import annotations

import dataclasses
from typing import get_args, get_type_hints

import pytest

from gradskip_lightning.explainer import METHODS as EXPLAINER_METHODS
from gradskip_lightning.methods import METHOD_SPECS, METHODS, GradSkipOptions, MethodName, method_spec


def test_names_literal_and_specs_agree():
    assert METHODS == get_args(MethodName) == tuple(METHOD_SPECS) == EXPLAINER_METHODS
    assert {n for n, s in METHOD_SPECS.items() if s.needs_backward} == {"gradskip", "chefer", "lrp"}
    assert {n for n, s in METHOD_SPECS.items() if s.mode == "conservative"} == {"lrp"}
    assert all(dataclasses.is_dataclass(spec.options) for spec in METHOD_SPECS.values())


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
        method_spec("lime")
    with pytest.raises(ValueError, match=r"takes no option\(s\) \['alpha'\]; it takes \[\]"):
        method_spec("rollout").make_options("rollout", alpha=0.5)
    assert method_spec("random").make_options("random", seed=3).seed == 3
