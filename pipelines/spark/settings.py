"""Spark settings both the session (session.py) and the warm server (server.py) start from."""

from __future__ import annotations

from pathlib import Path

from pipelines.spark.class_archive import java_options

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # the pass output's times as Parquet's UTC-adjusted microseconds (DuckDB reads them as TIMESTAMPTZ), not INT96
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.driver.memory": "2g",  # local mode: the one JVM; pass output goes to files, not its heap
    "spark.ui.showConsoleProgress": "false",
    "spark.python.worker.reuse": "true",
}
# A session whose Python workers run on this machine (local[…], the warm server): they import pyspark from its
# installed package, not from the zip Spark puts first on their path (pipelines/spark/daemon.py)
WORKERS_DAEMON = "pipelines.spark.daemon"
LOCAL_WORKERS_CONF = {"spark.python.daemon.module": WORKERS_DAEMON}
# A Spark Connect session's own settings. Its plan cache keys resolved plans by the client's plan ids, which
# restart at 0 in every process; inorder's processes reattach to one shared session (pipelines/spark/session.py),
# so a later process's read of a rewritten file got an earlier process's resolved schema (issue 32: a
# view's state column went missing, and the walk saw no stored rows). Plans are resolved anew instead.
CONNECT_SESSION_CONF = {"spark.connect.session.planCache.enabled": "false"}
# the driver JVM's log4j configuration unless INORDER_DEBUG is set: errors only, on stderr
QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")


def driver_java_options(user_options: str | None, quiet: bool) -> str:
    """The driver JVM's options: the class-data archive when it was made (class_archive.py), the quiet log4j
    configuration unless INORDER_DEBUG is set, then the user's own `spark.driver.extraJavaOptions` (last: theirs win)."""
    quiet_log = f"-Dlog4j2.configurationFile={QUIET_LOG4J.as_uri()}" if quiet else None
    return " ".join(filter(None, (java_options(), quiet_log, user_options)))
