"""The Python daemon of the workers of a session on this machine (`spark.python.daemon.module`): pyspark's own,
importing pyspark from its installed package, whose bytecode is cached, and not from the zip Spark puts first on the
workers' path, which every worker compiled again (docs/OPERATIONS.md). It imports nothing else before the daemon
forks its workers: pandas and pyarrow start threads."""

import os
import runpy
import sys

if __name__ == "__main__":
    sparks_zips = os.path.realpath(os.path.join(os.environ["SPARK_HOME"], "python", "lib"))  # pyspark's, py4j's
    sys.path[:] = [entry for entry in sys.path if os.path.dirname(os.path.realpath(entry)) != sparks_zips]
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)
