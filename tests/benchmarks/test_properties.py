"""The properties subcommand: its report scores hand-made records."""

from __future__ import annotations

import math
from dataclasses import replace

from benchmarks.discovery.trace import PropertyRecord
from benchmarks.properties import report

BASE = PropertyRecord(
    dataset="d", seed=0, variant="clean", shortcut_property="", target=-1, spurious_score=math.nan, accuracy=1.0,
    property="colour", label=0, recipients=8, flip_rate=0.1, control_flip_rate=0.0, separability=0.6, seconds=1.0,
)  # fmt: skip


def test_the_report_counts_learned_shortcuts_found_and_false_alarms():
    cast = replace(BASE, variant="cast", shortcut_property="colour", target=1, spurious_score=0.99)
    records = [
        BASE,
        replace(BASE, label=1, flip_rate=0.5, control_flip_rate=0.25),  # a clean class at 0.25
        replace(cast, label=0),
        replace(cast, label=1, flip_rate=1.0, control_flip_rate=0.1),  # the cast: 0.9
        replace(cast, label=1, property="brightness", flip_rate=0.5),  # the cast's class, another property
        replace(cast, variant="blur", shortcut_property="sharpness", spurious_score=0.1, property="sharpness"),
    ]
    text = report(records, "c", {})
    assert "| excess | 0.2 | 1/1 | 1/4 | d clean s0 c1 colour |" in text  # the blur was not learned: not counted
    assert "| excess | 0.3 | 1/1 | 0/4 |  |" in text and "| excess | max alarm | 0.250 |  |  |" in text
    assert "| d | colour | 0.25 (2) | 0.10 (1) | 0.90 |" in text
