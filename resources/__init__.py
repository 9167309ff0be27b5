"""Typed Dagster resources. Nothing is read at import time: a field left unset takes its environment
variable when a run (or a sensor's evaluation) sets the resource up."""

from dataclasses import replace
from typing import Iterable, Optional

import dagster as dg
from pydantic import Field, PrivateAttr

from pipelines.config import Settings
from pipelines.store.database import Home, Store
from pipelines.view import View

DEFAULT_LOCK_WAIT_SECONDS = 900.0  # runs queue on the store's lock rather than fail: Dagster pools keep them apart


class SparkResource(dg.ConfigurableResource):
    """The Spark session: `local[*]`, a `spark://` master or an `sc://` Spark Connect endpoint.

    One session per process, shared by every step of a run (jobs use the in-process executor)."""

    master: Optional[str] = Field(default=None, description="Spark master URL; default INORDER_SPARK_MASTER or local[*]")
    conf: dict[str, str] = Field(default_factory=dict, description="extra Spark settings, over INORDER_SPARK_CONF and inorder's defaults")

    def session(self, home: Home | None = None, views: Iterable[View] = ()):
        from pipelines.spark.session import spark_session

        return spark_session(self.master, self.conf, home, tuple(views))  # None: INORDER_SPARK_MASTER or local[*]


class HomeResource(dg.ConfigurableResource):
    """The inorder home: where batches land, their normalised archive, and the DuckDB read store
    holding engine state and the views' tables. A field left unset takes its environment variable when
    the resource is set up (`Settings.from_env`, the Dagster side's edge), never at import."""

    root: Optional[str] = Field(default=None, description="INORDER_HOME; default $INORDER_HOME or ./.inorder")
    landing: Optional[str] = Field(default=None, description="default $INORDER_LANDING or HOME/landing")
    archive: Optional[str] = Field(default=None, description="default $INORDER_ARCHIVE or HOME/archive")
    database: Optional[str] = Field(default=None, description="DuckDB file; default $INORDER_DATABASE or HOME/store.duckdb")
    lock_wait_seconds: float = Field(default=DEFAULT_LOCK_WAIT_SECONDS,
                                     description="how long a step waits for another writer")
    _home: Optional[Home] = PrivateAttr(default=None)

    @classmethod
    def of(cls, home: Home, lock_wait_seconds: float = DEFAULT_LOCK_WAIT_SECONDS) -> "HomeResource":
        """The resource for a home already resolved (the CLI's, a test's)."""
        def text(path) -> Optional[str]:
            return None if path is None else str(path)

        return cls(root=str(home.root), landing=text(home.landing_dir), archive=text(home.archive_dir),
                   database=text(home.database_path), lock_wait_seconds=lock_wait_seconds)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._home = self._resolve()

    def _resolve(self) -> Home:
        return replace(Home.of(Settings.from_env(), self.root, self.landing, self.archive, self.database),
                       lock_wait_seconds=self.lock_wait_seconds)

    def home(self) -> Home:
        """The home, resolved once per run (a copy: callers may not change the resource's)."""
        return replace(self._home or self._resolve())

    def open_reader(self, views: Iterable[View] | None = None, wait_seconds: float | None = None) -> Store:
        """A read-only open of the store (refusing `views` it does not hold); `wait_seconds` caps how long
        opening waits while a writer holds the file (a sensor's evaluation has 60 s)."""
        home = self.home()
        if wait_seconds is not None:
            home = replace(home, file_wait_seconds=min(home.file_wait_seconds, wait_seconds))
        return Store.open_read_only(home, views)

    def open_writer(self, views: Iterable[View]) -> Store:
        """The store's writer (its lock waits up to `lock_wait_seconds` for another writer)."""
        return Store.open(self.home(), views)


def resources(home: "Home | HomeResource | None" = None) -> dict:
    """The code location's resources; `home` None: the environment's, read when a run sets them up."""
    if isinstance(home, Home):
        home = HomeResource.of(home)
    return {"spark": SparkResource(), "home": home or HomeResource()}
