"""The rooms of `pipelines/` (docs/ARCHITECTURE.md): each imports only the rooms below it, no module
imports itself back through others, and no module's name shadows the standard library's."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

from pipelines.message import Message
from pipelines.records import STORED_WATERMARK, WATERMARK_STATE

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipelines"
# bottom first: a module may import its own room and the rooms before it (docs/ARCHITECTURE.md)
LAYERS = (
    ("pipelines.faults", "pipelines.config", "pipelines.message", "pipelines.records", "pipelines.columns",
     "pipelines.events", "pipelines.view"),
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


# a message's and a watermark's columns, as SQL names them (view and stream_id aside: every engine table's key)
RECORD_COLUMNS = {"message": set(Message._fields),
                  "watermark": {*WATERMARK_STATE, *STORED_WATERMARK.values(), "prev_last_seq"}}
_SQL = re.compile(r"\b(SELECT|INSERT|CREATE|FROM)\b")
_NAME = re.compile(r'(?:[\w{}]+\.)?"?([A-Za-z_]\w*)"?')


def hand_listed_columns(source: str) -> list[str]:
    """The SQL string literals of `source` that list three or more of one record's columns in a row: a list
    item names a column by its first word (`seq BIGINT NOT NULL`) or its last (`SELECT o.seq`, `x AS seq`)."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.STRING or not _SQL.search(token.string):
            continue
        items = [[m.group(1) for m in _NAME.finditer(item)] for item in token.string.split(",")]
        for record, columns in RECORD_COLUMNS.items():
            streak = []
            for item, names in zip(token.string.split(","), items):
                # a column, typed or aliased; not a clause that ends in one, nor a function of one
                short = 0 < len(names) <= 4 and not re.search(r"\w\(", item)
                streak = streak + [item.strip()] if short and {names[0], names[-1]} & columns else []
                if len(streak) == 3:
                    found.append(f"{record}: {', '.join(streak)}")
    return found


def test_no_sql_in_pipelines_lists_a_message_or_a_watermark_by_hand():
    """Their columns come from their declarations (pipelines/records.py: `select`, `ddl_columns`)."""
    listed = {path.relative_to(ROOT).as_posix(): hand_listed_columns(path.read_text())
              for path in PACKAGE.rglob("*.py")}
    assert {path: runs for path, runs in listed.items() if runs} == {}


def test_a_hand_listed_column_run_is_found():
    source = ('sql = f"SELECT {p}.view, {p}.seq, {p}.batch_id, {p}.payload FROM t"\n'
              'ddl = """CREATE TABLE w (view VARCHAR, last_seq BIGINT, blocked_at BIGINT,\n parked BOOLEAN)"""\n'
              'insert = \'INSERT INTO w (view, "last_seq", parked) SELECT o.seq, o.line, x AS event_id\'\n'
              'python = (state.last_seq, state.parked, state.attempts)\n'
              'doc = "the seq, line, payload"\n')
    assert hand_listed_columns(source) == [
        "message: {p}.seq, {p}.batch_id, {p}.payload FROM t\"", "watermark: last_seq BIGINT, blocked_at BIGINT, "
        "parked BOOLEAN)\"\"\"", "message: parked) SELECT o.seq, o.line, x AS event_id'"]


def test_the_archive_holds_every_field_of_a_message_and_its_stream_id():
    from pipelines.engine.normalise import MESSAGE_SCHEMA

    assert sorted(MESSAGE_SCHEMA.names) == sorted([*Message._fields, "stream_id"])


def test_the_log_tables_hold_the_records_the_pass_writes_in_their_types():
    """inorder.errors and inorder.gaps are declared for the store and the Dagster assets (LogColumn, with what
    each column holds); the pass's error and gap records carry the same columns in the same types."""
    from pipelines.engine.commit import LOGGED_MESSAGE
    from pipelines.engine.pass_data import ERROR_DETAILS, GAP_FIELDS, ErrorRecord, GapRecord
    from pipelines.records import ddl_columns
    from pipelines.store.layout import ERRORS_COLUMNS, GAPS_COLUMNS

    gap = [f for f in GAP_FIELDS if f != "waited_us"] + ["batch_id"]  # waited_us is stored as waited_seconds
    written = {*ddl_columns(ErrorRecord, ERROR_DETAILS, {}), *ddl_columns(GapRecord, gap, {}),
               *ddl_columns(Message, LOGGED_MESSAGE, {})}
    assert written - {f"{c.name} {c.sql_type}" for c in ERRORS_COLUMNS + GAPS_COLUMNS} == set()
