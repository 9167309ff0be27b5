"""The rooms of `pipelines/` (docs/ARCHITECTURE.md): each imports only the rooms below it, no module
imports itself back through others, and no module's name shadows the standard library's."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipelines"
# bottom first: a module may import its own room and the rooms before it (docs/ARCHITECTURE.md)
LAYERS = (
    ("pipelines.faults", "pipelines.config", "pipelines.message", "pipelines.columns", "pipelines.events", "pipelines.view"),
    ("pipelines.store",),
    ("pipelines.registry",),
    ("pipelines.spark",),
    ("pipelines.engine",),
    ("pipelines.serve",),
    ("pipelines.observe",),
    ("pipelines.scenario", "pipelines.testing", "pipelines.facade"),
)


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The pipelines modules `path` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pipelines":
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "pipelines"}
    return found


def layer(module: str) -> int:
    for i, rooms in enumerate(LAYERS):
        if any(module == room or module.startswith(room + ".") for room in rooms):
            return i
    raise AssertionError(f"{module} is in no room of LAYERS: place it in docs/ARCHITECTURE.md and here")


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path, known) - {name} for name, path in known.items() if name != "pipelines"}


def test_every_module_imports_only_its_room_and_the_rooms_below():
    upward = [f"{m} imports {d}" for m, deps in graph().items() for d in deps
              if d != "pipelines" and layer(d) > layer(m)]
    assert upward == []


def test_no_import_cycle():
    edges, state, cycles = graph(), {}, []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for dep in sorted(edges.get(module, ())):
            if state.get(dep) == "open":
                cycles.append(" -> ".join(path[path.index(dep):] + [dep]) if dep in path else f"{module} -> {dep}")
            elif dep not in state:
                visit(dep, path + [dep])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_no_module_shadows_the_standard_library():
    assert sorted(p.stem for p in PACKAGE.rglob("*.py") if p.stem in sys.stdlib_module_names) == []


# docs/ARCHITECTURE.md, "Long functions", says why each of these is longer
LONG_FUNCTIONS_ALLOWED = {("bench/report.py", "table_rows")}
MAX_FUNCTION_LINES = 60


def test_no_function_outside_the_tests_is_over_60_lines():
    long = set()
    for folder in ("pipelines", "assets", "resources", "inorder", "views", "shop", "demos", "bench", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                    long.add((path.relative_to(ROOT).as_posix(), node.name))
    assert long == LONG_FUNCTIONS_ALLOWED


# the walk runs in Spark's Python workers: neither the store nor DuckDB is there to import
WALK = ("pipelines.engine.order", "pipelines.engine.apply", "pipelines.engine.rules", "pipelines.engine.executor")


def _top_level_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_walk_imports_neither_the_store_nor_duckdb():
    known, edges, reached = modules(), graph(), set()
    todo = list(WALK)
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(d for d in edges.get(module, ()) if d in known)
    assert sorted(m for m in reached if m.startswith("pipelines.store")) == []
    assert sorted(m for m in reached if "duckdb" in _top_level_imports(known[m])) == []
