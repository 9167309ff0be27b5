"""A view's version (pipelines/store/versions.py) where `make mutation` found it unheld (issue 36): what `compare`
returns field by field, `describe` and `refusal` in each state, what a writer's open does to a store made by older
code (no version recorded, no module recorded, a migration declared, an append table's newest rows missing), and
the source that identifies a handler or predicate with no file. DuckDB in process, no JVM."""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import replace
from datetime import date, datetime, timedelta, timezone

import duckdb
import pytest

from pipelines.store.database import Store
from pipelines.store.versions import (ViewSetMismatch, ViewVersion, code_parts, compare, fingerprint, read_versions,
                                      remove_view, rename_view, stored_views, table_declarations)
from pipelines.view import DECIMAL, Column, Handlers, Table, View, add_column
from tests.harness import fresh_home


def noted(event, tables) -> None:
    tables.notes.put({"note_id": event.stream_id, "n": 1})


def noted_twice(event, tables) -> None:
    tables.notes.put({"note_id": event.stream_id, "n": 2})


NOTES = Table.per_stream("notes", key="note_id", columns={"n": Column(int)})
VIEW = View(name="notes", tables=(NOTES,), subscribes=("note",), handlers=Handlers("notes", {"Noted": noted}),
            on_change="rebuild")


def stored_row(view: View, newer: str | None = "f0", since_entry: int | None = 7, since_batch: str | None = "b7"):
    """`view_versions`' row for `view` as `compare` reads it, with a newer code's mark."""
    return (fingerprint(view), json.dumps(table_declarations(view.tables)), json.dumps(code_parts(view)),
            newer, since_entry, since_batch)


# -- compare, describe, refusal ------------------------------------------------------------------------

def test_compare_gives_every_field_for_a_new_a_same_and_a_changed_view():
    code = fingerprint(VIEW)
    assert compare(VIEW, None) == ViewVersion("notes", code, None, "new", "", on_change="rebuild")
    mark = dict(newer="f0", since_batch="b7", since_entry=7, on_change="rebuild")
    assert compare(VIEW, stored_row(VIEW)) == ViewVersion("notes", code, code, "same", "", **mark)
    old = replace(VIEW, handlers=Handlers("notes", {"Noted": noted_twice}))
    changed = compare(VIEW, stored_row(old))
    assert changed == ViewVersion("notes", code, fingerprint(old), "code", "handler Noted changed", **mark)
    # the stored parts equal the loaded ones (the fingerprint recorded some other way): the change is unnamed
    unnamed = compare(VIEW, ("f1", *stored_row(VIEW)[1:]))
    assert unnamed == ViewVersion("notes", code, "f1", "code", "code changed", **mark)
    # a store made before versions were recorded holds no parts ('unrecorded', code NULL)
    unrecorded = compare(VIEW, ("unrecorded", stored_row(VIEW)[1], None, None, None, None))
    assert (unrecorded.change, unrecorded.stored) == ("code", "unrecorded")
    assert unrecorded.what == ", ".join(code_parts(VIEW)) + " changed"


def notes_table(key: tuple[str, ...] = ("note_id",), **columns: Column) -> Table:
    return Table.keyed("notes", {"note_id": Column(str), "n": Column(int), **columns}, key, stream_key="note_id")


def test_compare_names_every_table_change_and_offers_add_column_only_for_nullable_columns_added_alone():
    typed = replace(VIEW, tables=(notes_table(n=Column(float), text=Column(str)),))  # a type changed, a column added
    both = compare(typed, stored_row(VIEW))
    assert both == ViewVersion("notes", fingerprint(typed), fingerprint(VIEW), "tables",
                               "table notes: column n BIGINT -> DOUBLE; table notes: column text VARCHAR added",
                               newer="f0", since_batch="b7", since_entry=7, on_change="rebuild")
    assert both.could_migrate == ()
    assert both.refusal() == ("view notes: table notes: column n BIGINT -> DOUBLE; table notes: column text VARCHAR "
                              "added; its rows were built with the old tables, so it is not projected (run "
                              "`inorder rebuild notes`)")
    offered = compare(replace(VIEW, tables=(notes_table(text=Column(str), day=Column(date)),)), stored_row(VIEW))
    assert offered.could_migrate == (("notes", "text"), ("notes", "day"))
    assert offered.refusal().endswith('`migrations=(add_column("notes", "text"), add_column("notes", "day"),)` '
                                      'on the view and run again: no rebuild)')
    keyed = compare(replace(VIEW, tables=(notes_table(("note_id", "day"), day=Column(date)),)), stored_row(VIEW))
    assert keyed.what == ("table notes: column day DATE added; "
                          "table notes: primary key ['note_id'] -> ['note_id', 'day']") and keyed.could_migrate == ()
    other = Table.per_stream("others", key="other_id", columns={"n": Column(int)})
    assert compare(replace(VIEW, tables=(other,)), stored_row(VIEW)).what == "table others added; table notes removed"


def test_describe_says_each_state_in_its_own_words():
    base = ViewVersion("notes", "c2", "c1", "same", "")
    assert base.describe() == "matches the store"
    assert replace(base, change="new", stored=None).describe() == "matches the store"
    assert replace(base, change="code", what="handler Noted changed").describe() == (
        "code changed (handler Noted changed): built by older code (c1); the next run projects with this code, "
        "`inorder rebuild notes` rebuilds it")
    assert replace(base, change="migration", what="table notes: column text VARCHAR added").describe() == (
        "migration due (table notes: column text VARCHAR added): applied by the next run")
    mixed = "mixed code: rows before batch b7 were built by older code (c1)"
    assert replace(base, change="code", what="x changed", newer="c2", since_batch="b7").describe() == (
        f"{mixed}, rows from it on by this code (x changed); `inorder rebuild notes` rebuilds it")
    assert replace(base, change="code", newer="c3", since_batch="b7").describe() == (
        f"{mixed}, rows from it on by code c3, and the code changed again (c2); `inorder rebuild notes` rebuilds it")


# -- a writer's open on a store made by older code ---------------------------------------------------------

STAMPED = Table.per_stream("stamps", key="stamp_id", columns={"at": Column(datetime), "amount": Column(DECIMAL(12, 2))})
STAMPS = View(name="stamps", tables=(STAMPED,), subscribes=("stamp",))


def _forget_versions(home, ddl: str | None = None) -> None:
    """A store as code older than recorded versions left it: no `view_versions` row; `ddl` remakes the table."""
    con = duckdb.connect(str(home.database))
    con.execute("DELETE FROM inorder.view_versions")
    if ddl:
        con.execute("DROP TABLE stamps")
        con.execute(ddl)
    con.close()


def test_a_store_whose_tables_are_the_declared_ones_records_the_version_at_its_first_open(tmp_path):
    home = fresh_home(tmp_path)
    Store.open(home, [STAMPS]).close()
    _forget_versions(home)  # DuckDB names TIMESTAMPTZ 'TIMESTAMP WITH TIME ZONE': still the declared table
    with Store.open(home, [STAMPS]) as store:
        assert store.versions["stamps"].matches
        assert store.con.execute("SELECT fingerprint FROM inorder.view_versions").fetchall() == [(fingerprint(STAMPS),)]


def test_a_store_whose_tables_are_not_the_declared_ones_is_recorded_unrecorded_and_refused(tmp_path):
    home = fresh_home(tmp_path)
    Store.open(home, [STAMPS]).close()
    _forget_versions(home, 'CREATE TABLE stamps (stamp_id VARCHAR NOT NULL, "at" TIMESTAMPTZ)')
    with Store.open(home, [STAMPS]) as store:
        version = store.versions["stamps"]
        assert version.refused and version.what == "table stamps: column amount DECIMAL(12,2) added"
        fingerprint_, tables, module = store.con.execute(
            "SELECT fingerprint, tables, module FROM inorder.view_versions").fetchone()
        assert fingerprint_ == "unrecorded" and module is None
        assert json.loads(tables) == [{"name": "stamps", "kind": "keyed", "columns": [["stamp_id", "VARCHAR"],
                                       ["at", "TIMESTAMPTZ"]], "primary_key": ["stamp_id"], "stream_key": "stamp_id"}]


@pytest.fixture
def new_york():
    """The process's local time is New York's (the store's connection keeps UTC)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def test_a_version_is_recorded_at_the_utc_time_whatever_the_local_time_zone(tmp_path, new_york):
    home = fresh_home(tmp_path)
    Store.open(home, [STAMPS]).close()
    _forget_versions(home, 'CREATE TABLE stamps (stamp_id VARCHAR NOT NULL)')  # recorded 'unrecorded'
    Store.open(home, [STAMPS]).close()
    other = fresh_home(tmp_path, "other")
    Store.open(other, [STAMPS]).close()  # recorded with its fingerprint
    for store_home in (home, other):
        con = duckdb.connect(str(store_home.database), read_only=True)
        (at,) = con.execute("SELECT recorded_at FROM inorder.view_versions").fetchone()
        con.close()
        assert abs(at - datetime.now(timezone.utc)) < timedelta(minutes=5)


def test_a_declared_migration_adds_the_column_at_the_writers_open_and_records_the_new_code(tmp_path):
    home = fresh_home(tmp_path)
    Store.open(home, [VIEW]).close()
    migrated = replace(VIEW, tables=(notes_table(text=Column(str)),), migrations=(add_column("notes", "text"),))
    with Store.open(home, [migrated]) as store:
        assert store.versions["notes"].matches
        assert [c for (c,) in store.con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'notes' "
                                                "ORDER BY column_index").fetchall()] == ["note_id", "n", "text"]
        assert store.con.execute("SELECT fingerprint, tables FROM inorder.view_versions").fetchone() == (
            fingerprint(migrated), json.dumps(table_declarations(migrated.tables)))


def test_a_store_that_recorded_no_module_learns_it_at_a_writers_open(tmp_path):
    home = fresh_home(tmp_path)
    Store.open(home, [VIEW]).close()
    loaded = replace(VIEW)
    object.__setattr__(loaded, "module", "note_views")  # the registry's own way (View is frozen)
    with Store.open(home, [loaded]) as store:
        assert stored_views(store.con)["notes"].module == "note_views"


LOG = Table.append("log", {"log_id": Column(str), "pos": Column(int), "what": Column(str)}, ("log_id", "pos"),
                   stream_key="log_id")
LOGS = View(name="logs", tables=(LOG,), subscribes=("log",))


def newest(con) -> list:
    return con.execute('SELECT * FROM inorder."log:newest" ORDER BY log_id').fetchall()


def test_an_append_tables_newest_rows_are_made_once_from_its_history_and_go_with_the_view(tmp_path):
    home = fresh_home(tmp_path)
    with Store.open(home, [LOGS]) as store:
        assert newest(store.con) == []
        store.con.execute("INSERT INTO log VALUES ('a', 1, 'x'), ('a', 2, 'y'), ('b', 1, 'z')")
        store.con.execute('DROP TABLE inorder."log:newest"')  # a store made before the newest rows were kept
    with Store.open(home, [LOGS]) as store:
        assert newest(store.con) == [("a", 2, "y"), ("b", 1, "z")]
        store.con.execute("INSERT INTO log VALUES ('a', 3, 'w')")  # not in the newest rows: a pass keeps both
    with Store.open(home, [LOGS]) as store:
        assert newest(store.con) == [("a", 2, "y"), ("b", 1, "z")]  # made once, not from the history at each open
        remove_view(store.con, "logs", confirmed=True)
        assert store.con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name IN ('log', 'log:newest')"
                                 ).fetchone() == (0,)


def test_a_store_whose_versions_have_no_module_column_reads_none_and_one_never_opened_reads_new(tmp_path):
    con = duckdb.connect()
    assert read_versions(con, [VIEW]) == {"notes": compare(VIEW, None)}  # no `inorder` schema at all
    con.execute("CREATE SCHEMA inorder")
    con.execute("CREATE TABLE inorder.view_versions (view VARCHAR, tables VARCHAR)")
    con.execute("INSERT INTO inorder.view_versions VALUES ('notes', ?)", [json.dumps(table_declarations([NOTES]))])
    assert stored_views(con) == {"notes": (("notes",), None)}


def test_a_stored_view_that_declares_another_stored_views_tables_is_not_offered_a_rename(tmp_path):
    home = fresh_home(tmp_path)
    other = View(name="others", tables=(Table.per_stream("others", key="id", columns={}),), subscribes=("note",))
    Store.open(home, [VIEW, other]).close()
    grabbing = replace(VIEW, tables=other.tables)  # notes, stored, now declares only others' table
    with pytest.raises(ViewSetMismatch) as refused:
        Store.open(home, [grabbing]).close()
    assert "renamed" not in str(refused.value) and "Rename the table" in str(refused.value)


def test_a_view_renamed_to_no_valid_name_is_refused_naming_it_a_view(tmp_path):
    home = fresh_home(tmp_path)
    with Store.open(home, [VIEW]) as store:
        with pytest.raises(ValueError, match=r"^view 'Notes!' is not a valid name"):
            rename_view(store.con, "notes", "Notes!")


# -- the source that identifies code ---------------------------------------------------------------------

def _exec_handler(body: str):
    namespace: dict = {}
    exec(f"def handler(event, tables):\n    return {body}\n", namespace)  # no file: no source to read
    return namespace["handler"]


class _Predicate:
    def __call__(self, event) -> bool:
        return True


class _OtherPredicate(_Predicate):
    pass


def test_what_has_no_source_is_told_apart_by_its_code_or_its_name():
    def part(view: View, name: str) -> str:
        return code_parts(view)[name]

    # handlers made in memory, of one name: their bytecode and constants tell them apart
    one, two = (replace(VIEW, handlers=Handlers("notes", {"Noted": _exec_handler(body)})) for body in ("1", "2"))
    assert part(one, "handler Noted") != part(two, "handler Noted")
    # plain handlers of one module: their source
    twice = replace(VIEW, handlers=Handlers("notes", {"Noted": noted_twice}))
    assert part(VIEW, "handler Noted") != part(twice, "handler Noted")
    # predicates: a partial's function and arguments, a builtin's name, a callable object's class
    predicates = [functools.partial(noted, tables=1), functools.partial(noted_twice, tables=1),
                  functools.partial(noted, tables=2), len, callable, _Predicate(), _OtherPredicate()]
    digests = [part(replace(VIEW, predicate=p), "predicate") for p in predicates]
    assert len(set(digests)) == len(predicates)
    assert part(replace(VIEW, predicate=_Predicate()), "predicate") == digests[5]  # the same class, the same source


# -- which modules are the view's own -------------------------------------------------------------------------

def _write(folder, files: dict[str, str]) -> None:
    for name, source in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)


HANDLER = '''
from pipelines.view import Column, Handlers, Table, View
import beside_{t}
from other_{t} import RATE
{extra}

def handled(event, tables):
    tables.{t}.save(n=beside_{t}.N * RATE)


VIEW = View(name="{t}", tables=(Table.per_stream("{t}", key="k", columns={{"n": Column(int)}}),), subscribes=("x",),
            handlers=Handlers("{t}", {{"E": handled}}))
'''


@pytest.fixture
def two_folders(tmp_path, monkeypatch):
    """Two folders on the path: `mine` holds the views' code, `theirs` a module they import (not theirs to own)."""
    import importlib
    import sys

    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    _write(theirs, {**{f"other_{t}.py": "RATE = 2\n" for t in ("flat", "pkg")}})
    _write(mine, {"beside_flat.py": "N = 1\n", "beside_pkg.py": "N = 1\n",
                  "flat.py": HANDLER.format(t="flat", extra="from helpers.sub import deeper\nimport helpers.spaced\n"
                                                                  "import deep.inner.mod"),
                  "pkg/__init__.py": HANDLER.format(t="pkg", extra=""),
                  "helpers/__init__.py": "", "helpers/sub/deeper.py": "D = 4\n", "helpers/spaced/mod.py": "",
                  # relative imports in a module and in a package's __init__.py, two packages deep
                  "deep/__init__.py": "", "deep/inner/__init__.py": "from . import leaf\n", "deep/inner/leaf.py": "",
                  "deep/inner/mod.py": "from . import leaf\n"})
    for path in (theirs, mine):
        monkeypatch.syspath_prepend(str(path))
    monkeypatch.chdir(theirs)  # a root guessed from the working folder would take `theirs` in
    importlib.invalidate_caches()
    yield mine
    for name in [m for m in sys.modules if m.split(".")[0] in ("flat", "pkg", "beside_flat", "beside_pkg", "other_flat",
                                                                  "other_pkg", "helpers", "compiled", "uses_compiled", "deep",
                                                                  "mixed", "uses_zip", "zipped_helper", "uses_coded",
                                                                  "latin_helper", "bom_helper")]:
        del sys.modules[name]


def test_a_views_own_modules_are_those_under_the_folder_that_holds_its_module_or_package(two_folders):
    import importlib

    from pipelines.store.versions import own_modules

    flat = importlib.import_module("flat").VIEW
    found = own_modules(flat)
    # `helpers.sub` and `helpers.spaced` are folders without __init__.py inside a package: counted, with no file
    assert list(found) == ["beside_flat", "deep.inner", "deep.inner.leaf", "deep.inner.mod", "flat", "helpers.spaced",
                           "helpers.sub", "helpers.sub.deeper"]
    assert (found["beside_flat"], found["flat"], found["helpers.sub.deeper"]) == (
        "N = 1\n", (two_folders / "flat.py").read_text(), "D = 4\n")
    package = importlib.import_module("pkg").VIEW  # defined in a package's __init__.py: the root is the package's folder
    assert list(own_modules(package)) == ["beside_pkg", "pkg"]
    # a builtin predicate, a handler made in memory with a module of no file, a partial of a handler elsewhere
    namespace: dict = {"__name__": "notebook_cell"}
    exec("def made(event, tables):\n    pass\n", namespace)
    wrapped = replace(VIEW, handlers=Handlers("notes", {"Noted": namespace["made"], "Other": functools.partial(
        importlib.import_module("flat").handled)}), predicate=len)
    assert {"flat", "beside_flat"} <= set(own_modules(wrapped))
    assert "other_flat" not in own_modules(wrapped)
    assert code_parts(replace(VIEW, predicate=(1).__eq__))  # a callable with no module at all


def test_a_module_compiled_without_its_source_counts_by_its_name(two_folders):
    import importlib
    import py_compile

    from pipelines.store.versions import own_modules

    _write(two_folders, {"compiled_src.py": "C = 1\n", "uses_compiled.py": HANDLER.format(
        t="flat", extra="import compiled")})
    py_compile.compile(str(two_folders / "compiled_src.py"), cfile=str(two_folders / "compiled.pyc"))
    (two_folders / "compiled_src.py").unlink()
    importlib.invalidate_caches()
    view = importlib.import_module("uses_compiled").VIEW
    assert own_modules(view)["compiled"] == "compiled"


def test_a_folder_without_init_counts_by_its_name_whether_or_not_it_was_imported(two_folders):
    """Once imported, such a folder's loader gives '' for its source, and before, none: either way, one value, so
    that a process that imported it and one that did not record one fingerprint."""
    import importlib
    import sys

    from pipelines.store.versions import own_modules

    view = importlib.import_module("flat").VIEW
    imported = own_modules(view)
    assert "helpers.sub" in sys.modules and imported["helpers.sub"] == "helpers.sub"
    for name in ("helpers.sub", "helpers.sub.deeper", "helpers.spaced"):
        sys.modules.pop(name, None)
    importlib.invalidate_caches()
    assert own_modules(view) == imported


def test_a_helper_in_a_zip_counts_by_its_source_and_an_edit_of_it_is_seen(two_folders, monkeypatch):
    import importlib
    import zipfile

    from pipelines.store.versions import own_modules

    def zipped(source: str) -> None:
        with zipfile.ZipFile(two_folders / "lib.zip", "w") as archive:
            archive.writestr("zipped_helper.py", source)

    zipped("Z = 1\n")
    monkeypatch.syspath_prepend(str(two_folders / "lib.zip"))
    _write(two_folders, {"uses_zip.py": HANDLER.format(t="flat", extra="import zipped_helper")})
    importlib.invalidate_caches()
    view = importlib.import_module("uses_zip").VIEW
    assert own_modules(view)["zipped_helper"] == "Z = 1\n"
    zipped("Z = 2\n")
    importlib.invalidate_caches()
    assert own_modules(view)["zipped_helper"] == "Z = 2\n"


def test_a_helper_counts_by_its_source_as_python_reads_it_whatever_its_encoding(two_folders):
    import importlib

    from pipelines.store.versions import own_modules

    (two_folders / "latin_helper.py").write_bytes('# -*- coding: latin-1 -*-\nNAME = "café"\n'.encode("latin-1"))
    (two_folders / "bom_helper.py").write_bytes("\ufeffNAME = 'x'\n".encode("utf-8"))
    _write(two_folders, {"uses_coded.py": HANDLER.format(t="flat", extra="import latin_helper\nimport bom_helper")})
    importlib.invalidate_caches()
    found = own_modules(importlib.import_module("uses_coded").VIEW)
    assert (found["latin_helper"], found["bom_helper"]) == ('# -*- coding: latin-1 -*-\nNAME = "café"\n', "NAME = 'x'\n")


def test_every_import_statement_of_a_module_counts_not_only_the_last(two_folders):
    import importlib

    from pipelines.store.versions import own_modules

    _write(two_folders, {"mixed.py": HANDLER.format(t="flat", extra="").replace(
        "import beside_flat\n", "from helpers.sub import deeper\nimport beside_flat\n")})  # a `from` before an `import`
    importlib.invalidate_caches()
    assert {"beside_flat", "helpers.sub.deeper"} <= set(own_modules(importlib.import_module("mixed").VIEW))


def test_a_digest_does_not_depend_on_the_order_its_mappings_were_built_in():
    """The store keeps the digests (fingerprints, code parts) that another process, or another inorder, compares."""
    from pipelines.store.versions import _digest

    assert _digest({"tables": [1], "code": {"b": "1", "a": "2"}}) == _digest({"code": {"a": "2", "b": "1"}, "tables": [1]})
