"""The names of the logged keys: ``<section>/<log_prefix><name>[/<method>]``.

W&B (and TensorBoard) put a panel in the section named by the key's text before the first "/",
so every key starts with its section (:data:`Section`), then the callback's ``log_prefix`` (two
callbacks stay apart inside one section), then the value's name. Scores of a comparison method
end in ``/<method>``, so one regular expression (:func:`score_pattern`) picks the explained
method's score and every compared method's for one chart. The callback's own bookkeeping
(``epoch``, ``time_s``, ``skipped``) is ``<log_prefix><name>``: a section named after the callback.

Example:
    >>> key("faithfulness", "gradskip/", "insertion")
    'faithfulness/gradskip/insertion'
    >>> key("regions", "gradskip/", "mass/tag", method="rollout")
    'regions/gradskip/mass/tag/rollout'
    >>> pattern = score_pattern("faithfulness", "gradskip/", "insertion")
    >>> [bool(re.fullmatch(pattern, k)) for k in ("faithfulness/gradskip/insertion/chefer", "regions/gs/insertion")]
    [True, False]
"""

from __future__ import annotations

import re
from typing import Literal, get_args

__all__ = ["Section", "SECTIONS", "key", "score_pattern"]

Section = Literal[
    "faithfulness", "regions", "transplant", "discovery", "correction", "drift", "gates", "probes", "heads"
]
SECTIONS: tuple[Section, ...] = get_args(Section)
"""Every section, in the order the dashboard shows them."""


def key(section: Section | None, prefix: str, name: str, *, method: str | None = None) -> str:
    """The logged key of ``name`` in ``section`` (None: the callback's own section) for ``method``.

    Args:
        section: one of :data:`SECTIONS`, or None for ``<prefix><name>``.
        prefix: the callback's ``log_prefix`` (with ``validate/`` appended under ``validate()``).
        name: the value's name, e.g. ``insertion`` or ``mass/tag``.
        method: a comparison method's name, appended as ``/<method>``; None for the explained method.
    """
    head = "" if section is None else f"{section}/"
    tail = "" if method is None else f"/{method}"
    return f"{head}{prefix}{name}{tail}"


def score_pattern(section: Section, prefix: str, name: str) -> str:
    """A regular expression matching the key of ``name`` for the explained and every compared method."""
    return f"^{re.escape(key(section, prefix, name))}(/[^/]+)?$"
