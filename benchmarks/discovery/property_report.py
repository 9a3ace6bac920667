"""The global property tables of the discovery benchmark, from the :class:`~.trace.PropertyRecord`s the trace
takes at every epoch end (the discovery stage's property transplants at its defaults; a (class, property) is
flagged at adjusted p-value <= ``alpha`` and suspicion >= ``property_alert_threshold``, 0.05 and 0.4).

:func:`shortcut_table`: per global variant on one class, whether its class is flagged for the variant's property
(the detection rate over seeds at the last epoch), the first epoch end it is, its suspicion and spurious score.
:func:`learned_table`: per global variant on one class, the epoch ends at which its model relies on the shortcut and the
share of them at which its class is flagged (for any property), and at which another class is.
:func:`class_epoch_table`: per clean or control variant, the share of its (class, epoch end) pairs flagged for any
property.
:func:`false_alarm_table`: per property, the share of the classes of the clean and control models flagged (at
the last epoch, and at any epoch end: each of those raised an alert) against the issue's bar of 5 %, and the
highest suspicion.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from benchmarks.tables import table
from gradskip_lightning.shortcuts.image_properties import PROPERTY_NAMES

from ..shortcut.report import epochs_cell
from ..shortcuts import SHORTCUTS
from .scoring import LEARNED, bootstrap_interval, by_seed, final, seed_rows
from .tables import cell
from .trace import STAGE, PropertyRecord
from .variants import CONTROL_P, GLOBAL, Variant

#: The models whose every flagged (class, property) is a false alarm: no shortcut with a global property on one class.
NEGATIVES: tuple[Variant, ...] = ("clean", "control", *(v for v, g in GLOBAL.items() if g.control))
#: The issue's bar: the share of those classes flagged for any property, at most.
BAR = 0.05
#: What the global property tables hold (the report's definitions).
DEFINITIONS = (
    "Global properties: at every epoch end each model's discovery probes go through the discovery stage's property "
    "transplants at its defaults (docs/discovery.md, *Global properties*): a (class, property) is flagged at "
    f"adjusted p-value <= {STAGE.alpha:g} (sign test against the control, Holm over the epoch's (class, "
    f"property) tests) and suspicion >= {STAGE.property_alert_threshold:g}. Detected: the class of a global variant "
    "flagged for the variant's property at the last epoch (share of seeds; interval: bootstrap over seeds); first "
    "fire: the first epoch end at which it is; spurious score: the share of the other classes' test images "
    "predicted as the class once given the shortcut. False alarms: the share of the classes of the clean and "
    f"control models (`control`: the stamp; `*_control`: the property change on {CONTROL_P:.0%} of every class's "
    "images) flagged, at the last epoch (interval: hierarchical bootstrap over seeds and classes) and at any epoch "
    "end (each such class was alerted); over the floor alone: what the fixed threshold without the p-value would "
    "flag at any epoch end."
)


def _cell(records: Sequence[PropertyRecord], value: Callable[[PropertyRecord], float]) -> str:
    """The mean of ``value`` of ``records`` with its interval over seeds (:func:`~.tables.cell`)."""
    return cell(bootstrap_interval(by_seed(records, value)))


def _own(record: PropertyRecord) -> bool:
    """Whether ``record`` is of the shortcut's class and property."""
    return record.label == record.target and record.property == record.shortcut_property


def _first_flag(records: Sequence[PropertyRecord]) -> float | None:
    """The first epoch end at which one of ``records`` (one model's class and property) is flagged."""
    return min((r.epoch for r in records if r.flagged), default=None)


def shortcut_table(records: Sequence[PropertyRecord], dataset: str) -> list[str]:
    """One row per global variant on one class of ``dataset``: its class flagged for the variant's property at
    the last epoch (share of seeds, and how many), the first epoch end it is (per seed), its suspicion and
    spurious score at the last epoch, and the other (class, property) pairs of those models flagged then.
    Empty without such models."""
    mine = [r for r in records if r.dataset == dataset]
    rows = []
    for variant, of in GLOBAL.items():
        trace = [r for r in mine if r.variant == variant]
        if of.control or not trace:
            continue
        last = final(trace)
        own = sorted((r for r in last if _own(r)), key=lambda r: r.seed)
        first = [_first_flag([r for r in trace if r.seed == seed and _own(r)]) for seed in (r.seed for r in own)]
        others = [r for r in last if not _own(r)]
        where = sorted(f"s{r.seed} c{r.label} {r.property}" for r in others if r.flagged)
        listed = f" ({', '.join(where[:4])}{' ...' if len(where) > 4 else ''})" if where else ""
        rows.append([
            variant, SHORTCUTS[of.shortcut].describe, SHORTCUTS[of.shortcut].property,
            _cell(own, lambda r: float(r.flagged)),
            f"{sum(r.flagged for r in own)}/{len(own)}", epochs_cell(first), _cell(own, lambda r: r.suspicion),
            _cell(own, lambda r: r.spurious_score), ", ".join(f"{r.spurious_score:.2f}" for r in own),
            f"{len(where)}/{len(others)}{listed}",
        ])  # fmt: skip
    header = ["variant", "shortcut", "property", "detected", "seeds flagged", "first fire (epoch, per seed)",
              "suspicion", "spurious score", "spurious (per seed)", "other (class, property) flagged"]  # fmt: skip
    return [*table(header, rows), ""] if rows else []


def _flags_by_class_epoch(records: Sequence[PropertyRecord]) -> dict[tuple, list[str]]:
    """(seed, variant, epoch, label) -> the properties flagged there, of ``records`` of one dataset."""
    flags: dict[tuple, list[str]] = {}
    for r in records:
        at = (r.seed, r.variant, r.epoch, r.label)
        flags.setdefault(at, [])
        if r.flagged:
            flags[at].append(r.property)
    return flags


def learned_table(records: Sequence[PropertyRecord], dataset: str) -> list[str]:
    """One row per global variant on one class of ``dataset``: the epoch ends at which its model relies on the
    shortcut (spurious score at least :data:`~.scoring.LEARNED`), per seed; the share of them at which its class is
    flagged for any property (interval: hierarchical bootstrap over seeds and epoch ends), what it was flagged for
    (property: epoch ends) and the epoch ends at which another class was flagged. Empty without such models."""
    mine = [r for r in records if r.dataset == dataset]
    flags = _flags_by_class_epoch(mine)
    labels = {r.label for r in mine}
    rows = []
    for variant, of in GLOBAL.items():
        trace = [r for r in mine if r.variant == variant and r.label == r.target and r.property == PROPERTY_NAMES[0]]
        if of.control or not trace:
            continue
        learned = sorted((r for r in trace if r.spurious_score >= LEARNED), key=lambda r: (r.seed, r.epoch))
        own = [flags[(r.seed, variant, r.epoch, r.label)] for r in learned]  # the properties flagged, per epoch end
        named: dict[str, int] = {}
        for name in (name for names in own for name in names):
            named[name] = named.get(name, 0) + 1
        others = sum(any(flags[(r.seed, variant, r.epoch, k)] for k in labels - {r.target}) for r in learned)
        per_seed = ", ".join(
            f"s{seed}: {sum(1 for r in learned if r.seed == seed)}/{sum(1 for r in trace if r.seed == seed)}"
            for seed in sorted({r.seed for r in trace})
        )
        found = [(r.seed, [float(bool(names))]) for r, names in zip(learned, own, strict=True)]
        rows.append([
            variant, SHORTCUTS[of.shortcut].describe, per_seed,
            f"{sum(map(bool, own))}/{len(learned)}", cell(bootstrap_interval(seed_rows(found))),
            ", ".join(f"{name} {count}" for name, count in sorted(named.items())) or "none", f"{others}/{len(learned)}",
        ])  # fmt: skip
    header = ["variant", "shortcut", f"epoch ends learned (spurious >= {LEARNED:g}), per seed",
              "its class flagged at those", "share", "flagged for (epoch ends)",
              "another class flagged at those"]  # fmt: skip
    return [*table(header, rows), ""] if rows else []


def class_epoch_table(records: Sequence[PropertyRecord], dataset: str) -> list[str]:
    """Per clean or control variant of ``dataset`` (and all together first): the share of its (class, epoch end)
    pairs flagged for any property (interval: hierarchical bootstrap over seeds and pairs), against :data:`BAR`.
    Empty without them."""
    flags = _flags_by_class_epoch([r for r in records if r.dataset == dataset and r.variant in NEGATIVES])
    present = [v for v in NEGATIVES if any(at[1] == v for at in flags)]
    groups = ([("all", present)] if len(present) > 1 else []) + [(v, [v]) for v in present]
    rows = []
    for name, variants in groups:
        pairs = [(at[0], [float(bool(f))]) for at, f in flags.items() if at[1] in variants]
        flagged = sum(int(v[0]) for _, v in pairs)
        share = cell(bootstrap_interval(seed_rows(pairs)))
        rows.append([name, f"{flagged}/{len(pairs)}", share, "yes" if flagged <= BAR * len(pairs) else "no"])
    header = ["models", "(class, epoch end) flagged", "share", f"within {BAR:.0%}"]
    return [*table(header, rows), ""] if rows else []


def false_alarm_table(records: Sequence[PropertyRecord], dataset: str) -> list[str]:
    """Per property, for the clean and control models of ``dataset`` together (the first row, named by their
    variants) and then each variant of them (when there are several):
    the share of their classes flagged at the last epoch (with its interval) and at any epoch end, whether the
    latter is within :data:`BAR`, the share at any epoch end over the suspicion floor alone (what the fixed
    threshold without the p-value would flag) and the highest suspicion at any epoch end (where). Empty without
    them."""
    mine = [r for r in records if r.dataset == dataset and r.variant in NEGATIVES]
    present = [v for v in NEGATIVES if any(r.variant == v for r in mine)]
    groups = [(", ".join(present), present)] + ([(v, [v]) for v in present] if len(present) > 1 else [])
    rows = []
    for name in PROPERTY_NAMES:
        for group, variants in groups:
            trace = [r for r in mine if r.property == name and r.variant in variants]
            if not trace:
                continue
            classes: dict[tuple, bool] = {}
            loud: dict[tuple, bool] = {}
            for r in trace:
                at = (r.seed, r.variant, r.label)
                classes[at] = classes.get(at, False) or r.flagged
                loud[at] = loud.get(at, False) or r.suspicion >= STAGE.property_alert_threshold
            ever, over = sum(classes.values()) / len(classes), sum(loud.values())
            finite = [r for r in trace if not math.isnan(r.suspicion)]
            top = max(finite, key=lambda r: r.suspicion, default=None)
            highest = "n/a" if top is None else f"{top.suspicion:.2f} ({top.variant} s{top.seed} c{top.label}"
            rows.append([
                name, group, f"{len({r.seed for r in trace})} x {len({r.variant for r in trace})}",
                _cell(final(trace), lambda r: float(r.flagged)), f"{ever:.2f} ({sum(classes.values())}/{len(classes)})",
                "yes" if ever <= BAR else "no", f"{over / len(loud):.2f} ({over}/{len(loud)})",
                highest if top is None else f"{highest}, epoch {top.epoch:g})",
            ])  # fmt: skip
    header = ["property", "models", "seeds x variants", "false alarms (last epoch)", "flagged at any epoch",
              f"within {BAR:.0%}", f"suspicion >= {STAGE.property_alert_threshold:g} at any epoch",
              "highest suspicion (where, epoch)"]  # fmt: skip
    return [*table(header, rows), ""] if rows else []


def section(records: Sequence[PropertyRecord], dataset: str) -> list[str]:
    """The global property tables of ``dataset`` with their captions; empty without property records."""
    shortcuts, alarms = shortcut_table(records, dataset), false_alarm_table(records, dataset)
    learned, pairs = learned_table(records, dataset), class_epoch_table(records, dataset)
    lines = []
    if shortcuts:
        lines += ["Global shortcuts on one class (the discovery stage's property transplants, flagged at adjusted "
                  f"p-value <= {STAGE.alpha:g} and suspicion >= {STAGE.property_alert_threshold:g}):", "",
                  *shortcuts]  # fmt: skip
    if learned:
        lines += ["Every epoch end once learned: the shortcut's class flagged for any property at the epoch ends where "
                  f"the model relies on it (spurious score >= {LEARNED:g}):", "", *learned]  # fmt: skip
    if pairs:
        lines += ["Clean and control models, per epoch end: (class, epoch end) pairs flagged for any property:", "",
                  *pairs]  # fmt: skip
    if alarms:
        lines += [f"Global properties: false alarms of the clean and control models (the bar: at most {BAR:.0%} of "
                  "their classes for every property):", "", *alarms]  # fmt: skip
    return lines
