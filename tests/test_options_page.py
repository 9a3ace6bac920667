"""The options page (docs/callback-options.md) is generated from the settings' fields and docstrings: it holds
exactly the generated tables, every option of every group has docstring text, and a change to a docstring or a
default makes the page stale."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gradskip_lightning import options_page
from gradskip_lightning.engine.settings import ScoreSettings
from gradskip_lightning.options_page import BEGIN, END, GROUPS, OptionGroup, group_table, options_tables, write_page

PAGE = Path(__file__).resolve().parents[1] / "docs" / "callback-options.md"


def test_the_docs_page_holds_the_generated_options_tables():
    text = PAGE.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == options_tables(), "stale: run python -m gradskip_lightning.options_page --write"


def test_every_option_of_every_group_is_a_row_with_its_default():
    tables = options_tables()
    for group in GROUPS:
        table = group_table(group)
        if dataclasses.is_dataclass(group.source):
            names = [f.name for f in dataclasses.fields(group.source)]
        else:
            names = ["probe_images", "probes", "methods", "scores", "render", "discovery", "every_n_epochs"]
        assert all(f"| `{group.prefix}{name}` |" in table for name in names), group.title
        assert table in tables
    assert "| `scores.insertion_steps` | int | `16` | K, the perturbation steps of insertion/deletion. |" in tables
    assert "| `p` | float | `0.25` | probability that a training image gets an artifact" in tables  # ShortcutCorrection
    assert "| `discovery.alpha` | float | `0.05` |" in tables  # a field DiscoveryStage inherits


def test_a_changed_default_or_docstring_makes_the_page_stale(tmp_path, monkeypatch):
    page = tmp_path / "options.md"
    page.write_text(f"# Options\n\nkept\n\n{BEGIN}\nold\n{END}\n\nkept too\n")
    write_page(page)
    written = page.read_text()
    assert written.startswith("# Options\n\nkept\n\n") and written.endswith("\n\nkept too\n")
    assert options_tables() in written

    @dataclasses.dataclass(frozen=True)
    class Changed(ScoreSettings):
        """Changed.

        Attributes:
            insertion_steps: K, fewer.
        """

        insertion_steps: int = 8

    scores = OptionGroup("scores", "scores.", Changed, "changed")
    monkeypatch.setattr(options_page, "GROUPS", tuple(scores if g.title == "scores" else g for g in GROUPS))
    assert "| `scores.insertion_steps` | int | `8` | K, fewer. |" in options_tables()
    assert options_tables() not in written  # the page is stale until written again


def test_an_option_without_docstring_text_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Undocumented:
        """No attributes section."""

        size: int = 1

    with pytest.raises(ValueError, match=r"Undocumented.size has no docstring text"):
        group_table(OptionGroup("x", "x.", Undocumented, ""))
