"""A driver JVM that inorder starts maps Spark's classes from the archive the set-up made
(pipelines/spark/class_archive.py), rather than loading each from the jars: a cold start's largest cost."""

from __future__ import annotations

import subprocess
import sys

from pipelines.spark import class_archive
from tests.command import REPO, clean_environment

SESSION = """
import sys
from pipelines.spark.session import spark_session
spark = spark_session("local[1]", {"spark.driver.extraJavaOptions": "-Xlog:class+load=info:file=" + sys.argv[1]})
assert spark.range(3).count() == 3
spark.stop()
"""


def test_a_local_session_maps_sparks_classes_from_the_archive(tmp_path):
    made = class_archive.make()  # the set-up's step (scripts/setup.sh): a no-op once made
    assert made is not None and made.exists()
    loaded = tmp_path / "classes.log"
    subprocess.run([sys.executable, "-c", SESSION, str(loaded)], env=clean_environment(), cwd=REPO, check=True,
                   timeout=300, capture_output=True)
    lines = loaded.read_text().splitlines()
    mapped = sum("shared objects file (top)" in line for line in lines)
    assert mapped > 10_000 and mapped > 2 * (len(lines) - mapped), f"{mapped} of {len(lines)} classes mapped"
