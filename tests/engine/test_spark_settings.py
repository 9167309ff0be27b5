"""Which sessions get the archive's files and which get shipped messages and code (no Spark needed), and which
pyspark a local session's Python workers import."""

from __future__ import annotations

import zipfile
from types import SimpleNamespace

import pyspark
import pytest

from pipelines.spark import session as sp
from pipelines.config import Settings
from pipelines.store.database import Home


class Context(SimpleNamespace):
    """A Spark context's stand-in that, like pyspark's, can be weakly referenced (session.py keeps what it
    shipped to a context in a map of its own, not on the context)."""


def classic(master: str) -> SimpleNamespace:
    return SimpleNamespace(sparkContext=SimpleNamespace(master=master))


@pytest.mark.parametrize("master, setting, shared", [
    ("local[*]", None, True), ("local[2]", "auto", True), ("local[*]", "0", False),
    ("spark://10.0.0.1:7077", None, False), ("yarn", "", False), ("spark://10.0.0.1:7077", "1", True),
])
def test_archive_shared(master, setting, shared):
    settings = Settings.from_env({} if setting is None else {"INORDER_ARCHIVE_SHARED": setting})
    assert sp.archive_shared(classic(master), settings) is shared


def test_code_is_shipped_once_per_remote_context_and_never_locally(tmp_path):
    home, added = Home.of(Settings(), tmp_path / "home"), []
    remote = SimpleNamespace(sparkContext=Context(master="spark://10.0.0.1:7077", addPyFile=added.append))
    path = sp.ship_code(remote, home)
    assert sp.ship_code(remote, home) == path and added == [str(path)]
    names = zipfile.ZipFile(path).namelist()
    assert "pipelines/engine/executor.py" in names and "views/accounts.py" in names
    local = SimpleNamespace(sparkContext=Context(master="local[*]", addPyFile=added.append))
    assert sp.ship_code(local, home) is None and len(added) == 1
    installed = Home.of(Settings(ship_code=False), tmp_path / "home")
    other = SimpleNamespace(sparkContext=Context(master="yarn", addPyFile=added.append))
    assert sp.ship_code(other, installed) is None and len(added) == 1


def test_the_view_modules_of_inorder_views_are_shipped_with_the_engine(monkeypatch, tmp_path):
    """A user's module outside the repository goes in the executors' zip (the whole top-level package)."""
    (tmp_path / "carrier").mkdir()
    (tmp_path / "carrier" / "__init__.py").write_text("")
    (tmp_path / "carrier" / "views.py").write_text(
        "from pipelines.view import Column, Table, View\n"
        "V = View('carrier', (Table.per_stream('parcels', key='parcel_id', columns={'parcel_id': Column(str)}),),"
        " ('parcel',))\n"
        "@V.on('Sent')\n"
        "def sent(event, tables):\n"
        "    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    names = zipfile.ZipFile(sp.code_zip(Home.of(Settings(views="carrier.views"), tmp_path / "home"))).namelist()
    assert {"pipelines/engine/executor.py", "carrier/__init__.py", "carrier/views.py"} <= set(names)
    assert "views/accounts.py" not in names  # the bank's views are not this deployment's
    import carrier.views

    # a view the caller made (not loaded by the registry) brings its own modules whatever the settings say
    names = zipfile.ZipFile(sp.code_zip(Home.of(Settings(), tmp_path / "home"), [carrier.views.V])).namelist()
    assert {"carrier/views.py", "views/accounts.py"} <= set(names)


@pytest.mark.parametrize("conf, local, live_cores, partitions", [
    ({}, True, None, sp.LOCAL_SHUFFLE_PARTITIONS),  # local: today's few partitions, whatever the machine
    ({"spark.sql.shuffle.partitions": "7"}, True, None, 7),  # the user's setting wins, local or not
    ({"spark.sql.shuffle.partitions": "7", "spark.default.parallelism": "64"}, False, 16, 7),
    ({"spark.default.parallelism": "64", "spark.cores.max": "8"}, False, 16, 64),
    ({"spark.cores.max": "8", "spark.executor.instances": "10", "spark.executor.cores": "4"}, False, 16, 16),
    ({"spark.executor.instances": "10", "spark.executor.cores": "4"}, False, 2, 80),
    ({"spark.executor.instances": "10"}, False, None, 20),  # one core per executor unless it says more
    ({"spark.dynamicAllocation.enabled": "true", "spark.dynamicAllocation.maxExecutors": "6",
      "spark.executor.instances": "2", "spark.executor.cores": "3"}, False, None, 36),  # its largest size
    ({"spark.dynamicAllocation.enabled": "true", "spark.executor.cores": "3"}, False, 5, 10),  # no size: live cores
    ({"spark.sql.shuffle.partitions": ""}, False, 12, 24),  # an empty setting is no setting
    ({}, False, None, sp.LOCAL_SHUFFLE_PARTITIONS),  # a Connect session on a cluster that says nothing
])
def test_shuffle_partitions_follow_the_clusters_cores_unless_the_user_set_them(conf, local, live_cores, partitions):
    settings = {key: conf.get(key) for key in sp.CORES_SETTINGS}
    assert sp.planned_shuffle_partitions(settings, local, live_cores) == partitions


def test_a_session_gets_its_planned_shuffle_partitions_unless_the_user_set_them():
    class Conf(dict):
        def get(self, key, default=None):
            return super().get(key, default)

        def set(self, key, value):
            self[key] = value

    def session(**conf):
        return SimpleNamespace(conf=Conf(conf), sparkContext=SimpleNamespace(master="yarn", defaultParallelism=3))

    remote = session(**{"spark.executor.instances": "5", "spark.executor.cores": "2"})
    sp._set_shuffle_partitions(remote)
    assert remote.conf["spark.sql.shuffle.partitions"] == "20" and sp.shuffle_partitions(remote) == 20
    unsized = session()
    sp._set_shuffle_partitions(unsized)
    assert sp.shuffle_partitions(unsized) == 6  # the executors' cores Spark counts now
    chosen = session(**{"spark.sql.shuffle.partitions": "9", "spark.executor.instances": "5"})
    sp._set_shuffle_partitions(chosen)
    assert sp.shuffle_partitions(chosen) == 9


def _imported_pyspark(_):
    import pyspark

    yield pyspark.__file__


def test_a_local_sessions_python_workers_import_the_installed_pyspark_not_sparks_zip(spark):
    """The installed package's bytecode is cached; Python compiles a zip's modules again in every worker the
    daemon forks, a second of CPU each (pipelines/spark/daemon.py)."""
    [imported] = spark.sparkContext.parallelize([0], 1).mapPartitions(_imported_pyspark).collect()
    assert imported == pyspark.__file__
