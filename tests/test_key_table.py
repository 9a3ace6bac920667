"""One source per logged value: the record's fields and the score table drive the sections, the
scores computed, the dashboard and the table of keys on docs/logged-keys.md."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import get_args

from gradskip_lightning.engine.keys import SECTIONS, Section
from gradskip_lightning.engine.scoring.record import ProbeRecord, scalar_fields
from gradskip_lightning.engine.scoring.scores import REQUIREMENTS, SCORES, Requirement
from gradskip_lightning.key_table import BEGIN, END, logged_keys_table

KEYS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "logged-keys.md"


def test_sections_are_the_literal_and_every_scalar_field_names_one():
    assert SECTIONS == get_args(Section)
    assert {scalar.section for scalar in scalar_fields().values()} <= set(SECTIONS)
    assert all(scalar.doc for scalar in scalar_fields().values())


def test_every_scalar_field_is_filled_by_exactly_one_score_row():
    filled = [name for score in SCORES for name in score.fields]
    assert len(filled) == len(set(filled))
    assert set(scalar_fields()) <= set(filled) <= {f.name for f in fields(ProbeRecord)}
    assert set(REQUIREMENTS) == set(get_args(Requirement))
    assert {score.needs for score in SCORES} - {None} <= set(REQUIREMENTS)


def test_the_docs_page_holds_the_generated_table_of_logged_keys():
    text = KEYS_PAGE.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == logged_keys_table()
