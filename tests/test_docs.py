"""The docs site's sources (docs/, mkdocs.yml, the README): the API reference documents every public
name, every module, object and file the pages name exists, and the docstrings' Sphinx roles render.

``python -m mkdocs build --strict`` (in .ci/run) checks the links, the anchors and the ``:::``
references; these checks cover what it cannot see: names in inline code and prose.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

import gradskip_lightning

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
#: A ``::: target`` line of an API page and the indented YAML options under it.
REFERENCE = re.compile(r"^::: (\S+)\n((?:[ \t]+.*\n)*)", re.M)
#: A dotted name in the package (``gradskip_lightning.key_table``).
DOTTED = re.compile(r"\bgradskip_lightning(?:\.[A-Za-z_]\w*)+")
#: A path in the repository (``gradskip_lightning/core/adapter.py``, ``tests/...``, ``configs/...``).
REPO_PATH = re.compile(r"\b(?:gradskip_lightning|tests|configs)/[\w/.-]*\w")
#: ``<!-- worked example: path path ... -->``: paths a page's worked example creates (and then removes).
EXAMPLE_PATHS = re.compile(r"<!-- worked example: (.*?) -->", re.S)


def resolve(dotted: str) -> Any:
    """The object ``dotted`` names: its longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:end]))
            break
        except ModuleNotFoundError:
            continue
    for name in parts[end:]:
        found = getattr(found, name)
    return found


def documented_objects() -> list[Any]:
    """Every object the API pages render: each ``:::`` target and its listed ``members`` (all of a
    module's ``__all__`` for ``members: true``)."""
    found = []
    for page in sorted((DOCS / "api").glob("*.md")):
        for target, block in REFERENCE.findall(page.read_text()):
            options = (yaml.safe_load(textwrap.dedent(block)) or {}).get("options", {})
            members = options.get("members")
            obj = resolve(target)
            if members is True:
                members = obj.__all__
            found += [obj, *(getattr(obj, name) for name in members or ())]
    return found


def test_the_api_reference_documents_every_public_name():
    documented = documented_objects()
    public = {name: getattr(gradskip_lightning, name) for name in gradskip_lightning.__all__}
    missing = [name for name, obj in public.items() if not any(obj is other for other in documented)]
    assert not missing, f"add them to a page of docs/api/: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_and_path_a_page_gives_exists(page):
    text = page.read_text()
    unresolved = []
    for dotted in sorted(set(DOTTED.findall(text))):
        try:
            resolve(dotted)
        except (ImportError, AttributeError):
            unresolved.append(dotted)
    examples = {path for listed in EXAMPLE_PATHS.findall(text) for path in listed.split()}
    missing = sorted({p for p in REPO_PATH.findall(text) if not (ROOT / p).exists() and p not in examples})
    assert not unresolved and not missing, f"names: {unresolved}; paths: {missing}"


def test_sphinx_roles_in_docstrings_render_as_inline_code():
    spec = importlib.util.spec_from_file_location("griffe_sphinx_roles", ROOT / "tools" / "griffe_sphinx_roles.py")
    assert spec is not None and spec.loader is not None
    roles = importlib.util.module_from_spec(spec)
    pytest.importorskip("griffe")  # the docs extra
    spec.loader.exec_module(roles)
    text = "a :class:`~.probes.ProbeImages`, :mod:`gradskip_lightning.metrics`, :meth:`run <a.B.run>` and ``code``"
    assert roles.as_code(text) == "a `ProbeImages`, `gradskip_lightning.metrics`, `run` and ``code``"
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    assert "tools/griffe_sphinx_roles.py" in mkdocs  # the site's docstrings go through it


#: A README link into the docs: ``](docs/page.md#anchor)``.
README_DOCS_LINK = re.compile(r"\]\((docs/[^)#\s]+\.md)(?:#([^)\s]+))?\)")


def heading_anchors(page: Path) -> set[str]:
    """The anchors MkDocs gives ``page``'s headings (the toc extension's slugs), code blocks left out."""
    slugify = pytest.importorskip("markdown.extensions.toc").slugify  # the docs extra
    prose = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return {slugify(title, "-") for title in re.findall(r"^#{1,6} (.+?)\s*$", prose, flags=re.M)}


def test_the_readme_links_into_the_docs_resolve():
    """The strict site build checks the links between pages; the README is outside it, so its links into
    docs/ (a page moved, a heading renamed) are checked here."""
    broken = []
    for path, anchor in README_DOCS_LINK.findall((ROOT / "README.md").read_text()):
        page = ROOT / path
        if not page.exists() or (anchor and anchor not in heading_anchors(page)):
            broken.append(f"{path}#{anchor}" if anchor else path)
    assert not broken, f"README links to missing pages or headings: {broken}"


def test_the_discovery_guide_python_block_runs():
    """docs/discovery.md's example builds its callbacks as written: the stage on, off, on with one property."""
    (block,) = re.findall(r"^```python\n(.*?)^```", (DOCS / "discovery.md").read_text(), flags=re.M | re.S)
    names: dict = {}
    exec(compile(block, "docs/discovery.md", "exec"), names)  # noqa: S102 - the page's own code
    assert names["DiscoveryStage"] is gradskip_lightning.DiscoveryStage
