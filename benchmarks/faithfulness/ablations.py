"""GradSkip's option ablations: one option changed at a time from a base (the defaults or ``--gradskip``)."""

from __future__ import annotations

from typing import Any

from gradskip_lightning.methods import GradSkipOptions
from gradskip_lightning.methods.gradskip import CLASS_SPECIFIC

from .records import Row

#: (group, setting label, options) of every ablation, before the base is applied; a new setting is one entry.
SETTINGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    *(("alpha", f"alpha={a}", {"alpha": a}) for a in (0.0, 0.25, 0.5, 0.75, 1.0)),
    *(("grad_threshold", f"grad_threshold={t}", {"grad_threshold": t}) for t in (0.0, 0.05, 0.1, 0.2)),
    ("heads", "all heads", {"head_top_fraction": 1.0}),
    ("heads", "top 25% by omega", {"head_top_fraction": 0.25, "head_selection": "top_omega"}),
    ("heads", "top 25% by sparsity", {"head_top_fraction": 0.25, "head_selection": "top_sparsity"}),
    ("heads", "bottom 25% by sparsity", {"head_top_fraction": 0.25, "head_selection": "bottom_sparsity"}),
    *(("gate", f"gate={g}", {"gate": g}) for g in ("token", "layer", "off")),
    *(("cls_mode", f"cls_mode={c}", {"cls_mode": c}) for c in ("readout", "paper")),
    *(
        ("attention_weighting", f"attention_weighting={w}", {"attention_weighting": w})
        for w in ("abs_grad", "pos_grad", "signed_grad", "none")
    ),
    *(("value_norm", f"value_norm={v}", {"value_norm": v}) for v in (True, False)),
    # Readings that make the maps follow the class and the weights (docs/method.md); the
    # group's default row is the empty change. Class sensitivity and randomisation: --costly-ablations.
    ("class_specific", "defaults", {}),
    ("class_specific", "normalisation=layer", {"normalisation": "layer"}),
    ("class_specific", "token_weighting=grad_x_act", {"token_weighting": "grad_x_act"}),
    ("class_specific", "readout=grad_x_act", {"readout": "grad_x_act"}),
    ("class_specific", "pos_grad, value_norm=False", {"attention_weighting": "pos_grad", "value_norm": False}),
    ("class_specific", "preset class_specific()", CLASS_SPECIFIC),
    ("class_specific", "preset + token_weighting=grad_x_act", {**CLASS_SPECIFIC, "token_weighting": "grad_x_act"}),
)


def gradskip_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["gate=layer", "alpha=0.25"]`` -> ``{"gate": "layer", "alpha": 0.25}``, typed as GradSkipOptions' defaults.

    >>> gradskip_overrides(["gate=token", "value_norm=False"])
    {'gate': 'token', 'value_norm': False}
    """
    defaults = GradSkipOptions()
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not hasattr(defaults, name):
            raise ValueError(f"--gradskip takes OPTION=VALUE with OPTION a GradSkipOptions field, got {pair!r}")
        kind = type(getattr(defaults, name))
        if kind is bool and text not in ("True", "False"):
            raise ValueError(f"--gradskip {name} must be True or False, got {text!r}")
        out[name] = text == "True" if kind is bool else kind(text)
    GradSkipOptions(**out)  # validates the values
    return out


def ablation_rows(base: dict[str, Any] | None = None, groups: list[str] | None = None) -> list[Row]:
    """Every ablation row (of ``groups``; None = all), each one option changed from ``base``
    (GradSkipOptions overrides; None = the defaults). An option equal to the base's is left out, so the
    setting that changes nothing is the default row (``is_default``); every group has one.
    """
    base = base or {}
    defaults = GradSkipOptions(**base)
    rows = []
    known = {group for group, _, _ in SETTINGS}
    if groups is not None and not set(groups) <= known:
        raise ValueError(f"unknown ablation groups {sorted(set(groups) - known)}; choose from {sorted(known)}")
    for group, setting, options in SETTINGS:
        if groups is not None and group not in groups:
            continue
        changed = {**base, **{k: v for k, v in options.items() if getattr(defaults, k) != v}}
        rows.append(Row("ablations", setting, group, "ablation", changed, is_default=changed == base))
    return rows
