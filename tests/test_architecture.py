"""The architecture, checked: no import cycle of any kind in ``engine_mlx`` or ``app`` (imports
inside functions and ``if TYPE_CHECKING:`` ones count: either still ties two modules together,
neither can be read, tested or moved without the other), no module over 500 lines, and no
function of the decode loop over 80 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine_mlx", "app")
SCRIPTS = ROOT / "engine_mlx" / "bench" / "runners"  # run in other venvs, never imported


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if SCRIPTS in path.parents:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module name an import statement in ``tree`` may load or name."""
    names: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        stack.extend(ast.iter_child_nodes(node))
    return names


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = set()
        for imported in _imports(tree, name, path.name == "__init__.py"):
            if imported in modules and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_the_packages():
    graph = import_graph()
    assert "engine_mlx.session" in graph["engine_mlx.cli"] or any(
        "engine_mlx.session" in targets for targets in graph.values()
    )
    assert "engine_mlx.modes" in graph["engine_mlx.config"]
    assert "app.engine_worker" in graph["app.main_window"]


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


MAX_MODULE_LINES = 500
DECODE_LOOP = ("engine_mlx.generation", "engine_mlx.decoding.strategies", "engine_mlx.session")
MAX_FUNCTION_LINES = 80


def test_no_module_is_over_500_lines():
    lengths = {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, path in _modules().items()
    }
    assert {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES} == {}


def test_no_function_of_the_decode_loop_is_over_80_lines():
    modules = _modules()
    long = []
    for name in DECODE_LOOP:
        tree = ast.parse(modules[name].read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert long == []
