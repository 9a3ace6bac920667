"""The discovery subcommand's scores on hand-made records, and its report rebuilt from them."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gradskip_lightning.benchmarks.discovery.report import markdown
from gradskip_lightning.benchmarks.discovery.scoring import FORMULAS, pair_wins, score, seed_rows
from gradskip_lightning.benchmarks.discovery.trace import ClassRecord

BASE = ClassRecord(
    dataset="d", seed=0, variant="clean", shortcut="none", target=-1, method="m", share=0.1, epoch=1.0, label=0,
    probes=8, flip_rate=0.1, random_flip_rate=0.1, other_class_flip_rate=0.0, constancy=0.0, concentration=0.5,
    consistency=0.2, strategies=1, box=(0, 0, 4, 4), stamp=None, iou=math.nan, hit=math.nan, spurious_score=math.nan,
)  # fmt: skip


def records() -> list[ClassRecord]:
    """Two seeds: a stamped model (class 1 found at epoch 2) and a clean model of 2 classes each."""
    found = []
    for seed in (0, 1):
        for label in (0, 1):
            found.append(replace(BASE, seed=seed, label=label))
        for epoch, flip in ((1.0, 0.1), (2.0, 0.9)):
            stamped = replace(BASE, seed=seed, variant="stamped", target=1, epoch=epoch, stamp=(0, 0, 4, 4))
            found.append(replace(stamped, label=0))
            found.append(replace(stamped, label=1, flip_rate=flip, constancy=1.0, iou=0.5, hit=1.0, spurious_score=0.9,
                                 p_value=1e-3))  # fmt: skip
    return found


def test_the_suspicion_formulas():
    stamp = replace(BASE, flip_rate=0.9, constancy=1.0)
    assert FORMULAS["excess"](stamp) == pytest.approx(0.8)
    assert FORMULAS["no_consistency"](stamp) == pytest.approx(0.8 * 0.5**0.5)
    assert FORMULAS["full"](stamp) == pytest.approx(0.8 * 0.1 ** (1 / 3))
    assert math.isnan(FORMULAS["full"](replace(stamp, flip_rate=math.nan)))


def test_pair_wins_and_seed_rows():
    assert pair_wins(math.nan, [0.0, math.nan]) == [0.5, 0.5]
    assert seed_rows([]).numel() == 0 and seed_rows([(3, [1.0, 2.0])]).shape == (1, 2)


def test_a_stamp_found_only_by_the_last_epoch_scores_as_such():
    result = score(records(), "d", "m", 0.1, "no_consistency", threshold=0.15)
    assert result.auroc.mean == 1.0 and result.detection.mean == 1.0 and result.false_alarms.mean == 0.0
    assert result.iou.mean == 0.5 and result.hit.mean == 1.0
    assert result.first_fire == (2.0, 2.0) and result.spurious_epoch == (1.0, 1.0)
    text = markdown(records(), share=0.1, formula="no_consistency", threshold=0.15, alpha=0.05, command="c", facts={})
    assert "| m | 1.00 | 0.50 | 1.00 | 1.00 | 0.00 |" in text


def test_a_corrected_model_gets_its_row_and_leaves_the_discovery_scores_alone():
    corrected = [
        replace(BASE, seed=0, variant="corrected", target=1, label=1, epoch=epoch, spurious_score=score,
                clean_accuracy=0.97, corrected="class 1 at (0, 0)-(4, 4) from epoch 1", shortcut="4 px, corrected")
        for epoch, score in ((1.0, 0.9), (2.0, 0.05))
    ]  # fmt: skip
    stamped = [replace(r, clean_accuracy=0.9) for r in records()]
    before = score(stamped, "d", "m", 0.1, "no_consistency", threshold=0.15)
    assert score(stamped + corrected, "d", "m", 0.1, "no_consistency", threshold=0.15) == before
    table = dict(share=0.1, formula="no_consistency", threshold=0.15, alpha=0.05, command="c", facts={})
    text = markdown(stamped + corrected, **table)
    cells = "| 0 | 4 px, corrected | 0.90 | 0.05 | 0.90 | 0.97 | 1: 0.90, 2: 0.05 |"
    assert f"{cells} class 1 at (0, 0)-(4, 4) from epoch 1 |" in text
    assert "Unlearning the stamp" not in markdown(stamped, **table)


def test_the_calibrated_test_flags_only_with_a_p_value_at_most_alpha():
    assert score(records(), "d", "m", 0.1, "no_consistency", threshold=0.15, alpha=0.05).detection.mean == 1.0
    assert score(records(), "d", "m", 0.1, "no_consistency", threshold=0.15, alpha=1e-4).detection.mean == 0.0
    late = [replace(r, p_value=0.5) if r.epoch == 1.0 else r for r in records()]
    assert score(late, "d", "m", 0.1, "no_consistency", threshold=0.0, alpha=0.05).first_fire == (2.0, 2.0)
    clean = score(records(), "d", "m", 0.1, "no_consistency", threshold=0.0, alpha=0.05)
    assert clean.false_alarms.mean == 0.0 and math.isnan(clean.min_clean_p)  # clean classes without a p-value


def test_the_partial_and_bar_variants_get_their_own_rows():
    partial = [replace(r, variant="partial", tested_share=0.6) for r in records() if r.variant == "stamped"]
    text = markdown(records() + partial, share=0.1, formula="no_consistency", threshold=0.15, alpha=0.05,
                    command="c", facts={})  # fmt: skip
    assert "| partial | m | 1.00 | 2, 2 |" in text and "| 0.60 |" in text
