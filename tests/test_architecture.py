"""The house's rules, read from the source (docs/architecture.md): layers import downward only,
no import circle, no private name taken from another module, small files, classes and
functions, a small public face, and no process state in the tuner outside the serving object."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "autotune"

#: Each layer may import the ones after it, never those before it (the package's own
#: ``__init__`` holds only the version and sits below everything).
LAYERS = (
    ("autotune.cli", "autotune.pytest_plugin", "autotune.__main__"),
    ("autotune.integrations",),
    ("autotune.tune",),
    ("autotune.parallel",),
    ("autotune.accel",),
)
MAX_FILE_LINES = 700
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 80
MAX_PUBLIC_NAMES = 40
#: Module-level objects in autotune.tune that hold state on purpose: the holder of the process's
#: serving object. (Constants and registries of plug-ins are UPPER_CASE; context variables are
#: scoped settings.)
STATE_ALLOWED = {("autotune.tune.serving", "_process"), ("autotune.tune.serving", "_swap")}
MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "deque", "OrderedDict", "Lock", "RLock",
                 "Event", "Condition", "Semaphore", "Thread", "ThreadPoolExecutor"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _imports(name: str) -> list[tuple[str, str]]:
    """(module imported, name taken from it or '') for every import in ``name``, wherever it
    is written (late imports and TYPE_CHECKING blocks too)."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(TREES[name]):
        if isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.append((submodule, "") if submodule in MODULES else (target, alias.name))
    return [(target, taken) for target, taken in found if target.split(".")[0] == "autotune"]


def _layer(module: str) -> int | None:
    for index, layer in enumerate(LAYERS):
        if any(module == top or module.startswith(top + ".") for top in layer):
            return index
    return None


def test_layers_import_downward_only():
    upward = []
    for name in MODULES:
        mine = _layer(name)
        for target, _ in _imports(name):
            theirs = _layer(target)
            if mine is not None and theirs is not None and theirs < mine:
                upward.append(f"{name} imports {target}")
    assert not upward, "\n".join(upward)


def test_no_import_circle():
    """No circle of imports, wherever they are written: at module level, late (inside
    functions) or for annotations only (``if TYPE_CHECKING:``)."""
    graph = {name: {t for t, _ in _imports(name) if t in MODULES and t != name}
             for name in MODULES}
    circles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start and len(path) > 1:
                    circle = sorted(path)
                    if circle not in circles:
                        circles.append(circle)
                elif nxt not in seen and nxt not in path:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    assert not circles, "\n".join(" <-> ".join(c) for c in circles)


def test_no_private_name_is_imported_from_another_module():
    taken = [f"{name} takes {target}.{what}" for name in MODULES for target, what in _imports(name)
             if what.startswith("_") and not what.startswith("__")]
    assert not taken, "\n".join(taken)


def test_files_classes_and_functions_are_small():
    too_long = []
    for name, tree in TREES.items():
        lines = len(MODULES[name].read_text().splitlines())
        if lines > MAX_FILE_LINES:
            too_long.append(f"{name}: {lines} lines")
        for node in ast.walk(tree):
            limit = (MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
            if limit is not None and node.end_lineno - node.lineno + 1 > limit:
                too_long.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not too_long, "\n".join(too_long)


def test_the_tuners_public_face_is_small_and_every_name_resolves():
    tune = importlib.import_module("autotune.tune")
    assert len(tune.__all__) <= MAX_PUBLIC_NAMES, sorted(tune.__all__)
    assert len(set(tune.__all__)) == len(tune.__all__)
    missing = [n for n in tune.__all__ if not hasattr(tune, n)]
    assert missing == []


def _mutable(value: ast.expr) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return called in MUTABLE_CALLS
    return False


def test_the_tuner_keeps_no_process_state_outside_the_serving_object():
    state = []
    for name, tree in TREES.items():
        if not name.startswith("autotune.tune"):
            continue
        for node in tree.body:
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, ast.AnnAssign) and node.value else [])
            for target in targets:
                if not isinstance(target, ast.Name) or target.id == "__all__":
                    continue
                if target.id.isupper() or (name, target.id) in STATE_ALLOWED:
                    continue
                if _mutable(node.value):
                    state.append(f"{name}.{target.id}")
        state += [f"{name}: global {', '.join(node.names)}" for node in ast.walk(tree)
                  if isinstance(node, ast.Global)]
    assert not state, "\n".join(state)


@pytest.mark.parametrize("rule", [test_no_import_circle, test_no_private_name_is_imported_from_another_module])
def test_the_rules_see_what_they_forbid(rule, monkeypatch):
    """Each rule fails on a module that breaks it (a rule that cannot fail proves nothing)."""
    fake = "autotune.tune.zz_broken"
    source = ("from .decorator import _Hidden\nfrom . import zz_broken\n"
              if rule is test_no_private_name_is_imported_from_another_module
              else "from . import zz_other\n")
    monkeypatch.setitem(MODULES, fake, PACKAGE / "tune" / "zz_broken.py")
    monkeypatch.setitem(TREES, fake, ast.parse(source))
    if rule is test_no_import_circle:
        other = "autotune.tune.zz_other"
        monkeypatch.setitem(MODULES, other, PACKAGE / "tune" / "zz_other.py")
        monkeypatch.setitem(TREES, other, ast.parse("from . import zz_broken\n"))
    with pytest.raises(AssertionError):
        rule()
