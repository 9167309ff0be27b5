"""The Spark session: local[*] by default, or any master / Spark Connect endpoint by configuration."""

from __future__ import annotations

import os
import sys
import warnings
from typing import Mapping

from pyspark.sql import SparkSession

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.memory": "4g",
    "spark.ui.showConsoleProgress": "false",
    "spark.python.worker.reuse": "true",
}


def spark_session(master: str | None = None, conf: Mapping[str, str] | None = None) -> SparkSession:
    """Get (or reuse) the session. `master` is `local[*]`, `spark://host:port` or `sc://host:port`.

    Read from INORDER_SPARK_MASTER when not given.
    """
    master = master or os.environ.get("INORDER_SPARK_MASTER", "local[*]")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if master.startswith("sc://"):
        builder = SparkSession.builder.remote(master)
        settings = dict(conf or {})
    else:
        builder = SparkSession.builder.master(master).appName("inorder")
        settings = {**DEFAULT_CONF, **(conf or {})}
    for key, value in settings.items():
        builder = builder.config(key, value)
    # pyspark warns about pandas 3 on every Arrow call; inorder exchanges Arrow, not pandas
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
    session = builder.getOrCreate()
    if not master.startswith("sc://"):
        session.sparkContext.setLogLevel("ERROR")
    return session


def shuffle_partitions(spark: SparkSession) -> int:
    return int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
