"""No process-wide state at import or as a side effect (issue 25 item 6): importing every module of
`pipelines/` and starting nothing changes neither the environment, nor the warning filters, nor the
csv module's field size limit; reading a CSV file leaves that limit as it was; and `spark_session()`
starts a local session (whose Python workers run this interpreter) without writing the environment.

Each check runs in a fresh interpreter, so what other tests imported or set does not hide a change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# what Python and the libraries pipelines/ stands on do to the process as they are imported (numpy adds
# warning filters of its own): imported before the snapshot, they are not pipelines/' doing
SNAPSHOT = """
import csv, importlib, json, os, pkgutil, sys, warnings
import duckdb, msgspec, numpy, pandas, pyarrow, pyarrow.parquet, pyspark.sql
def snapshot():
    return dict(os.environ), list(warnings.filters), csv.field_size_limit()
def changes(before):
    env, filters, limit = before
    return {"environ": sorted(k for k in set(env) | set(os.environ) if env.get(k) != os.environ.get(k)),
            "filters": [str(f) for f in warnings.filters if f not in filters] + [str(f) for f in filters if f not in warnings.filters],
            "field_size_limit": [limit, csv.field_size_limit()] if limit != csv.field_size_limit() else []}
"""


def run_fresh(body: str, env: dict[str, str] | None = None) -> dict:
    code = SNAPSHOT + textwrap.dedent(body)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env={**(os.environ if env is None else env), "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_every_pipelines_module_changes_no_process_state():
    found = run_fresh("""
        before = snapshot()
        import pipelines
        names = [m.name for m in pkgutil.walk_packages(pipelines.__path__, "pipelines.")]
        for name in names:
            importlib.import_module(name)
        print(json.dumps({"modules": len(names), **changes(before)}))
    """)
    assert found.pop("modules") > 30
    assert found == {"environ": [], "filters": [], "field_size_limit": []}


def test_reading_csv_with_a_field_over_the_default_limit_leaves_the_limit_as_it_was(tmp_path):
    found = run_fresh(f"""
        from pipelines.engine.normalise import SourceMapping, inspect_file
        from pathlib import Path
        path = Path({str(tmp_path / "big.csv")!r})
        big = "x" * (csv.field_size_limit() + 1000)  # over the csv module's default 128 KiB limit
        path.write_text("stream_id,seq,type,note\\nacc-1,1,Opened," + big + "\\n")
        before = snapshot()
        batch = inspect_file(path, "b1", 0, SourceMapping(max_record_bytes=1 << 20))
        print(json.dumps({{"messages": batch.messages.num_rows, "malformed": len(batch.malformed), **changes(before)}}))
    """)
    assert found == {"messages": 1, "malformed": 0, "environ": [], "filters": [], "field_size_limit": []}


def test_spark_session_writes_no_environment_and_its_workers_run_this_python():
    # none of the variables the session used to set for itself: it must do without them
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP")}
    env["PATH"] = "/usr/bin:/bin"  # no `python3` of this environment on the path for pyspark to fall back on
    found = run_fresh("""
        from pipelines.spark.session import spark_session
        import pyarrow as pa
        from pyspark.sql.pandas.types import from_arrow_schema
        before = snapshot()
        spark = spark_session("local[1]")
        # pyspark's own context publishes these two for its driver-side sockets, whoever starts it
        after_start = changes(before)
        after_start["environ"] = [k for k in after_start["environ"]
                                  if k not in ("SPARK_AUTH_SOCKET_TIMEOUT", "SPARK_BUFFER_SIZE")]
        def python_of(batches):
            import sys
            for batch in batches:
                yield pa.RecordBatch.from_pydict({"python": [sys.executable] * batch.num_rows})
        frame = spark.createDataFrame(pa.table({"n": [1, 2]}))
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            pythons = frame.mapInArrow(python_of, from_arrow_schema(pa.schema([("python", pa.string())]))).toArrow()
        print(json.dumps({"pythons": sorted(set(pythons.column("python").to_pylist())),
                          "driver_host": spark.conf.get("spark.driver.host"), **after_start}))
        spark.stop()
    """, env)
    assert found == {"pythons": [sys.executable], "driver_host": "127.0.0.1",
                     "environ": [], "filters": [], "field_size_limit": []}


def test_the_pandas_notice_is_dropped_in_a_pass_only():
    """pandas_notice_quiet is what the pass's mapInArrow calls run in (pipelines/engine/spark_pass.py: _mapped)."""
    import warnings

    from pipelines.spark.session import pandas_notice_quiet

    notice = "PySpark does not yet fully support pandas >= 3.0.0. Some features may not work correctly."
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pandas_notice_quiet():
            warnings.warn(notice, FutureWarning)  # what pyspark says on each mapInArrow
            warnings.warn("another FutureWarning", FutureWarning)
        warnings.warn(notice, FutureWarning)
    assert [str(w.message) for w in caught] == ["another FutureWarning", notice]
    assert warnings.filters == before


def test_validating_a_view_with_great_expectations_changes_no_environment():
    found = run_fresh("""
        import great_expectations  # what GX does to the process as it is imported is GX's own
        before = snapshot()
        from tests.expectations_reference import validate_view_on_pandas
        from views.accounts import VIEW
        con = duckdb.connect()
        con.execute("CREATE TABLE accounts (account_id VARCHAR, owner VARCHAR, balance DECIMAL(18,2), "
                    "status VARCHAR, version BIGINT, event_count BIGINT)")
        con.execute("INSERT INTO accounts VALUES ('a1', 'ann', 5, 'open', 1, 1)")
        evaluated, failures = validate_view_on_pandas(con, VIEW)
        print(json.dumps({"evaluated": evaluated > 0, "failures": len(failures), **changes(before)}))
    """)
    assert found == {"evaluated": True, "failures": 0, "environ": [], "filters": [], "field_size_limit": []}
