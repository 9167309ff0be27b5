"""The Python daemon of a local Spark session's workers (`spark.python.daemon.module`): pyspark's own, but importing
pyspark from its installed package, not from the copy Spark puts first on the workers' path.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` and py4j's zip ahead of the workers' path. Python keeps no bytecode
for modules in a zip, so each worker it forks compiles pyspark's modules again: about a second of CPU per worker,
paid by every `inorder` process's first pass. A local session's workers run the interpreter that started its JVM,
whose `SPARK_HOME` is the installed pyspark those zips were made from, so the installed copy is the same code, with
its bytecode cached. Nothing else is imported here: the daemon forks its workers, and a module that starts threads
(pandas, pyarrow) must not be imported before a fork."""

import os
import runpy
import sys

if __name__ == "__main__":
    sparks_zips = os.path.realpath(os.path.join(os.environ["SPARK_HOME"], "python", "lib"))  # pyspark.zip, py4j

    sys.path[:] = [entry for entry in sys.path if os.path.dirname(os.path.realpath(entry)) != sparks_zips]
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)
