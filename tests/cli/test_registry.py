"""Views are discovered from INORDER_VIEWS, and a set that cannot run together is refused in one line."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from pipelines import registry
from pipelines.registry import ViewDeclarationError, load_views, module_sources, view_module_names
from pipelines.config import Settings
from pipelines.store.database import RESERVED_TABLE_NAMES, Home
from tests.command import clean_environment, inorder

_names = (f"userviews{i}" for i in itertools.count())  # a fresh module name per use: imports are cached

# declared as a user does now, so the CLI says no deprecation before its one-line refusal
VIEW_TEMPLATE = """
from inorder import Column, Table, View

{name} = View(name={view!r}, subscribes=("thing",), tables=(
    Table.keyed({table!r}, {{"thing_id": Column(str), "n": Column(int)}}, key=("thing_id",), stream_key="thing_id"),))
"""


def view_source(view: str, table: str, name: str = "VIEW") -> str:
    return VIEW_TEMPLATE.format(name=name, view=view, table=table)


def write_module(root: Path, files: dict[str, str]) -> str:
    """Write a package (or a single module when `files` has one key ending in .py) under a fresh name."""
    name = next(_names)
    if list(files) == ["module.py"]:
        (root / f"{name}.py").write_text(files["module.py"])
        return name
    for relative, text in {"__init__.py": "", **files}.items():
        path = root / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return name


@pytest.fixture
def user_root(tmp_path, monkeypatch):
    root = tmp_path / "outside"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def test_the_default_is_the_bank_package_and_the_variable_is_read(tmp_path):
    home = Home.of(Settings(), tmp_path / "home")
    assert view_module_names() == view_module_names(home=home) == ("views",)
    assert sorted(v.name for v in load_views(home=home)) == ["account_activity", "accounts", "daily_totals"]
    given = Home.of(Settings.from_env({"INORDER_VIEWS": " shop.views , billing.views,shop.views "}), tmp_path / "h")
    assert view_module_names(home=given) == ("shop.views", "billing.views")


def test_every_module_of_a_package_contributes_its_views_once(user_root):
    package = write_module(user_root, {
        "a.py": view_source("alpha", "alpha_rows"),
        "nested/__init__.py": "",
        "nested/b.py": view_source("beta", "beta_rows", name="BETA") + "\nALIAS = BETA\n",
        "helpers.py": "def util():\n    return 1\n",
    })
    # the same view imported into another module is found once
    (user_root / package / "reexport.py").write_text(f"from {package}.a import VIEW\n")
    single = write_module(user_root, {"module.py": view_source("gamma", "gamma_rows")})
    views = load_views(f"{package},{single}")
    assert [v.name for v in views] == ["alpha", "beta", "gamma"]
    assert module_sources(f"{package},{single}") == [user_root / package, user_root / f"{single}.py"]


def test_handlers_registered_in_another_module_count_and_none_after_loading(user_root):
    """`@view.on` from a second module of the package is part of the view (and of its fingerprint);
    once the views are loaded to run, a handler more is refused rather than run unseen."""
    from pipelines.store.versions import fingerprint
    from pipelines.view import HandlerRegistrationClosed

    package = write_module(user_root, {
        "a.py": view_source("alpha", "alpha_rows"),
        "b.py": "from .a import VIEW\n\n@VIEW.on('Made')\ndef made(event, tables):\n    pass\n",
    })
    (view,) = load_views(package)
    assert list(view.handlers) == ["Made"]
    bare = view_source("alpha", "alpha_rows")
    namespace: dict = {}
    exec(bare, namespace)  # the same declaration without the second module's handler
    assert fingerprint(namespace["VIEW"]) != fingerprint(view)
    with pytest.raises(HandlerRegistrationClosed, match="alpha: on\\('Late'\\) after the view was loaded"):
        view.on("Late")(lambda event, tables: None)
    assert list(view.handlers) == ["Made"]
    assert load_views(package) == (view,)  # loading again is allowed


def refusal(user_root: Path, *sources: str) -> str:
    modules = [write_module(user_root, {"module.py": text}) for text in sources]
    with pytest.raises(ViewDeclarationError) as caught:
        load_views(",".join(modules))
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_two_views_with_one_name_are_refused(user_root):
    assert "two views are named 'dup'" in refusal(user_root, view_source("dup", "t1"), view_source("dup", "t2"))


def test_two_views_declaring_one_table_are_refused(user_root):
    message = refusal(user_root, view_source("one", "shared"), view_source("two", "shared"))
    assert "both declare table 'shared'" in message


@pytest.mark.parametrize("table", sorted(RESERVED_TABLE_NAMES))
def test_a_table_named_like_an_engine_table_or_temporary_table_is_refused(user_root, table):
    assert f"declares table {table!r}" in refusal(user_root, view_source("mine", table))


@pytest.mark.parametrize("name", sorted(registry.RESERVED_VIEW_NAMES))
def test_a_view_named_like_an_engine_asset_is_refused(user_root, name):
    assert "takes the name of an engine asset" in refusal(user_root, view_source(name, "rows_of_" + name))


def test_a_module_that_fails_to_import_or_holds_no_view_is_refused(user_root):
    missing = str(pytest.raises(ViewDeclarationError, load_views, "no_such_module_here").value)
    assert "cannot import view module 'no_such_module_here'" in missing and "\n" not in missing
    assert "export PYTHONPATH=<the folder that holds no_such_module_here>" in missing  # issue 33, item 7
    assert "`inorder init --views no_such_module_here`" in missing
    # a module that is found but imports a missing one is the author's code to fix, not the path
    assert "PYTHONPATH" not in refusal(user_root, "import no_such_dependency_here\n")
    assert "ZeroDivisionError" in refusal(user_root, "x = 1 / 0\n")
    assert "no View is defined" in refusal(user_root, "x = 1\n")


def test_engine_temporary_tables_are_all_reserved():
    """Every temporary table or view the engine creates on the store's connection is in the reserved set."""
    import re

    engine = Path(registry.__file__).parent
    source = "\n".join(p.read_text() for p in engine.rglob("*.py"))
    created = set(re.findall(r"TEMP (?:TABLE|VIEW) (\w+)", source)) | set(re.findall(r'register\("(\w+)"', source))
    assert created and created <= RESERVED_TABLE_NAMES


def test_the_cli_refuses_bad_views_in_one_line_and_writes_nothing(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "clash_views.py").write_text(view_source("one", "shared") + view_source("two", "shared", name="B"))
    home = tmp_path / "home"
    env = clean_environment(home, "clash_views", path=(outside,))
    for command in (["run"], ["status"], ["rebuild", "one"], ["retry", "--view", "one", "--all"]):
        done = inorder(env, *command, code=1, timeout=120)
        assert done.stderr.strip().splitlines() == [
            "inorder: error: views 'one' (clash_views) and 'two' (clash_views) both declare table 'shared': "
            "a table belongs to one view"], done.stderr
        assert not home.exists()  # nothing written, not even the folder


def test_views_are_the_same_for_every_entry_point(monkeypatch):
    """The Dagster code location builds one asset and eight checks per view of INORDER_VIEWS."""
    script = textwrap.dedent("""
        from inorder.definitions import defs
        graph = defs().resolve_asset_graph()
        print(sorted(k.to_user_string() for k in graph.get_all_asset_keys()))
        print(sorted((c.asset_key.to_user_string(), c.name) for c in graph.asset_check_keys))
    """)
    env = {**os.environ, "INORDER_VIEWS": "tests.helpdesk_views"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    keys, checks = done.stdout.strip().splitlines()[-2:]
    assert eval(keys) == ["errors", "event_batches", "gaps", "helpdesk"]
    assert eval(checks) == [("event_batches", "file_not_rejected"), ("event_batches", "no_new_rejected_files"), ("event_batches", "no_new_unrouted_records"),
                            ("helpdesk", "conservation"),
                            ("helpdesk", "expectations"), ("helpdesk", "keys_unique"), ("helpdesk", "late_rate"),
                            ("helpdesk", "no_handler_bugs"),
                            ("helpdesk", "no_overdue_blocked_streams"), ("helpdesk", "no_parked_streams"),
                            ("helpdesk", "published"), ("helpdesk", "reject_rate"),
                            ("helpdesk", "watermarks_never_move_back")]


@pytest.mark.parametrize("declaration, refusal", [
    ({"owners": ("payments",)}, "owner 'payments' is neither an email address nor 'team:<name>'"),
    ({"tags": {"tier": "gold star"}}, "tag 'tier': 'gold star' needs letters"),
    ({"fresh_within": timedelta(0)}, "need 0 < fresh_within <= stale_after"),
    ({"stale_after": timedelta(hours=1)}, "stale_after needs fresh_within"),
])
def test_a_view_refuses_owners_tags_and_freshness_the_ui_cannot_show(declaration, refusal):
    from pipelines.view import Column, Table, View

    table = Table("t", {"k": Column(str)}, ("k",), stream_key="k")
    with pytest.raises(ValueError, match=re.escape(refusal)):
        View("v", (table,), ("s",), **declaration)


def test_alert_thresholds_are_checked():
    from pipelines.view import Alerts, Thresholds

    with pytest.raises(ValueError, match="need 0 <= warn <= error <= 1"):
        Alerts(reject_rate=Thresholds(0.5, 0.1))
    with pytest.raises(ValueError, match="min_selected: need at least 1"):
        Alerts(min_selected=0)



def test_init_records_the_folder_of_view_modules_a_new_shell_would_not_find(tmp_path, monkeypatch):
    """`inorder init --views` records where it found the modules when that came from PYTHONPATH or the current
    folder; loading them from the home's record puts that folder on Python's path (issue 33, item 7)."""
    from pipelines.registry import view_module_names, views_folder_to_record

    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    for folder, module in ((here, "mine_in_cwd"), (elsewhere, "mine_on_path")):
        folder.mkdir()
        (folder / f"{module}.py").write_text("x = 1\n")
    monkeypatch.chdir(here)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", str(elsewhere))
    monkeypatch.syspath_prepend(str(elsewhere))
    assert views_folder_to_record("mine_in_cwd") == here  # found in the current folder, which init looks in
    assert views_folder_to_record("mine_on_path,views") == elsewhere
    assert views_folder_to_record("views") is None  # installed with inorder: every shell finds it
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # the repository
    assert views_folder_to_record("shop.views") is None  # found from here, and by every shell all the same
    assert views_folder_to_record("no_such_module_here") is None

    home = Home.of(Settings(), str(tmp_path / "home"))
    home.root.mkdir()
    home.record_views("mine_in_cwd", here)
    assert (home.recorded_views(), home.recorded_views_folder()) == ("mine_in_cwd", here)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(here)])
    assert view_module_names(home=home) == ("mine_in_cwd",) and str(here) in sys.path
