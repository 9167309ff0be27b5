"""The `expectations` asset check at scale (issue 12): the views' GX expectations on large tables,
evaluated the old way and the new way, side by side.

    python -m bench.expectations [--rows 10000000] [--rounds 2] [--work DIR]
    python -m bench.expectations --rows 1000000,10000000

- **old**: GX 1.x validating each whole table on pandas (``SELECT * ... .df()``, then a pandas batch),
  what the check ran before issue 12: `pipelines.observe.expectations.validate_view_on_pandas`, the port of
  `assets.checks.validate_view` to a connection (tests/test_expectations.py holds them equal);
- **new**: `pipelines.observe.expectations.validate_view`, the same rules evaluated in DuckDB SQL, only the
  sample rows of a failing rule reaching pandas.

For each size, a DuckDB read store (cached under --work) holds the bank views' two big tables,
`accounts` and `account_activity`, with --rows rows each and a few planted violations of every kind of
rule (NULLs, values out of range, values outside the set, duplicated keys). The tables have the views'
columns and types but no primary key, so that the planted duplicate keys can exist: the check must
find them whatever the store enforces.

Each implementation runs the `accounts` and `account_activity` views' expectations in its own fresh
process, on a read-only connection as the asset check opens it, so each has its own peak RSS (the
process's ru_maxrss: Python, pandas, GX and DuckDB's memory alike; RSS after the imports is given
beside it). The runs alternate old/new over --rounds rounds; the table gives the median wall time and
its CPU time, and the worst peak RSS. Both implementations must return identical results, or the run
fails.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the planted violations, by rule: each is found by both implementations with these counts
ACTIVITY = """
CREATE TABLE account_activity AS
SELECT printf('acct-%08d', i // 10) AS account_id,
       CASE WHEN i = 101 THEN 0 ELSE i % 10 + 1 END::BIGINT AS "position",
       (i % 10 + 2)::BIGINT AS seq,
       CASE WHEN i = 202 THEN 'Refunded' WHEN i % 3 = 0 THEN 'Withdrawn' ELSE 'Deposited' END AS event_type,
       CASE WHEN i IN (303, {n} / 2, {n} - 7) THEN NULL WHEN i IN (404, 505) THEN 0
            ELSE ((i * 7919) % 100000 + 1) / 100 END::DECIMAL(18,2) AS amount,
       (((i * 104729) % 1000000) / 100)::DECIMAL(18,2) AS running_total
FROM range({n}) r(i) ORDER BY i
"""
ACCOUNTS = """
CREATE TABLE accounts AS
SELECT printf('acct-%08d', i) AS account_id,
       CASE WHEN i IN (11, {n} - 3) THEN NULL ELSE ['ada', 'bob', 'chen', 'dana', 'émile'][i % 5 + 1] END AS owner,
       CASE WHEN i = 22 THEN -5 ELSE ((i * 104729) % 10000000) / 100 END::DECIMAL(18,2) AS balance,
       CASE WHEN i = 33 THEN 'frozen' WHEN i % 7 = 0 THEN 'closed' ELSE 'open' END AS status,
       CASE WHEN i = 44 THEN 0 ELSE i % 50 + 1 END::BIGINT AS version,
       (i % 50 + 1)::BIGINT AS event_count
FROM range({n}) r(i) ORDER BY i
"""


def store(work: Path, rows: int) -> Path:
    """The read store of this size (built once, then reused)."""
    import duckdb

    path = work / f"expectations-{rows}.duckdb"
    if path.exists():
        return path
    work.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    started = time.perf_counter()
    con = duckdb.connect(str(partial))
    con.execute("SET preserve_insertion_order = true")
    con.execute(ACTIVITY.format(n=rows))
    con.execute(ACCOUNTS.format(n=rows))
    # a duplicated key of each table (the whole row again, far from the original)
    con.execute(f"INSERT INTO account_activity SELECT * FROM account_activity WHERE rowid = {rows // 3}")
    con.execute(f"INSERT INTO accounts SELECT * FROM accounts WHERE rowid = {rows // 3}")
    con.close()
    partial.rename(path)
    print(f"built {path} ({rows:,} rows a table) in {time.perf_counter() - started:.1f} s", flush=True)
    return path


def _rss_now() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def child(implementation: str, database: Path) -> dict:
    """One measured run, in this (fresh) process."""
    import warnings

    warnings.filterwarnings("ignore")
    from pipelines.store.database import connect
    from views.account_activity import VIEW as ACTIVITY_VIEW
    from views.accounts import VIEW as ACCOUNTS_VIEW

    from pipelines.observe import expectations

    run = expectations.validate_view_on_pandas if implementation == "old" else expectations.validate_view
    expectations._gx()  # GX is imported before the clock starts

    after_imports = _rss_now()
    con = connect(database, read_only=True, wait_seconds=60)  # as the asset check opens the store
    started, cpu = time.perf_counter(), time.process_time()
    results, per_view = {}, {}
    for view in (ACCOUNTS_VIEW, ACTIVITY_VIEW):
        t = time.perf_counter()
        results[view.name] = run(con, view)
        per_view[view.name] = round(time.perf_counter() - t, 3)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    con.close()
    return {"implementation": implementation, "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3),
            "per_view_seconds": per_view, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "rss_after_imports_bytes": after_imports, "results": results}


def measure(implementation: str, database: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.expectations", "--child", implementation,
                          "--database", str(database)], cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"the {implementation} run failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.expectations", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="10000000", help="rows of each table; a comma-separated list for several sizes")
    p.add_argument("--rounds", type=int, default=2, help="runs of each implementation per size (alternating)")
    p.add_argument("--work", default=str(ROOT / ".inorder" / "bench"), help="where the stores are cached")
    p.add_argument("--child", choices=("old", "new"), help=argparse.SUPPRESS)
    p.add_argument("--database", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, Path(args.database)), default=str))
        return

    mib = 1024 * 1024
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start", flush=True)
    lines = ["| rows a table | implementation | wall s (median) | CPU s | accounts s | account_activity s "
             "| peak RSS MiB | RSS after imports MiB | peak - after imports MiB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for rows in sorted(int(r.replace("_", "")) for r in args.rows.split(",")):
        database = store(Path(args.work), rows)
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        for round_no in range(args.rounds):
            for implementation in ("old", "new") if round_no % 2 == 0 else ("new", "old"):
                run = measure(implementation, database)
                runs[implementation].append(run)
                print(f"{rows:,} rows, round {round_no + 1}, {implementation}: {run['seconds']:.2f} s "
                      f"(CPU {run['cpu_seconds']:.2f} s), peak RSS {run['peak_rss_bytes'] / mib:,.0f} MiB",
                      flush=True)
        reference = runs["old"][0]["results"]
        if any(r["results"] != reference for rs in runs.values() for r in rs):
            raise SystemExit(f"{rows:,} rows: the implementations' results differ")
        for name, (evaluated, failures) in reference.items():
            found = [f"{f['expectation'].removeprefix('expect_')}"
                     f"({f['kwargs'].get('column') or f['kwargs'].get('column_list')})={f['unexpected_count']}"
                     for f in failures]
            print(f"  {name}: {evaluated} expectations, {len(failures)} failing: {', '.join(found)}")
        for implementation, rs in runs.items():
            median = statistics.median(r["seconds"] for r in rs)
            closest = min(rs, key=lambda r: abs(r["seconds"] - median))
            per_view = closest["per_view_seconds"]
            lines.append(
                f"| {rows:,} | {implementation} | {median:.2f} | {closest['cpu_seconds']:.2f} "
                f"| {per_view['accounts']:.2f} | {per_view['account_activity']:.2f} "
                f"| {max(r['peak_rss_bytes'] for r in rs) / mib:,.0f} "
                f"| {max(r['rss_after_imports_bytes'] for r in rs) / mib:,.0f} "
                f"| {max(r['peak_rss_bytes'] - r['rss_after_imports_bytes'] for r in rs) / mib:,.0f} |")
        print(f"  results identical: yes ({args.rounds} runs each)", flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
