"""The package's shape: no import cycle, no upward import between its rooms, no concrete explainer
class tested outside its own family, one name per registered choice."""

from __future__ import annotations

import ast
import warnings
from collections import defaultdict
from pathlib import Path
from typing import get_args

import pytest

import gradskip_lightning

PACKAGE = Path(gradskip_lightning.__file__).parent

#: The rooms of the package, lowest first: a module imports only from its own room or lower layers.
LAYERS: list[set[str]] = [
    {"registry", "validation"},
    {"explanation", "render", "data", "adapters"},
    {"methods", "metrics", "model", "families"},
    {"explainer", "segmentation"},
    {"hf_vit", "swin"},
    {"callback"},
    {"console", "dashboard", "timeline", "__init__"},
    {"benchmarks"},
]
LAYER = {room: level for level, rooms in enumerate(LAYERS) for room in rooms}
#: Explainer and explanation classes, and the files of the family they belong to.
CONCRETE = {
    "Explainer": "explainer.py",
    "SegmentationExplainer": "segmentation/",
    "SegmentationExplanation": "segmentation/",
    "HFViTExplainer": "hf_vit.py",
    "SwinExplainer": "swin/",
}


def _module(path: Path) -> str:
    parts = ("gradskip_lightning", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_room(name: str) -> bool:
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(imported package module, at module level) for every import in ``path``, except those in a
    module ``__getattr__`` (PEP 562: a deprecated name resolved on first access)."""
    tree = ast.parse(path.read_text())
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    shims = {
        id(n) for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "__getattr__" for n in ast.walk(f)
    }
    top = {id(n) for n in tree.body}
    found = []
    for node in ast.walk(tree):
        if id(node) in shims:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            names = [
                f"{base}.{a.name}" if base == "gradskip_lightning" and _is_room(a.name) else base for a in node.names
            ]
        else:
            continue
        found += [(name, id(node) in top) for name in names if name.startswith("gradskip_lightning")]
    return found


def _graph() -> dict[str, set[str]]:
    return {_module(p): {name for name, at_top in _imports(p) if at_top} for p in PACKAGE.rglob("*.py")}


def test_every_room_has_a_layer():
    rooms = {_room(_module(p)) for p in PACKAGE.rglob("*.py")}
    assert rooms <= set(LAYER), f"place the new rooms in LAYERS: {sorted(rooms - set(LAYER))}"


def test_no_upward_import():
    upward = [
        f"{_module(p)} imports {name}"
        for p in PACKAGE.rglob("*.py")
        for name, _ in _imports(p)
        if _room(name) != _room(_module(p)) and LAYER[_room(name)] >= LAYER[_room(_module(p))]
    ]
    assert not upward, upward


def test_metrics_depend_on_tensors_only():
    models = [
        f"{_module(p)} imports {name}"
        for p in (PACKAGE / "metrics").rglob("*.py")
        for name, _ in _imports(p)
        if _room(name) not in {"metrics", "validation", "registry", "explanation"}  # explanation: the protocol
    ]
    assert not models, models


def test_no_import_cycle():
    graph = _graph()
    known = set(graph)

    def target(name: str) -> str | None:  # "pkg.mod.Name" -> the module it names
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    edges = {m: {t for n in names if (t := target(n)) and t != m} for m, names in graph.items()}
    state: dict[str, int] = defaultdict(int)  # 0 new, 1 on the stack, 2 done
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in edges.get(node, ()):
            if state[nxt] == 1 and not nxt.startswith(f"{node}.") and not node.startswith(f"{nxt}."):
                cycles.append([*stack[stack.index(nxt) :], nxt] if nxt in stack else [node, nxt])
            elif state[nxt] == 0:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(edges):
        if state[node] == 0:
            visit(node, [node])
    assert not cycles, cycles


def test_no_concrete_explainer_class_is_tested_outside_its_family():
    found = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "issubclass"):
                classes = ast.unparse(node.args[1])
                for name, home in CONCRETE.items():
                    if name in classes.replace("(", " ").replace(",", " ").split() and not relative.startswith(home):
                        found.append(f"{relative}: {ast.unparse(node)}")
    assert not found, found


def test_each_method_literal_names_its_registry():
    from gradskip_lightning.methods import METHOD_SPECS, MethodName
    from gradskip_lightning.segmentation import SEGMENTATION_METHODS, SegmentationMethod
    from gradskip_lightning.swin import SWIN_METHODS, SwinMethod

    assert get_args(MethodName) == METHOD_SPECS.names
    assert get_args(SegmentationMethod) == SEGMENTATION_METHODS.names
    assert get_args(SwinMethod) == SWIN_METHODS.names


def test_families_are_registered_with_their_explainers_methods():
    from gradskip_lightning.explainer import Explainer
    from gradskip_lightning.families import FAMILIES, all_methods
    from gradskip_lightning.segmentation import SegmentationExplainer

    assert FAMILIES.names == ("timm_vit", "segformer", "hf_vit", "timm_swin")
    assert FAMILIES["segformer"].methods == SegmentationExplainer.methods
    assert all_methods() == Explainer.methods  # the ViT family has every SegFormer method too


@pytest.mark.parametrize(
    "module, name",
    [
        ("gradskip_lightning.methods", "weighted_attention"),
        ("gradskip_lightning.methods", "rollout"),
        ("gradskip_lightning.methods", "chefer"),
    ],
)
def test_removed_names_still_work_with_a_deprecation_warning(module, name):
    import importlib

    with pytest.warns(DeprecationWarning, match=name):
        function = getattr(importlib.import_module(module), name)
    assert callable(function)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError):
            getattr(importlib.import_module(module), "no_such_name")
