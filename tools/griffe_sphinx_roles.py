"""A griffe extension for the docs site (mkdocs.yml): the package's docstrings cross-reference with
Sphinx roles (``:class:`~.probes.ProbeImages```), which Google-style Markdown would show raw; each
role becomes inline code of what Sphinx would display (``ProbeImages``)."""

from __future__ import annotations

import re
from typing import Any

import griffe

#: A Sphinx cross-reference role and its target.
ROLE = re.compile(r":(?:class|func|mod|meth|attr|data|exc|obj):`([^`]+)`")
#: A target with an explicit title: ``title <target>``.
TITLED = re.compile(r"(.+?)\s*<[^<>]+>")


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


class SphinxRoles(griffe.Extension):
    """Rewrite the roles of every docstring once the object tree is complete."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = as_code(obj.docstring.value)
