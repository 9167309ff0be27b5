"""The Dagster code location: built from a view set and a home, and nothing read at import."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg

from pipelines.registry import load_views
from pipelines.store.database import Store
from tests.domains import BANK_VIEWS

ROOT = Path(__file__).resolve().parents[2]


def test_definitions_load():
    from inorder.definitions import defs

    assert defs().resolve_all_asset_keys() is not None


def test_definitions_are_built_from_the_given_views_and_home_without_any_environment(
        tmp_path, home, monkeypatch, clean_env):
    from inorder.definitions import build_definitions

    monkeypatch.chdir(tmp_path)  # a home read from the environment would be ./.inorder
    helpdesk = load_views("tests.helpdesk_views")
    bank, other = build_definitions(BANK_VIEWS, home), build_definitions(helpdesk, home)
    keys = {k.to_user_string() for k in bank.resolve_asset_graph().get_all_asset_keys()}
    assert keys == {"event_batches", "errors", "gaps", *(v.name for v in BANK_VIEWS)}
    assert {k.to_user_string() for k in other.resolve_asset_graph().get_all_asset_keys()} == \
        {"event_batches", "errors", "gaps", "helpdesk"}  # built twice, two view sets: nothing cached
    # a run of these definitions writes the home they were given
    (home.landing / "b1.jsonl").write_text('{"stream_id": "a", "seq": 1, "type": "AccountOpened"}\n')
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("event_batches", ["b1"])
    assert bank.resolve_job_def("ingest_batch").execute_in_process(instance=instance, partition_key="b1").success
    with Store.open_read_only(home) as store:
        assert store.con.execute("SELECT batch_id, status FROM inorder.ingest_log").fetchall() == [("b1", "archived")]
    assert not (tmp_path / ".inorder").exists()


def test_importing_the_dagster_layer_reads_no_environment_and_loads_no_views():
    """Neither the home nor the views are read when the modules are imported (INORDER_VIEWS names a module
    that does not exist): only when Dagster calls `defs`, or a command builds its definitions."""
    script = textwrap.dedent("""
        import os
        from collections.abc import MutableMapping

        read = []

        class Watched(MutableMapping):  # os.environ, noting the variables read one by one (`get`, as inorder does)
            def __init__(self, env):
                self.env = env
            def get(self, key, default=None):
                read.append(key)
                return self.env.get(key, default)
            def __getitem__(self, key):
                return self.env[key]
            def __setitem__(self, key, value):
                self.env[key] = value
            def __delitem__(self, key):
                del self.env[key]
            def __iter__(self):
                return iter(self.env)
            def __len__(self):
                return len(self.env)
            def copy(self):
                return dict(self.env)

        import pipelines.registry, pipelines.store.database

        def refuse(*args, **kwargs):
            raise AssertionError("loaded at import")

        pipelines.registry.load_views = refuse
        pipelines.store.database.Home.of = refuse
        os.environ = Watched(os.environ)
        import assets, assets.checks, assets.ingest, assets.jobs, assets.schedules, assets.sensors, assets.views
        import resources, inorder.definitions, inorder.dagster_runs
        print(sorted(set(read) & {"INORDER_HOME", "INORDER_VIEWS", "INORDER_LANDING", "INORDER_ARCHIVE",
                                  "INORDER_DATABASE", "DAGSTER_HOME"}))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "INORDER_HOME": "/nonexistent", "INORDER_VIEWS": "no_such_module"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
