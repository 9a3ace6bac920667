"""The package's shape: no import cycle, no upward import between its rooms, each family in its own
folder known to the rest only through its package, no concrete explainer class tested outside its
own family, one name per registered choice, no deprecation shim."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import get_args

import gradskip_lightning

PACKAGE = Path(gradskip_lightning.__file__).parent

#: The rooms of the package, lowest first: a module imports only from its own room or lower layers.
LAYERS: list[set[str]] = [
    {"core", "docstrings"},
    {"render", "methods", "metrics"},
    {"shortcuts"},
    {"data", "families"},
    {"training"},
    {"engine"},
    {"callbacks", "hf_trainer"},
    {"console", "dashboard", "timeline", "key_table", "options_page", "__init__"},
]
FAMILIES_DIR = PACKAGE / "families"
LAYER = {room: level for level, rooms in enumerate(LAYERS) for room in rooms}
#: Each concrete explainer and explanation class, and the family folder it belongs to.
CONCRETE = {
    "TimmViTExplainer": "families/timm_vit/",
    "TorchvisionViTExplainer": "families/torchvision_vit/",
    "HFViTExplainer": "families/hf_vit/",
    "SwinExplainer": "families/swin/",
    "SegFormerExplainer": "families/segformer/",
    "SegmentationExplanation": "families/segformer/",
}


def _module(path: Path) -> str:
    parts = ("gradskip_lightning", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_room(name: str) -> bool:
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


def _imports(path: Path) -> list[str]:
    """The package modules (or names in them) that ``path`` imports anywhere: at module level, under
    ``TYPE_CHECKING`` or in a function, except in a module ``__getattr__`` (PEP 562: a deprecated
    name resolved on first access)."""
    tree = ast.parse(path.read_text())
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    shims = {
        id(n) for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "__getattr__" for n in ast.walk(f)
    }
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
        found += [name for name in names if name.startswith("gradskip_lightning")]
    return found


def _graph() -> dict[str, set[str]]:
    """Every module's imports, wherever they stand: a cycle through an import inside a function or
    under ``TYPE_CHECKING`` is still a base module that knows its specialisation."""
    return {_module(p): set(_imports(p)) for p in PACKAGE.rglob("*.py")}


def test_every_room_has_a_layer():
    rooms = {_room(_module(p)) for p in PACKAGE.rglob("*.py")}
    assert rooms <= set(LAYER), f"place the new rooms in LAYERS: {sorted(rooms - set(LAYER))}"


def test_no_upward_import():
    upward = [
        f"{_module(p)} imports {name}"
        for p in PACKAGE.rglob("*.py")
        for name in _imports(p)
        if _room(name) != _room(_module(p)) and LAYER[_room(name)] >= LAYER[_room(_module(p))]
    ]
    assert not upward, upward


def test_metrics_depend_on_tensors_only():
    models = [
        f"{_module(p)} imports {name}"
        for p in (PACKAGE / "metrics").rglob("*.py")
        for name in _imports(p)
        if _room(name) not in {"metrics", "core"}
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


def _family_of(module: str) -> str | None:
    """``"swin"`` for ``gradskip_lightning.families.swin.adapter``; None outside a family's folder."""
    parts = module.split(".")
    is_family = len(parts) > 2 and parts[1] == "families" and (FAMILIES_DIR / parts[2]).is_dir()
    return parts[2] if is_family else None


def test_each_family_is_one_folder_under_families():
    from gradskip_lightning.families import FAMILIES

    folders = {p.name for p in FAMILIES_DIR.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    homes = {_family_of(family.explainer.__module__) for family in FAMILIES.values()}
    assert homes == folders, (homes, folders)


def test_a_family_imports_no_other_family_and_the_rest_only_its_package():
    """A family's modules import core, methods, the shared modules and their own folder; outside
    the families, code sees a family only through its package (``families.swin``), never a module in it."""
    crossing = []
    for path in PACKAGE.rglob("*.py"):
        module = _module(path)
        for name in _imports(path):
            target = _family_of(name)
            if target is None or target == _family_of(module):
                continue
            inside = len(name.split(".")) > 3  # families.<name>.<module>
            if _family_of(module) is not None or (inside and module != "gradskip_lightning.families"):
                crossing.append(f"{module} imports {name}")
    assert not crossing, crossing


def test_each_method_literal_names_its_registry():
    from gradskip_lightning.engine.settings import MethodName
    from gradskip_lightning.families import FAMILIES, all_methods

    for family in FAMILIES.values():
        assert get_args(family.method_names) == family.methods, family.name
    assert set(get_args(MethodName)) == set(all_methods())  # the callback's method choices


#: Lightning's training-loop modules: the engine runs under either door and imports none of them.
LIGHTNING_LOOP = ("lightning.pytorch.trainer", "lightning.pytorch.callbacks", "lightning.pytorch.loggers")


def _all_imports(path: Path) -> list[str]:
    """Every module ``path`` imports (absolute names, any package), anywhere in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return found


def test_the_engine_imports_no_lightning_trainer_callback_or_logger():
    found = [
        f"{_module(p)} imports {name}"
        for p in (PACKAGE / "engine").rglob("*.py")
        for name in _all_imports(p)
        if name.startswith(LIGHTNING_LOOP) or name in ("lightning.pytorch.Trainer", "lightning.pytorch.Callback")
    ]
    assert not found, found


def test_the_hf_trainer_door_holds_the_engine_not_the_lightning_door():
    found = [
        f"{_module(p)} imports {name}"
        for p in (PACKAGE / "hf_trainer").rglob("*.py")
        for name in _imports(p)
        if _room(name) == "callbacks"
    ]
    assert not found, found


def test_importing_the_package_loads_no_dataset_library():
    """A spurious tag is the shortcuts' own: ``import gradskip_lightning`` does not load medmnist."""
    code = "import sys, gradskip_lightning; print('medmnist' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stdout + done.stderr[-2000:]


def test_the_package_has_no_deprecation_shim():
    """Nothing has been released: a renamed option or module is renamed, with no deprecated spelling."""
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in PACKAGE.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "DeprecationWarning" in line or "rank_zero_deprecation" in line or "def __getattr__(name" in line
    ]
    assert not found, found
