"""Shared fixtures: one local Spark session for the whole test run."""

from __future__ import annotations

import json
import os
import sys

import pytest

import tests.profiles  # noqa: F401 - registers and loads the Hypothesis profile
from scripts.cluster import QUICK_JVM

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# every `inorder` process a test starts gets a quick-starting driver JVM (C1 only, serial GC): about 4 s
# less per `inorder run` on 2 cores. Tests check behaviour; the benchmarks measure speed, without it.
os.environ.setdefault("INORDER_SPARK_CONF", json.dumps({"spark.driver.extraJavaOptions": QUICK_JVM}))


@pytest.fixture(scope="session")
def spark():
    from pipelines.spark.session import spark_session

    # the session the whole run shares keeps the JVM's optimising compiler (no QUICK_JVM)
    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g",
                                         "spark.driver.extraJavaOptions": ""})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server for the whole test run (bench/postgres.py): its libpq connection string.
    Never skipped: without the server binaries the tests that need it fail, saying how to install them."""
    from bench.postgres import PostgresServer

    with PostgresServer() as server:
        yield server.dsn
