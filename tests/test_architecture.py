"""The import rules of docs/architecture.md, read from the source (ast; nothing is imported).

Layers, lowest first: ``stats`` <- ``envs``, ``tasks``, ``lm`` <- ``report`` <- ``train`` <- ``integrations``,
``experiments`` <- ``cli``; ``runs`` (run folders), ``runlock`` (their manifest and lock), ``fileio`` (atomic
writes), ``errors`` (the user errors) and ``console`` (log records above progress bars) are shared by all and
import nothing of ugrpo but each other. A package may import its own modules and any lower layer, never a higher
one nor a sibling of its own layer (one exception: ``lm`` uses ``tasks``, the tiny model warms up on arithmetic).
No import cycle between modules, and no PEP 562 module ``__getattr__`` hiding one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "ugrpo"

LAYER = {"stats": 0, "envs": 1, "tasks": 1, "lm": 1, "report": 2, "train": 3, "integrations": 4, "experiments": 4,
         "cli": 5}
"""rank of each package; the ``SHARED`` modules and the top-level ``ugrpo`` module are below them all"""
SHARED = {"runs", "runlock", "fileio", "errors", "console", ""}
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



def _terms(node: ast.AST) -> list[ast.AST]:
    """The additive terms of an expression (+, - and unary minus flattened)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _terms(node.left) + _terms(node.right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _terms(node.operand)
    return [node]


def _factors(node: ast.AST) -> tuple[list[ast.AST], list[ast.AST]]:
    """(numerator, denominator) factors of a product or quotient."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
        (n1, d1), (n2, d2) = _factors(node.left), _factors(node.right)
        return (n1 + n2, d1 + d2) if isinstance(node.op, ast.Mult) else (n1 + d2, d1 + n2)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _factors(node.operand)
    return [node], []


def _minus_one(node: ast.AST) -> str | None:
    """ast.dump of X when the node is ``X - 1``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and isinstance(node.right, ast.Constant) \
            and node.right.value == 1:
        return ast.dump(node.left)
    return None


def spells_prompt_error(node: ast.AST) -> bool:
    """Whether a sum spells the per-prompt error f(G) = c2/G + c3/(G(G-1)) (docs/math.md M9, M33) or the Theorem 7
    bound expanded from it: a term over G and a term over G(G-1), or a term times G and a term over (G - 1),
    for one and the same G (a name, attribute or subscript)."""
    terms = _terms(node)
    if len(terms) < 2:
        return False
    over, over_pair, times, over_g1 = set(), set(), set(), set()
    for t in terms:
        num, den = _factors(t)
        dumps = {ast.dump(f) for f in den}
        g1 = {_minus_one(f) for f in den} - {None}
        if g1:
            over_g1 |= g1
            over_pair |= g1 & dumps
        else:
            over |= dumps
        times |= {ast.dump(f) for f in num}
    return bool(over & over_pair or times & over_g1)


def prompt_error_spellings(tree: ast.AST, module: str) -> list[str]:
    """``module.function:line`` of every sub-expression of ``tree`` that :func:`spells_prompt_error`."""
    out: list[str] = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            where = f"{where}.{getattr(node, 'name', '<lambda>')}"
        if isinstance(node, (ast.BinOp, ast.UnaryOp)) and spells_prompt_error(node):
            out.append(f"{where}:{node.lineno}")
            return
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, module)
    return out


def test_the_per_prompt_error_is_defined_once():
    """f(G) = c2/G + c3/(G(G-1)) is written in stats/exact_mse.prompt_error only; every other module calls it (or
    ``uniform_mse``, the bound built from it)."""
    found = [f for name, path in _modules().items()
             for f in prompt_error_spellings(ast.parse(path.read_text(), str(path)), name)]
    assert [f.rpartition(":")[0] for f in found] == ["ugrpo.stats.exact_mse.prompt_error"], (
        f"the per-prompt error is spelled out in {found}; call ugrpo.stats.exact_mse.prompt_error or uniform_mse")


@pytest.mark.parametrize("src, expect", [
    ("c2 / G + c3 / (G * (G - 1))", True),
    ("(c1 + c2 / G + c3 / (G * (G - 1))) * G / N", True),
    ("c1 * G / N + c2 / N + c3 / (N * (G - 1))", True),                         # the bound, expanded
    ("(c[:, :1] * g + c[:, 1:2] + c[:, 2:3] / (g - 1)) / N", True),
    ("mses = [x.c2[:, None] / sizes + x.c3[:, None] / (sizes * (sizes - 1)) for x in xs]", True),
    ("-(c3 / (B * G * (G - 1))) + c2 / (B * G)", True),
    ("t0 = (zw * zw).sum(-1) / (g * (g - 1))", False),                          # T0 (M14): a pair count, not f
    ("oracle / g - true_grad", False),
    ("c2 / G + c3 / (H * (H - 1))", False),                                     # two different group sizes
    ("(rewards - rewards.mean()) * (G / (G - 1))", False),                      # the LOO factor (M2)
    ("((G - 1) / G) ** 2 * grpo + g2 / G**2", False),                           # grpo_mean's MSE from grpo's
])
def test_the_prompt_error_checker(src, expect):
    assert bool(prompt_error_spellings(ast.parse(src), "m")) is expect
