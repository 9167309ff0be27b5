"""A view's version (CONCEPTS §5): the fingerprint of its code, the one the store recorded as having
built its rows, and what a run does when they differ.

The fingerprint covers what decides a view's rows: its table declarations (names, columns, types,
keys, kinds), its subscriptions and policies, the source of its handlers, their event classes and its
predicate, the source of the modules that define them and of the modules of their own package that
those import (a rule in a helper module changes the rows too), and the author's `version`. Expectations,
alerts, owners and tags declared in the view do not change a row, but they are part of its module's
source: editing the module counts as a change of code.

`inorder.view_versions` holds one row per view: `fingerprint` built its rows (from the start, or from
its last rebuild or migration); when a changed handler projects batches on top of them (the view's
`on_change="mark"`), `newer_fingerprint` and `newer_since_batch` say which code and from which batch.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import inspect
import json
import sysconfig
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal, NamedTuple, Sequence

import duckdb

from pipelines.events import TypedHandler
from pipelines.store.layout import LIVE, STATE_TABLES, Layout, drop_primary_key, table_columns, transaction
from pipelines.view import Table, View, check_identifier

Change = Literal["new", "same", "code", "tables", "migration"]


def table_declarations(tables: Sequence[Table]) -> list[dict]:
    return [{"name": t.name, "kind": t.kind, "columns": [[c, ty] for c, ty in t.sql_types.items()],
             "primary_key": list(t.primary_key), "stream_key": t.stream_key} for t in tables]


def _source(fn: Callable | None) -> str:
    """A function's (or class's) source text; for what has none (a builtin, a partial), what identifies it."""
    if fn is None:
        return ""
    if isinstance(fn, functools.partial):
        return f"{_source(fn.func)}({fn.args!r}, {fn.keywords!r})"
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        return repr((code.co_code, code.co_consts)) if code else getattr(fn, "__qualname__", repr(type(fn)))


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _handler_source(handler: Callable) -> str:
    """A handler's source; a typed handler's is its function's and its event class's."""
    if isinstance(handler, TypedHandler):
        return _source(handler.function) + _source(handler.event_class)
    return _source(handler)


_ENGINE_PACKAGES = frozenset({"pipelines", "inorder"})  # an upgrade of inorder changes no view's logic


def _defining_modules(view: View) -> set[str]:
    """The modules that define the view's handlers, their event classes and its predicate."""
    functions = [getattr(h, "function", h) for h in view.handlers.values()]
    classes = [h.event_class for h in view.handlers.values() if isinstance(h, TypedHandler)]
    named = [getattr(f, "func", f) for f in (*functions, view.predicate) if f is not None]
    return {m for m in (getattr(x, "__module__", None) for x in (*named, *classes)) if isinstance(m, str)}


def own_modules(view: View) -> dict[str, str]:
    """The source of each module that decides the view's rows, by name: those that define its handlers, event
    classes and predicate, and the modules of the author's own code that they import, transitively (a helper in
    `shop/views/fields.py` counts for `shop.views.orders`, `carrier_rules.py` for a `carrier_views.py` beside
    it). The author's own code is what lies under the folder on the path that holds a defining module, but
    installed packages and inorder. Found from the modules' import statements and files, not from what is
    loaded, so that every process finds the same set whatever it imported before."""
    defining = sorted(_defining_modules(view))
    roots = {root for root in map(_root, defining) if root is not None}
    found: dict[str, str] = {}
    queue = list(defining)
    while queue:
        name = queue.pop()
        if name in found or name.split(".")[0] in _ENGINE_PACKAGES or not _is_own(name, roots):
            continue
        spec = _spec(name)
        source = _source_of(name, spec)
        if source is not None:
            found[name] = source
            package = name if spec is not None and spec.submodule_search_locations is not None \
                else name.rpartition(".")[0]
            queue += _imported_names(source, package)
    return dict(sorted(found.items()))


_INSTALLED = tuple(dict.fromkeys(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")))


def _spec(name: str) -> Any:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):  # a name that is no module (`from pkg import a_function`)
        return None


def _root(name: str) -> Path | None:
    """The folder on the path that holds module `name` (a.b.c in root/a/b/c.py)."""
    spec = _spec(name)
    if spec is None or not spec.has_location or not spec.origin:
        return None
    depth = name.count(".") + (1 if spec.submodule_search_locations is not None else 0)
    return Path(spec.origin).resolve().parents[depth]


def _is_own(name: str, roots: set[Path]) -> bool:
    """Is module `name` the author's code: under one of `roots`, and not installed? Decided from its top-level
    package first, which finds a file without importing anything."""
    top = _spec(name.split(".")[0])
    if top is None or not top.has_location or not top.origin:  # built in, frozen, or made in memory
        return False
    origin = str(Path(top.origin).resolve())
    return not origin.startswith(_INSTALLED) and any(root in Path(origin).parents for root in roots)


def _source_of(name: str, spec: Any) -> str | None:
    """A module's source text; its name when it has none (a folder without `__init__.py`, a compiled module); None
    when it is no module (a function `from pkg import f` named)."""
    if spec is None:
        return None
    if spec.origin is None:  # a folder without __init__.py: its loader, set only once imported, would give ''
        return name
    # the loader reads a source as Python does: its coding line, a BOM, a module in a zip
    get_source = getattr(spec.loader, "get_source", None)
    try:
        source = get_source(name) if get_source is not None else None
    except (ImportError, OSError):
        source = None
    return name if source is None else source


@functools.lru_cache(maxsize=512)  # a store's every open compares each view: parse each source text once
def _imported_names(source: str, package: str) -> tuple[str, ...]:
    """What `source` imports (`import a.b`, `from a import b`, `from .b import c`): modules, or names in them,
    which `_source_of` tells apart."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level \
                else node.module or ""
            found += [base, *(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")]
    return tuple(n for n in found if n)


def code_parts(view: View) -> dict[str, str]:
    """What of the view's code decides its rows, part by part (each a digest), so a change can be named:
    its subscriptions, policies, predicate, handlers, `version`, and the source of its own modules. As the
    registry loaded it (`View.loaded_code`), for a view it loaded."""
    if view.loaded_code is not None:
        return dict(view.loaded_code)
    parts = {"subscribes": _digest(list(view.subscribes)),
             "policies": _digest([view.gap_timeout, view.max_pending, view.on_error, view.on_bug]),
             "predicate": _digest(_source(view.predicate)),
             "version": _digest(view.version)}
    parts.update({f"handler {event_type}": _digest(_handler_source(handler))
                  for event_type, handler in sorted(view.handlers.items())})
    parts.update({f"module {name}": _digest(source) for name, source in own_modules(view).items()})
    return parts


def fingerprint(view: View) -> str:
    """16 hex digits that change whenever the view's tables, subscriptions, policies, handlers or
    `version` change (the view's Dagster `code_version`)."""
    return _digest({"tables": table_declarations(view.tables), "code": code_parts(view)})


@dataclass(frozen=True)
class ViewVersion:
    """A view's code against the store's record of what built its rows."""

    view: str
    code: str  # the fingerprint of the code loaded now
    stored: str | None  # the fingerprint that built the rows (None: nothing recorded yet)
    change: Change
    what: str  # what changed, in words ("" when nothing did)
    newer: str | None = None  # the code that projected batches on top of `stored` rows
    since_batch: str | None = None  # ... from this batch on
    since_entry: int | None = None
    on_change: str = "mark"
    # a refused change that is only nullable columns added: the add_column migrations that would fit it
    could_migrate: tuple[tuple[str, str], ...] = ()

    @property
    def matches(self) -> bool:
        """The rows were built by exactly this code."""
        return self.change in ("new", "same") and self.newer is None

    @property
    def refused(self) -> bool:
        """The stored tables are not the declared ones: projecting would mix two shapes."""
        return self.change == "tables"

    @property
    def rebuild_due(self) -> bool:
        """The view asks to be rebuilt when its code changed (on_change="rebuild")."""
        return self.on_change == "rebuild" and not self.matches

    def refusal(self) -> str:
        migrations = ", ".join(f'add_column("{table}", "{column}")' for table, column in self.could_migrate)
        return (f"view {self.view}: {self.what}; its rows were built with the old tables, so it is not projected "
                f"(run `inorder rebuild {self.view}`" + (
                    f"; or, if the rows already stored are right with NULL there, declare "
                    f"`migrations=({migrations},)` on the view and run again: no rebuild" if migrations else "")
                + ")")

    def describe(self) -> str:
        """One line for `inorder status` and the UI."""
        if self.refused:
            return f"tables changed ({self.what}): refused until `inorder rebuild {self.view}`"
        if self.newer is not None:
            mixed = f"mixed code: rows before batch {self.since_batch} were built by older code ({self.stored})"
            if self.newer != self.code:
                return f"{mixed}, rows from it on by code {self.newer}, and the code changed again " \
                       f"({self.code}); `inorder rebuild {self.view}` rebuilds it"
            return f"{mixed}, rows from it on by this code ({self.what}); `inorder rebuild {self.view}` rebuilds it"
        if self.change == "code":
            return f"code changed ({self.what}): built by older code ({self.stored}); " \
                   f"the next run projects with this code, `inorder rebuild {self.view}` rebuilds it"
        if self.change == "migration":
            return f"migration due ({self.what}): applied by the next run"
        return "matches the store"


_DUCKDB_TYPES = {"TIMESTAMP WITH TIME ZONE": "TIMESTAMPTZ"}


def _physical(con: duckdb.DuckDBPyConnection, layout: Layout, tables: Sequence[Table]) -> list[dict] | None:
    """The declarations as the store has them (columns and types read from DuckDB), for a view that
    has tables but no record yet (a store made before versions were recorded); None when it has none."""
    found = []
    for t in tables:
        columns = table_columns(con, layout.tables, t.name).items()
        if columns:
            found.append({"name": t.name, "kind": t.kind, "columns": [[c, _DUCKDB_TYPES.get(ty, ty)]
                                                                       for c, ty in columns],
                          "primary_key": list(t.primary_key), "stream_key": t.stream_key})
    return found or None


def _differences(stored: list[dict], declared: list[dict]) -> tuple[list[str], list[tuple[str, str]]]:
    """(what differs, in words; the columns added to tables that are otherwise the same)."""
    words: list[str] = []
    added: list[tuple[str, str]] = []
    old = {t["name"]: t for t in stored}
    new = {t["name"]: t for t in declared}
    words += [f"table {name} added" for name in new if name not in old]
    words += [f"table {name} removed" for name in old if name not in new]
    for name in (n for n in new if n in old):
        a, b = old[name], new[name]
        a_cols, b_cols = dict(map(tuple, a["columns"])), dict(map(tuple, b["columns"]))
        for column, sql_type in b_cols.items():
            if column not in a_cols:
                words.append(f"table {name}: column {column} {sql_type} added")
                added.append((name, column))
            elif a_cols[column] != sql_type:
                words.append(f"table {name}: column {column} {a_cols[column]} -> {sql_type}")
        words += [f"table {name}: column {c} removed" for c in a_cols if c not in b_cols]
        for key in ("kind", "primary_key", "stream_key"):
            if a[key] != b[key]:
                words.append(f"table {name}: {key.replace('_', ' ')} {a[key]} -> {b[key]}")
    return words, added


def compare(view: View, row: tuple | None) -> ViewVersion:
    """`row`: (fingerprint, tables, code, newer_fingerprint, newer_since_entry, newer_since_batch) or None."""
    code = fingerprint(view)
    if row is None:
        return ViewVersion(view.name, code, None, "new", "", on_change=view.on_change)
    stored, tables, parts, newer, since_entry, since_batch = row
    extra = dict(newer=newer, since_batch=since_batch, since_entry=since_entry, on_change=view.on_change)
    words, added = _differences(json.loads(tables), table_declarations(view.tables))
    if words:
        migrated = {(m.table, m.column) for m in view.migrations}
        only_added = len(words) == len(added)
        keys = {(t.name, column) for t in view.tables for column in t.primary_key}
        could_migrate = tuple(a for a in added if a not in migrated) if only_added and not keys & set(added) else ()
        return ViewVersion(view.name, code, stored, "migration" if only_added and all(a in migrated for a in added)
                           else "tables", "; ".join(words), could_migrate=could_migrate, **extra)
    if code == stored:
        return ViewVersion(view.name, code, stored, "same", "", **extra)
    old_parts = json.loads(parts) if parts else {}
    parts = code_parts(view)
    changed = [name for name, digest in parts.items() if old_parts.get(name) != digest]
    changed += [f"{name} removed" for name in old_parts if name not in parts]
    return ViewVersion(view.name, code, stored, "code", ", ".join(changed) + " changed" if changed
                       else "code changed", **extra)


_ROW = "fingerprint, tables, code, newer_fingerprint, newer_since_entry, newer_since_batch"


class ViewSetMismatch(RuntimeError):
    """The loaded views (INORDER_VIEWS) are not views of this store: none of them is, some would be added to
    a store that holds others, or one declares a table another of the store's views owns. Refused before
    anything is written (the message is one line)."""


class StoredView(NamedTuple):
    """A view the store holds, as `view_versions` records it: the tables it owns (its recorded declarations:
    the one record of which view owns a table) and the INORDER_VIEWS module that loaded it (None in a store
    made before modules were recorded)."""

    tables: tuple[str, ...]
    module: str | None


def stored_views(con: duckdb.DuckDBPyConnection, layout: Layout = LIVE) -> dict[str, StoredView]:
    """The views the store holds, by name, in name order (none in a new store). Read before the engine's DDL
    runs, so a store made before a column was added is read without it."""
    columns = table_columns(con, layout.state, "view_versions")
    module = "module" if "module" in columns else "NULL"
    rows = con.execute(f"SELECT view, tables, {module} FROM {layout.state}.view_versions ORDER BY view"
                       ).fetchall() if columns else []
    return {view: StoredView(tuple(t["name"] for t in json.loads(tables)), module) for view, tables, module in rows}


def stored_view_names(con: duckdb.DuckDBPyConnection, layout: Layout = LIVE) -> list[str]:
    """The views the store holds: those recorded in `view_versions` (none in a new store)."""
    return list(stored_views(con, layout))


def check_view_set(con: duckdb.DuckDBPyConnection, views: Sequence[View], adding: Sequence[str] = ()) -> None:
    """Refuse (ViewSetMismatch) loaded views that name none of the store's views, or that would add views
    to a store holding others, unless `adding` names them (`inorder run --add-views`); and a loaded view
    that declares a table another of the store's views owns, whether that view is loaded or not. A new
    store takes any views; loading only some of a store's views is allowed (the others wait)."""
    stored = stored_views(con)
    if stored:
        _check_names(stored, views, adding)
        _check_owners(stored, views)


def _check_names(stored: dict[str, StoredView], views: Sequence[View], adding: Sequence[str]) -> None:
    loaded = [v.name for v in views]
    new = [name for name in loaded if name not in stored and name not in adding]
    if not new:
        return
    holds = f"the store holds the views {', '.join(stored)}, but INORDER_VIEWS loaded {', '.join(loaded)}"
    renamed = _rename_hint(stored, [v for v in views if v.name in new])
    if len(new) == len(loaded):
        load = _load_the_stored_views(stored, views)
        raise ViewSetMismatch(f"{holds}: none of them is in the store. {_or_else(renamed, load)} (or point "
                              "INORDER_HOME at the right home); nothing was written")
    add = f"add them explicitly with `inorder run --add-views {','.join(new)}`, or leave them out of INORDER_VIEWS"
    raise ViewSetMismatch(f"{holds}: {', '.join(new)} would be added to it. {_or_else(renamed, add)}; "
                          "nothing was written")


def _load_the_stored_views(stored: dict[str, StoredView], views: Sequence[View]) -> str:
    """How to load the store's views when none of them is loaded: their modules, unless those are loaded already
    and no longer declare them."""
    modules = list(dict.fromkeys(s.module for s in stored.values()))
    if None in modules:
        return "set INORDER_VIEWS to the modules of the store's views"
    if set(modules) <= {v.module for v in views}:
        them = "it" if len(stored) == 1 else "them"
        one = len(modules) == 1  # "the module …" first: `_or_else` would capitalise a module name
        return (f"the module{'' if one else 's'} {', '.join(modules)} no longer declare{'s' if one else ''} "
                f"{', '.join(stored)}: declare {them} again, or take {them} out of the store with `inorder remove-view "
                f"{next(iter(stored)) if len(stored) == 1 else 'VIEW'}`")
    return f"set INORDER_VIEWS={','.join(modules)}, the module{'s' if len(modules) > 1 else ''} of the store's views"


def _check_owners(stored: dict[str, StoredView], views: Sequence[View]) -> None:
    for view in views:
        for table in view.tables:
            owner = next((name for name, s in stored.items() if name != view.name and table.name in s.tables), None)
            if owner is None:
                continue
            renamed = "" if view.name in stored else _rename_hint(stored, [view])
            instead = f"rename the table, or take {owner} out of the store first (`inorder remove-view {owner}`)"
            raise ViewSetMismatch(f"view {view.name} declares table {table.name}, which the store's view {owner} "
                                  f"owns: a table belongs to one view. {_or_else(renamed, instead)}; nothing was written")


def _rename_hint(stored: dict[str, StoredView], candidates: Sequence[View]) -> str:
    """The way forward when a loaded view the store does not hold declares the same tables as a stored view of
    another name: it is most likely that view, renamed in its module ("" when none does)."""
    for view in candidates:
        tables = sorted(t.name for t in view.tables)
        old = next((name for name, s in stored.items() if name != view.name and sorted(s.tables) == tables), None)
        if old is not None:
            return (f"If {view.name} is {old} renamed (it declares the same tables), `inorder rename-view {old} "
                    f"{view.name}` renames it in the store, with no replay")
    return ""


def _or_else(first: str, otherwise: str) -> str:
    """`first; else otherwise`, or `otherwise` alone as a sentence when there is no `first`."""
    return f"{first}; else {otherwise}" if first else otherwise[:1].upper() + otherwise[1:]


def read_versions(con: duckdb.DuckDBPyConnection, views: Sequence[View], layout: Layout = LIVE
                  ) -> dict[str, ViewVersion]:
    recorded = table_columns(con, layout.state, "view_versions")  # none in a store no writer opened since
    rows = {r[0]: r[1:] for r in con.execute(
        f"SELECT view, {_ROW} FROM {layout.state}.view_versions").fetchall()} if recorded else {}
    return {v.name: compare(v, rows.get(v.name)) for v in views}


def record(con: duckdb.DuckDBPyConnection, view: View, layout: Layout = LIVE) -> None:
    """The view's rows are (from now on) built by the code loaded now: its fingerprint, tables and parts, and
    the module that loaded it (the one recorded stays when the view was not loaded by the registry)."""
    con.execute(f"INSERT OR REPLACE INTO {layout.state}.view_versions (view, fingerprint, version, tables, code, "
                f"recorded_at, module) VALUES (?, ?, ?, ?, ?, ?, coalesce(?, (SELECT module FROM "
                f"{layout.state}.view_versions WHERE view = ?)))",
                [view.name, fingerprint(view), view.version, json.dumps(table_declarations(view.tables)),
                 json.dumps(code_parts(view)), datetime.now(timezone.utc), view.module, view.name])


def reconcile(con: duckdb.DuckDBPyConnection, views: Sequence[View], layout: Layout = LIVE
              ) -> dict[str, ViewVersion]:
    """At a writer's open: record the views seen for the first time and create their tables, apply
    declared migrations (each view's in one transaction with its new fingerprint), and leave a view
    whose tables changed untouched (it is refused until rebuilt)."""
    versions = read_versions(con, views, layout)
    for view in views:
        version = versions[view.name]
        if version.change == "new":
            physical = _physical(con, layout, view.tables)
            with transaction(con):
                if physical is not None and physical != table_declarations(view.tables):
                    # a store made before versions were recorded, whose tables are not the declared ones
                    con.execute(f"INSERT INTO {layout.state}.view_versions (view, fingerprint, tables, recorded_at, "
                                "module) VALUES (?, 'unrecorded', ?, ?, ?)",
                                [view.name, json.dumps(physical), datetime.now(timezone.utc), view.module])
                else:
                    record(con, view, layout)
        elif version.change == "migration":
            with transaction(con):
                old = {t["name"]: dict(map(tuple, t["columns"])) for t in json.loads(con.execute(
                    f"SELECT tables FROM {layout.state}.view_versions WHERE view = ?", [view.name]).fetchone()[0])}
                for table in view.tables:
                    for column, sql_type in table.sql_types.items():
                        if column not in old[table.name]:
                            con.execute(f'ALTER TABLE {layout.table(table.name)} ADD COLUMN "{column}" {sql_type}')
                record(con, view, layout)
    # a store made before modules were recorded learns them; a module once recorded changes only with the view's
    # record (`record`, in the transaction of the view's change or rebuild), so that a command killed after its
    # open leaves the store as it was (the crash sweep's rebuild with another INORDER_VIEWS)
    for view in views:
        if view.module is not None:
            con.execute(f"UPDATE {layout.state}.view_versions SET module = ? WHERE view = ? AND module IS NULL",
                        [view.module, view.name])
    versions = read_versions(con, views, layout)
    for view in views:
        if not versions[view.name].refused:  # (re)create a table dropped by hand; a refused view stays as it is
            for table in view.tables:
                con.execute(table.ddl(layout.table(table.name)))
                if table.kind != "aggregate":  # made with a PRIMARY KEY by older code
                    drop_primary_key(con, layout.tables, table.name)
                if table.kind == "append":
                    keep_newest_rows(con, table, layout)
    return versions


@dataclass(frozen=True)
class RemovedView:
    """What `remove_view` drops (or, before it is confirmed, would drop)."""

    view: str
    tables: tuple[str, ...]  # the tables the view owns, as the store recorded them
    state_rows: dict[str, int]  # engine table -> the view's rows in it
    # tables another of the store's views claims too (a store older code let two views claim a table in): kept
    shared: tuple[str, ...] = ()


def _state_rows(con: duckdb.DuckDBPyConnection, name: str) -> dict[str, int]:
    """Engine table -> the view's rows in it (its version row aside)."""
    return {table: con.execute(f"SELECT count(*) FROM inorder.{table} WHERE view = ?", [name]).fetchone()[0]
            for table in STATE_TABLES if table != "view_versions"}


def _require_stored(stored: dict[str, StoredView], name: str) -> StoredView:
    if name not in stored:
        raise ViewSetMismatch(f"the store holds no view {name!r} (it holds {', '.join(stored) or 'none'})")
    return stored[name]


def remove_view(con: duckdb.DuckDBPyConnection, name: str, confirmed: bool) -> RemovedView:
    """`inorder remove-view`: the explicit act that takes a view out of its store. The tables it owns and every
    engine row of it (watermarks, buffers, errors, gaps, ledger rows, its version) go in one transaction;
    the ingest log and the archive stay, so adding the view back replays it from the archive. Without
    `confirmed`, only says what it would drop."""
    stored = stored_views(con)
    recorded = _require_stored(stored, name).tables
    claimed = {table for other, s in stored.items() if other != name for table in s.tables}
    removed = RemovedView(name, tuple(t for t in recorded if t not in claimed), _state_rows(con, name),
                          tuple(t for t in recorded if t in claimed))
    if confirmed:
        with transaction(con):
            for table in removed.tables:
                con.execute(f'DROP TABLE IF EXISTS {LIVE.table(table)}')
                con.execute(f'DROP TABLE IF EXISTS {LIVE.newest_rows(table)}')  # an append table's newest rows
            for table in STATE_TABLES:
                con.execute(f"DELETE FROM inorder.{table} WHERE view = ?", [name])
            con.execute(f"DROP SCHEMA IF EXISTS {Layout.shadow(name).state} CASCADE")  # an interrupted rebuild's
    return removed


def rename_view(con: duckdb.DuckDBPyConnection, old: str, new: str) -> dict[str, int]:
    """`inorder rename-view`: the view `old`, renamed `new` in its module, keeps its tables and its history, with
    no replay: its version, watermarks, buffers, errors, gaps, ledger rows and the operator entries that target
    it are renamed in one transaction. An interrupted rebuild's shadow of it is dropped (a rebuild starts afresh).
    The caller holds the writer lock and the view's rebuild lock. Returns engine table -> the view's rows in it."""
    check_identifier(new, "view")
    stored = stored_views(con)
    _require_stored(stored, old)
    if new in stored:
        raise ViewSetMismatch(f"the store holds a view {new!r} already: `inorder remove-view {new}` takes it out "
                              "first, if it is the one to go; nothing was written")
    rows = _state_rows(con, old)
    with transaction(con):
        for table in STATE_TABLES:
            con.execute(f"UPDATE inorder.{table} SET view = ? WHERE view = ?", [new, old])
        con.execute("UPDATE inorder.ingest_log SET target_view = ? WHERE target_view = ?", [new, old])
        con.execute(f"DROP SCHEMA IF EXISTS {Layout.shadow(old).state} CASCADE")
    return rows


def keep_newest_rows(con: duckdb.DuckDBPyConnection, table: Table, layout: Layout = LIVE) -> None:
    """Make the engine's copy of each stream's newest row of the append `table` (`Layout.newest_rows`)
    when it is missing (a store made before it was kept) or has other columns than the table (a
    migration added some): in one transaction, from the table's whole history, once; a pass then keeps
    it up to date in its commit, so loading a stream's newest row never reads that history again."""
    name = layout.newest_rows(table.name)
    have = list(table_columns(con, layout.state, f"{table.name}:newest"))
    if have == list(table.columns):
        return
    declared = ", ".join(f'"{c}" {t}' for c, t in table.sql_types.items())
    columns = ", ".join(f'"{c}"' for c in table.columns)
    values = ", ".join(f'r."{c}"' for c in table.columns)
    newest = ", ".join(f'r."{c}" DESC' for c in table.primary_key)
    with transaction(con):
        con.execute(f"DROP TABLE IF EXISTS {name}")
        con.execute(f"CREATE TABLE {name} ({declared})")
        con.execute(f"INSERT INTO {name} ({columns}) SELECT {values} FROM {layout.table(table.name)} r "
                    f'QUALIFY row_number() OVER (PARTITION BY r."{table.stream_key}" ORDER BY {newest}) = 1')


def record_projection(con: duckdb.DuckDBPyConnection, views: Sequence[View], first_entries: dict[str, tuple[int, str]],
                      layout: Layout = LIVE) -> None:
    """In a pass's commit: a view projected by code other than what built its rows is marked as mixed
    from the pass's first batch on (the first time), with the newest code that projected it.
    `first_entries`: view -> (entry_idx, batch_id) of the pass's first entry for it."""
    for view in views:
        if view.name not in first_entries:
            continue
        code = fingerprint(view)
        entry_idx, batch_id = first_entries[view.name]
        con.execute(f"""UPDATE {layout.state}.view_versions
                        SET newer_fingerprint = ?, newer_since_entry = coalesce(newer_since_entry, ?),
                            newer_since_batch = coalesce(newer_since_batch, ?)
                        WHERE view = ? AND (fingerprint <> ? OR newer_fingerprint IS NOT NULL)""",
                    [code, entry_idx, batch_id, view.name, code])
