"""The import rules of docs/architecture.md, read from the source (ast; nothing is imported).

Layers, lowest first: ``stats`` <- ``envs``, ``tasks``, ``lm`` <- ``report`` <- ``train`` <- ``integrations``,
``experiments`` <- ``cli``; ``runs`` (run folders), ``runlock`` (their manifest and lock), ``fileio`` (atomic
writes) and ``errors`` (the user errors) are shared by all and import nothing of ugrpo but each other. A package
may import its own modules and any lower layer, never a higher one nor a sibling of its own layer (one
exception: ``lm`` uses ``tasks``, the tiny model warms up on arithmetic). No import cycle between modules, and
no PEP 562 module ``__getattr__`` hiding one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "ugrpo"

LAYER = {"stats": 0, "envs": 1, "tasks": 1, "lm": 1, "report": 2, "train": 3, "integrations": 4, "experiments": 4,
         "cli": 5}
"""rank of each package; the ``SHARED`` modules and the top-level ``ugrpo`` module are below them all"""
SHARED = {"runs", "runlock", "fileio", "errors", ""}
"""top-level modules every layer may import; they import only each other"""
SIBLINGS = {("lm", "tasks")}
"""imports allowed within one layer"""
LAZY_OPTIONAL = {"ugrpo.integrations": "TRL is an optional dependency, imported only when its adapter is used"}
"""modules allowed a PEP 562 ``__getattr__``: lazy imports of optional third-party packages, never of ugrpo"""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def import_graph() -> dict[str, set[str]]:
    """module -> the ugrpo modules it imports (at any depth: top level, inside functions, under TYPE_CHECKING)."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.split(".")[0] == "ugrpo"}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                if base.split(".")[0] != "ugrpo":
                    continue
                for a in node.names:  # ``from ugrpo.x import module`` imports that module
                    targets.add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base)
        graph[name] = {t for t in targets if t != name and t in mods}
    return graph


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that points up the layer order or sideways within a layer."""
    bad = []
    for src, targets in sorted(graph.items()):
        a = _package(src)
        for dst in sorted(targets):
            b = _package(dst)
            if a == b or b in SHARED:
                continue
            if a in SHARED:
                bad.append(f"{src} -> {dst} (a shared module imports only the other shared modules)")
            elif LAYER[b] > LAYER[a] or (LAYER[b] == LAYER[a] and (a, b) not in SIBLINGS):
                bad.append(f"{src} -> {dst} ({a} is layer {LAYER[a]}, {b} is layer {LAYER[b]})")
    return bad


def test_every_package_has_a_layer():
    packages = {_package(m) for m in _modules()} - SHARED
    assert packages <= set(LAYER), f"add {sorted(packages - set(LAYER))} to LAYER here and in docs/architecture.md"


def test_imports_follow_the_layer_order():
    bad = layer_violations(import_graph())
    assert not bad, "imports against the layer order (docs/architecture.md):\n" + "\n".join(bad)


def test_no_import_cycle():
    cycles = _cycles(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_pep562_shims():
    shims = [name for name, path in _modules().items() if name not in LAZY_OPTIONAL
             and any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__"
                     for n in ast.parse(path.read_text()).body)]
    assert not shims, f"module-level __getattr__ (a hidden import) in {shims}: import directly instead"


def test_report_never_imports_experiments_and_commands_stay_thin():
    graph = import_graph()
    assert not [m for m in graph if _package(m) == "report" and any(_package(t) == "experiments" for t in graph[m])]
    assert not [m for m in _modules() if m.endswith("_cmd")], "commands live in ugrpo/cli/commands/"


@pytest.mark.parametrize("edges, expect", [
    ({"ugrpo.stats.a": {"ugrpo.train.b"}, "ugrpo.train.b": set()}, ["ugrpo.stats.a -> ugrpo.train.b"]),
    ({"ugrpo.envs.a": {"ugrpo.tasks.b"}, "ugrpo.tasks.b": set()}, ["ugrpo.envs.a -> ugrpo.tasks.b"]),
    ({"ugrpo.lm.a": {"ugrpo.tasks.b"}, "ugrpo.tasks.b": set()}, []),
    ({"ugrpo.runs": {"ugrpo.stats.b"}, "ugrpo.stats.b": set()}, ["ugrpo.runs -> ugrpo.stats.b"]),
])
def test_the_checker_catches_violations(edges, expect):
    assert [v.split(" (")[0] for v in layer_violations(edges)] == expect


def test_the_checker_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
