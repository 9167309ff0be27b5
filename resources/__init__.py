"""Typed Dagster resources. Nothing is read at import time: environment variables are read when used."""

from typing import Optional

import dagster as dg
from pydantic import Field

from pipelines.store import Home


class SparkResource(dg.ConfigurableResource):
    """The Spark session: `local[*]`, a `spark://` master or an `sc://` Spark Connect endpoint.

    One session per process, shared by every step of a run (jobs use the in-process executor)."""

    master: Optional[str] = Field(default=None, description="Spark master URL; default INORDER_SPARK_MASTER or local[*]")
    conf: dict[str, str] = Field(default_factory=dict, description="extra Spark settings, over INORDER_SPARK_CONF and inorder's defaults")

    def session(self):
        from pipelines.spark import spark_session

        return spark_session(self.master, self.conf)  # None: INORDER_SPARK_MASTER or local[*]


class ReadStoreResource(dg.ConfigurableResource):
    """The DuckDB read store holding engine state and the views' tables."""

    home: Optional[str] = Field(default=None, description="INORDER_HOME; default $INORDER_HOME or ./.inorder")
    database: Optional[str] = Field(default=None, description="DuckDB file; default $INORDER_DATABASE or HOME/store.duckdb")
    lock_wait_seconds: float = Field(default=900.0, description="how long a step waits for another writer")


class FoldersResource(dg.ConfigurableResource):
    """Where batches land and where their normalised archive is kept."""

    landing: Optional[str] = Field(default=None, description="default $INORDER_LANDING or HOME/landing")
    archive: Optional[str] = Field(default=None, description="default $INORDER_ARCHIVE or HOME/archive")


def inorder_home(store: ReadStoreResource, folders: FoldersResource) -> Home:
    """Runs queue on the store's lock rather than fail: Dagster pools keep them apart, the lock is the backstop."""
    home = Home.from_env(store.home, folders.landing, folders.archive, store.database)
    home.lock_wait_seconds = store.lock_wait_seconds
    return home


RESOURCES = {"spark": SparkResource(), "read_store": ReadStoreResource(), "folders": FoldersResource()}
