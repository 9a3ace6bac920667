"""A griffe extension for the docs site (mkdocs.yml): the package's docstrings cross-reference with
Sphinx roles (``:class:`~.probes.ProbeImages```), which Google-style Markdown would show raw; each
role becomes inline code of what Sphinx would display (``ProbeImages``), by
``gradskip_lightning/docstrings.py`` (loaded alone: the package's imports are not needed here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import griffe

_spec = importlib.util.spec_from_file_location(
    "gradskip_lightning_docstrings", Path(__file__).resolve().parents[1] / "gradskip_lightning" / "docstrings.py"
)
assert _spec is not None and _spec.loader is not None
_docstrings = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_docstrings)
as_code = _docstrings.as_code


class SphinxRoles(griffe.Extension):
    """Rewrite the roles of every docstring once the object tree is complete."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = as_code(obj.docstring.value)
