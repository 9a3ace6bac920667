"""Reading the package's docstrings for the docs: Sphinx roles shown as inline code, and the entries of a
Google-style section (``Args:``, ``Attributes:``).

Used by the docs site's griffe extension (``tools/griffe_sphinx_roles.py``, which loads this file alone: it
imports nothing of the package) and by :mod:`gradskip_lightning.options_page`.
"""

from __future__ import annotations

import re

__all__ = ["as_code", "displayed", "section_entries"]

#: A Sphinx cross-reference role and its target.
ROLE = re.compile(r":(?:class|func|mod|meth|attr|data|exc|obj):`([^`]+)`")
#: A target with an explicit title: ``title <target>``.
TITLED = re.compile(r"(.+?)\s*<[^<>]+>")
#: A section entry's first line: the names it documents (``mean, std``), then its text.
ENTRY = re.compile(r"(?P<names>[A-Za-z_*][\w*]*(?:, [A-Za-z_*][\w*]*)*): (?P<text>.*)")


def displayed(target: str) -> str:
    """What Sphinx shows for a role's target: the title, the last part after ``~``, or the target."""
    titled = TITLED.fullmatch(target)
    if titled:
        return titled[1]
    return target[1:].rsplit(".", 1)[-1] if target.startswith("~") else target


def as_code(text: str) -> str:
    """``text`` with every Sphinx role as inline code.

    >>> as_code("see :class:`~.probes.ProbeImages`, :mod:`.budget` and :meth:`run <a.B.run>`")
    'see `ProbeImages`, `.budget` and `run`'
    """
    return ROLE.sub(lambda match: f"`{displayed(match[1])}`", text)


def section_entries(docstring: str, section: str) -> dict[str, str]:
    """Name -> text of each entry of the Google-style ``section`` (``"Args"``, ``"Attributes"``) of a dedented
    ``docstring`` (``inspect.getdoc``), its lines joined; an entry naming several (``mean, std: ...``) gives each
    the same text. Empty without the section.

    >>> section_entries("Sum.\\n\\nArgs:\\n    a, b: the terms,\\n        any numbers.\\n    c: ignored.\\n", "Args")
    {'a': 'the terms, any numbers.', 'b': 'the terms, any numbers.', 'c': 'ignored.'}
    """
    entries: dict[str, list[str]] = {}
    names: list[str] = []
    inside = False
    for line in docstring.splitlines():
        if not inside:
            inside = line.strip() == f"{section}:"
            continue
        if line.strip() and not line.startswith("    "):  # the section ends at the next unindented line
            break
        entry = ENTRY.fullmatch(line[4:]) if line.startswith("    ") and not line.startswith("     ") else None
        if entry is not None:
            names = entry["names"].split(", ")
            for name in names:
                entries[name] = [entry["text"]]
        elif line.strip() and names:
            for name in names:
                entries[name].append(line.strip())
    return {name: " ".join(lines) for name, lines in entries.items()}
