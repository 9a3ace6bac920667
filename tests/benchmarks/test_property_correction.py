"""The properties subcommand's --correction report: per model its spurious score after each epoch, the last clean
accuracy and what was corrected."""

from __future__ import annotations

from dataclasses import replace

from benchmarks.property_correction import CorrectionRecord, report

CAST = CorrectionRecord("d", 0, "cast", "cast", 1, 1.0, 0.75, "")


def test_the_report_puts_the_shortcut_model_before_its_corrected_twin_with_every_epoch():
    fixed = replace(CAST, model="corrected", corrected="class 2 colour shortcut from epoch 1")
    records = [
        replace(fixed, epoch=2, spurious_score=0.1, clean_accuracy=0.9), replace(fixed, epoch=1),
        CAST, replace(CAST, epoch=2, spurious_score=0.98, clean_accuracy=0.74),
    ]  # fmt: skip
    lines = report(records, "c").splitlines()
    assert lines[0] == "Command: `c`"
    assert lines[-2:] == [
        "| d | 0 | cast | - | 1.00, 0.98 | 0.740 |",
        "| d | 0 | corrected | class 2 colour shortcut from epoch 1 | 1.00, 0.10 | 0.900 |",
    ]
