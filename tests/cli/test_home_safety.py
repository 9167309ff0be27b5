"""A user's data is never lost nor rewritten by mistake: the demo and UI scripts touch only the homes they
made, a store refuses views it does not hold (every command, and the Dagster code location), and records
no view subscribes to are reported and can be re-ingested after `source.json` is fixed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from inorder.cli import _batch_warnings, _run_document
from inorder.dagster_runs import CliRun
from pipelines.registry import load_views
from pipelines.facade import reingest_batches, run
from pipelines.observe.status import format_status, read_status, status_document
from pipelines.serve.publish import Positions
from pipelines.config import Settings
from pipelines.store.database import Home, Store
from tests.command import assert_started_no_server, clean_environment, inorder

ROOT = Path(__file__).resolve().parents[2]
NOW = "2026-11-02T00:00:00Z"


def user_home(root: Path) -> dict[str, bytes]:
    """A user's home as the README's tutorial leaves it before step 4: landing files and source.json, no store."""
    (root / "landing").mkdir(parents=True)
    files = {"landing/loans-001.jsonl": b'{"loan": "L1", "version": 1, "type": "Opened"}\n',
             "landing/loans-002.jsonl": b'{"loan": "L1", "version": 2, "type": "Repaid"}\n',
             "source.json": b'{"name": "loan", "stream_id": "loan", "seq": "version"}\n'}
    for name, content in files.items():
        (root / name).write_bytes(content)
    return files


def unchanged(root: Path, files: dict[str, bytes]) -> None:
    assert {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} == set(files)
    for name, content in files.items():
        assert (root / name).read_bytes() == content


# --- 1. the scripts touch only what they made

def home_kind(folder: Path) -> str:
    done = subprocess.run(["bash", "-c", f'. scripts/home_kind.sh && home_kind "{folder}"'], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_a_folder_is_the_demos_only_when_its_marker_says_so(tmp_path):
    assert home_kind(tmp_path / "nothing") == "missing"
    (tmp_path / "empty").mkdir()
    assert home_kind(tmp_path / "empty") == "empty"
    user_home(tmp_path / "user")
    assert home_kind(tmp_path / "user") == "user"
    (tmp_path / "store-only").mkdir()
    (tmp_path / "store-only" / "store.duckdb").write_bytes(b"")
    assert home_kind(tmp_path / "store-only") == "user"
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / ".made-by-inorder-demo").write_text("made by scripts/demo.sh")
    assert home_kind(tmp_path / "demo") == "demo"


def test_the_demo_refuses_a_home_it_did_not_make_and_leaves_its_files(tmp_path):
    files = user_home(tmp_path / "mine")
    env = clean_environment(tmp_path / "mine", "loan_views", as_a_user=True, INORDER_DEMO_HOME=str(tmp_path / "mine"))
    done = subprocess.run(["bash", "scripts/demo.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "holds files the demo did not make" in done.stderr and "left as it is" in done.stderr
    unchanged(tmp_path / "mine", files)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_ui_serves_an_exported_user_home_as_it_is(tmp_path):
    """README tutorial step 4: `./scripts/ui.sh` with INORDER_HOME exported on a home holding the user's files
    and no store yet. It must serve that home (its landing folder), never fill it with demo batches."""
    home = tmp_path / "carrier" / ".inorder"
    files = user_home(home)
    port = _free_port()
    env = clean_environment(home, "views", as_a_user=True, PORT=str(port), DAGSTER_HOME=str(tmp_path / "dagster"),
                            INORDER_SPARK_WARM="0")  # no warm Spark server: not what this test is about
    ui = subprocess.Popen(["bash", "scripts/ui.sh"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and ui.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(1)
        assert ui.poll() is None, ui.stdout.read()
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        try:
            output, _ = ui.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
            output, _ = ui.communicate()
    assert f"ui: serving your home {home} as it is" in output
    made = {str(p.relative_to(home)) for p in home.rglob("*") if p.is_file()} - set(files)
    assert not [name for name in made if name.startswith("landing/") or name.endswith(".jsonl")], made
    for name, content in files.items():
        assert (home / name).read_bytes() == content


def test_the_cli_names_the_demo_home_when_there_is_no_home_here(tmp_path):
    demo = tmp_path / ".inorder" / "demo"
    demo.mkdir(parents=True)
    (demo / ".made-by-inorder-demo").write_text("made by scripts/demo.sh")
    done = inorder(clean_environment(as_a_user=True), "status", code=1, cwd=tmp_path, timeout=120)
    assert done.stderr.strip() == (f"inorder: error: no inorder home at {tmp_path / '.inorder'} (neither "
                                   f"{tmp_path / '.inorder' / 'landing'} nor {tmp_path / '.inorder' / 'store.duckdb'} "
                                   f"exists); the demo's home is {demo}: `export INORDER_HOME={demo}`")


# --- 2. a store knows its views

def store_contents(database: Path) -> dict[str, list]:
    """Every table of every schema, rows sorted: what no refused command may change."""
    con = duckdb.connect(str(database), read_only=True)
    try:
        tables = con.execute("SELECT schema_name, table_name FROM duckdb_tables() ORDER BY ALL").fetchall()
        return {f"{s}.{t}": sorted(map(repr, con.execute(f'SELECT * FROM "{s}"."{t}"').fetchall())) for s, t in tables}
    finally:
        con.close()


@pytest.fixture(scope="module")
def shop_store(tmp_path_factory) -> Path:
    """A home whose store holds the shop's views, with an archived batch."""
    home = tmp_path_factory.mktemp("views") / "home"
    env = clean_environment(home, "shop.views", as_a_user=True)
    inorder(env, "init", str(home))
    inorder(env, "generate", "--domain", "shop", "--out", str(home / "landing"), "--events", "60", "--streams", "5",
            "--batches", "1")
    with Store.open(Home.of(Settings(), home), load_views("shop.views")) as store:
        from pipelines.engine.ingest import ingest_landing
        from pipelines.facade import home_source, now_us

        ingest_landing(store, Home.of(Settings(), home), home_source(Home.of(Settings(), home)), now_us(None))
    return home


COMMANDS = [("run", "--now", NOW), ("status",), ("errors",), ("pending",), ("retry", "--view", "accounts", "--all"),
            ("skip", "--view", "accounts", "--all"), ("rebuild", "accounts"), ("publish",)]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_every_command_refuses_views_the_store_does_not_hold_and_writes_nothing(shop_store, command):
    before = store_contents(shop_store / "store.duckdb")
    done = inorder(clean_environment(shop_store, "views", as_a_user=True), *command, code=5)
    assert_started_no_server(shop_store, done)
    assert done.stderr.splitlines()[-1] == (
        "inorder: refused: the store holds the views customers, order_items, orders, shop_daily, but INORDER_VIEWS "
        "loaded account_activity, accounts, daily_totals: none of them is in the store. Set INORDER_VIEWS=shop.views, "
        "the module of the store's views (or point INORDER_HOME at the right home); nothing was written")
    assert store_contents(shop_store / "store.duckdb") == before


@pytest.mark.parametrize("command", [("run", "--now", NOW), ("status",), ("pending",)], ids=lambda c: c[0])
def test_views_added_to_a_store_holding_others_are_refused_unless_named(shop_store, command):
    before = store_contents(shop_store / "store.duckdb")
    done = inorder(clean_environment(shop_store, "shop.views,views", as_a_user=True), *command, code=5)
    assert_started_no_server(shop_store, done)
    assert done.stderr.splitlines()[-1].endswith(
        "account_activity, accounts, daily_totals would be added to it. Add them explicitly with `inorder run "
        "--add-views account_activity,accounts,daily_totals`, or leave them out of INORDER_VIEWS; nothing was written")
    assert store_contents(shop_store / "store.duckdb") == before


def test_the_dagster_code_location_refuses_foreign_views_when_it_loads(shop_store):
    # what Dagster does when it loads the location: import the module, then call its `defs`
    env = clean_environment(shop_store, "views", as_a_user=True)
    done = subprocess.run([sys.executable, "-c", "from inorder.definitions import defs; defs()"], cwd=ROOT, text=True,
                          capture_output=True, env=env, timeout=300)
    assert done.returncode != 0
    assert "ViewSetMismatch: the store holds the views customers, order_items, orders, shop_daily, but " \
           "INORDER_VIEWS loaded account_activity, accounts, daily_totals: none of them is in the store" in done.stderr


def test_adding_and_removing_a_view_are_explicit(tmp_path):
    home = tmp_path / "home"
    env = clean_environment(home, "shop.views", as_a_user=True)
    inorder(env, "init", str(home))
    views = load_views("shop.views")
    orders = [v for v in views if v.name == "orders"]
    with Store.open(Home.of(Settings(), home), views):
        pass
    # loading only some of the store's views is allowed: the others wait, and status names them
    with Store.open_read_only(Home.of(Settings(), home), orders) as store:
        status = read_status(store.con, orders)
    assert status.not_loaded == ["customers", "order_items", "shop_daily"]
    assert "the store also holds customers, order_items, shop_daily, which INORDER_VIEWS did not load" in \
        format_status(status)
    with pytest.raises(Exception, match="would be added to it"):
        Store.open(Home.of(Settings(), home), [*views, *load_views("views")])
    with Store.open(Home.of(Settings(), home), [*views, *load_views("views")], adding=["accounts", "account_activity",
                                                                                 "daily_totals"]) as store:
        assert sorted(r[0] for r in store.con.execute("SELECT view FROM inorder.view_versions").fetchall()) == [
            "account_activity", "accounts", "customers", "daily_totals", "order_items", "orders", "shop_daily"]
    asked = inorder(env, "remove-view", "accounts", code=1)
    assert asked.stdout.startswith("would remove view accounts: its tables accounts")
    assert "main.accounts" in store_contents(home / "store.duckdb")
    inorder(env, "remove-view", "accounts", "--yes")
    contents = store_contents(home / "store.duckdb")
    assert "main.accounts" not in contents and "main.account_activity" in contents
    assert not [row for row in contents["inorder.view_versions"] if "'accounts'" in row]


# --- 3. unrouted records are reported, and recoverable



def loan_records(loans: int) -> list[dict]:
    """A lender's export in its own shape (`loan`, `version`): without source.json, no stream id is found."""
    records = []
    for i in range(loans):
        records.append({"loan": f"L{i}", "version": 1, "type": "Opened", "payload": {"amount": 100 + i}})
        records.append({"loan": f"L{i}", "version": 2, "type": "Repaid", "payload": {"amount": 30}})
    return records


def test_unrouted_records_are_reported_by_stream_type_and_reingested_once_source_json_is_fixed(spark, tmp_path):
    views = load_views("tests.loan_views")
    home = Home.of(Settings(), tmp_path / "home")
    home.landing.mkdir(parents=True)
    lines = [json.dumps(r) for r in loan_records(3)]
    # two lines in the default shape of another stream type: a stream type no view subscribes to
    lines += [json.dumps({"stream_id": "acct-1", "seq": s, "type": "Deposited", "payload": {}}) for s in (1, 2)]
    (home.landing / "loans-001.jsonl").write_text("\n".join(lines) + "\n")
    first = run(spark, home, views, now=datetime_of(NOW))
    assert [(r.records, r.malformed, r.stream_types) for r in first.ingested] == [(8, 6, {"account": 2})]
    with Store.open_read_only(home, views) as store:
        status = read_status(store.con, views)
    assert status.unrouted == {"account": 2} and status.subscribed == ["loan"]
    assert "unrouted: 2 records reached no view (2 of stream type 'account'); the views subscribe to loan" \
        in format_status(status)
    assert status_document(status, Positions(configured=False))["unrouted"] == {"account": 2}
    assert status.views[0].selected == 0

    # the terminal's warning for a batch none of whose records reached a view
    document = _run_document(CliRun(first.plan, ingested=first.ingested), views)
    assert document["unrouted"] == {"account": 2}
    assert _batch_warnings(document["batches"], ["loan"]) == [
        "batch loans-001: none of its 8 records reached a view: 6 malformed (`inorder errors --batch loans-001` says "
        "why); 2 of stream types account, which no view subscribes to (they subscribe to loan). If source.json maps "
        "them wrong, fix it, then `inorder reingest loans-001`"]

    (home.root / "source.json").write_text(json.dumps({"name": "loan", "stream_id": "loan", "seq": "version"}))
    done = reingest_batches(spark, home, views, ["loans-001"], now=datetime_of("2026-11-02T00:05:00Z"))
    (again,), stats = done.entries, done.projection
    # the 8 undelivered lines (6 malformed, 2 unrouted) inspected again: the loans now reach the view, and the
    # two `acct-1` lines, read with the loan mapping, have no `loan` field: malformed this time
    assert (again.batch_id, again.reingest_of, again.records, again.malformed) == ("loans-001@reingest-2", 1, 8, 2)
    assert stats.by_view["loan_book"]["applied"] == 6
    with Store.open_read_only(home, views) as store:
        con = store.con
        loans = con.execute("SELECT loan_id, owed, events FROM loans ORDER BY loan_id").fetchall()
        assert loans == [(f"L{i}", 100 + i - 30, 2) for i in range(3)]
        status = read_status(con, views)
        ledger = con.execute("SELECT batch_id, received_at::VARCHAR, records, malformed, normalised, selected, unrouted "
                             "FROM inorder.batches ORDER BY entry_idx").fetchall()
    assert ledger == [("loans-001", "2026-11-02 00:00:00+00", 8, 6, 2, 0, 2),
                      ("loans-001@reingest-2", "2026-11-02 00:05:00+00", 8, 2, 6, 6, 0)]
    # each line counted once: 8 records, of which the 2 still malformed
    assert (status.batches, status.records, status.malformed, status.normalised) == (1, 8, 2, 6)
    assert status.unrouted == {} and status.reingested == [("loans-001", "loans-001@reingest-2", 8)]
    v = status.views[0]
    assert v.conserved and v.selected == 6 and v.outcomes["applied"] == 6

    # nothing left that the mapping delivers: a second re-ingest records nothing, and changes nothing
    before = store_contents(home.database)
    results = reingest_batches(spark, home, views, ["loans-001"], now=datetime_of("2026-11-02T00:06:00Z")).entries
    assert results == [] and store_contents(home.database) == before

    # the archive replays to the same view: a rebuild with the recorded logical times
    from pipelines.facade import rebuild

    rebuild(spark, home, views, views[0])
    with Store.open_read_only(home, views) as store:
        assert store.con.execute("SELECT loan_id, owed, events FROM loans ORDER BY loan_id").fetchall() == loans


def test_a_reingest_refuses_a_landing_file_that_changed_or_is_gone(spark, tmp_path):
    views = load_views("tests.loan_views")
    home = Home.of(Settings(), tmp_path / "home")
    home.landing.mkdir(parents=True)
    (home.landing / "loans-001.jsonl").write_text(json.dumps(loan_records(1)[0]) + "\n")
    run(spark, home, views, now=datetime_of(NOW))
    before = store_contents(home.database)
    with pytest.raises(Exception, match="no archived batch 'loans-009'"):
        reingest_batches(spark, home, views, ["loans-009"])
    (home.landing / "loans-001.jsonl").write_text(json.dumps(loan_records(2)[2]) + "\n")
    with pytest.raises(Exception, match="changed since it was ingested"):
        reingest_batches(spark, home, views, ["loans-001"])
    (home.landing / "loans-001.jsonl").unlink()
    with pytest.raises(Exception, match="its landing file .* is gone"):
        reingest_batches(spark, home, views, ["loans-001"])
    assert store_contents(home.database) == before


def datetime_of(text: str):
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_home_records_its_views_so_a_new_shell_needs_nothing_exported(tmp_path):
    home = tmp_path / "home"
    no_views = clean_environment(home, as_a_user=True)
    created = inorder(no_views, "init", str(home), "--views", "shop.views")
    assert f"recorded its views in {home / 'views.txt'}" in created.stdout
    status = inorder(no_views, "status", "--json")  # a new shell: INORDER_VIEWS unset
    assert [v["view"] for v in json.loads(status.stdout)["views"]] == ["customers", "order_items", "orders", "shop_daily"]
    refused = inorder({**no_views, "INORDER_VIEWS": "views"}, "status", code=5)  # the variable wins, and is refused
    assert "the store holds the views customers, order_items, orders, shop_daily" in refused.stderr
    other = inorder(no_views, "init", str(home), "--views", "views", code=1)
    assert "records the views 'shop.views', not 'views'" in other.stderr
    assert (home / "views.txt").read_text().splitlines()[-1] == "shop.views"


def test_mistyped_arguments_get_the_clis_own_line_with_a_suggestion(shop_store):
    env = clean_environment(shop_store, "shop.views", as_a_user=True)
    typo = inorder(env, "stauts", code=2)
    assert typo.stderr.splitlines()[-1].endswith("did you mean 'status'? (`inorder --help` lists the options)")
    negative = inorder(env, "errors", "--limit", "-1", code=2)
    assert negative.stderr.splitlines()[-1] == \
        "inorder errors: error: argument --limit: -1 is negative: give 0 or more " \
        "(`inorder errors --help` lists the options)"
    batch = inorder(env, "errors", "--batch", "nosuch", code=1)
    assert batch.stderr.splitlines()[-1] == \
        "inorder: error: no batch 'nosuch' in the ingest log (`inorder status` lists the batches)"
    view = inorder(env, "pending", "--view", "orderz", code=1)
    assert view.stderr.splitlines()[-1] == (
        "inorder: error: no view named 'orderz'; did you mean 'orders'? (known: customers, order_items, orders, "
        "shop_daily)")
