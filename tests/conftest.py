"""Shared fixtures: one local Spark session for the whole test run."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark():
    from pipelines.spark import spark_session

    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server for the whole test run (tests/postgres.py): its libpq connection string.
    Never skipped: without the server binaries the tests that need it fail, saying how to install them."""
    from tests.postgres import PostgresServer

    with PostgresServer() as server:
        yield server.dsn
