"""The wheel: built from a copy of the checkout, it holds the whole package (every module and
subpackage of the source tree, ``py.typed``) and nothing else, its version is ``__version__``, and
torch and torchvision are not capped."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import gradskip_lightning

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(gradskip_lightning.__file__).parent
#: Left out of the copy the wheel is built from, at the checkout's top (runs, data, the site, old
#: builds whose build/lib could carry deleted modules into the wheel) and anywhere (caches).
TOP_IGNORED = {".git", "build", "dist", "site", "outputs", "wandb", "lightning_logs", "data"}
ANYWHERE_IGNORED = shutil.ignore_patterns(
    "*.egg-info", "__pycache__", ".pytest_cache", ".mypy_cache", "*.whl", "*.ckpt"
)


def ignored(folder: str, names: list[str]) -> set[str]:
    top = TOP_IGNORED.intersection(names) if Path(folder) == ROOT else set()
    return top | ANYWHERE_IGNORED(folder, names)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=ignored, symlinks=True)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp), "."]
    done = subprocess.run(command, cwd=source, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = tmp.glob("*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_holds_the_package_and_nothing_else(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    sources = {str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")}
    assert {n for n in names if n.endswith(".py")} == sources  # every module and subpackage, no other code
    assert "gradskip_lightning/py.typed" in names
    dist_info = f"gradskip_lightning-{gradskip_lightning.__version__}.dist-info"
    assert {n.split("/")[0] for n in names} == {"gradskip_lightning", dist_info}  # no tests/, no train.py


@pytest.mark.slow
def test_the_wheel_version_is_the_package_version_and_torch_is_not_capped(wheel):
    name, version, *_ = wheel.name.split("-")
    assert (name, version) == ("gradskip_lightning", gradskip_lightning.__version__)
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"gradskip_lightning-{version}.dist-info/METADATA").decode()
    assert f"\nVersion: {gradskip_lightning.__version__}\n" in metadata
    requires = [line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist: ")]
    assert any(r.startswith("ruff") and 'extra == "docs"' in r for r in requires)  # the API's signatures formatted
    for capped in ("torch", "torchvision"):
        (spec,) = [r for r in requires if r.split(">")[0].split("<")[0].split("=")[0].strip() == capped]
        assert "<" not in spec, spec
