"""A dashboard reading a view while it is rebuilt: `python -m tests.view_reader DATABASE OUT STOP TABLE...`.

Again and again until the file STOP exists: open the DuckDB file read-only (waiting while the
writer holds it, as every reader does), read each table's row count and an order-free checksum of
its rows in one snapshot, close, and append them to OUT as one JSON line."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import duckdb


def snapshot(con: duckdb.DuckDBPyConnection, tables: list[str]) -> dict[str, list]:
    """table -> [rows, checksum] (the sum of every row's hash: the same for the same multiset of rows)."""
    return {t: list(con.execute(f'SELECT count(*), coalesce(sum(hash(r)), 0)::VARCHAR FROM "{t}" r').fetchone())
            for t in tables}


def read_loop(database: Path, out: Path, stop: Path, tables: list[str]) -> None:
    with out.open("a") as lines:
        while not stop.exists():
            try:
                con = duckdb.connect(str(database), read_only=True)
            except duckdb.IOException:  # the writer holds the file: look again in a moment
                time.sleep(0.01)
                continue
            started = time.monotonic()
            try:
                con.execute("BEGIN TRANSACTION")  # one snapshot for every table
                read = snapshot(con, tables)
            finally:
                con.close()
            lines.write(json.dumps({"at": time.time(), "tables": read}) + "\n")
            lines.flush()
            time.sleep(max(0.02, 2 * (time.monotonic() - started)))  # let the writer in between reads


if __name__ == "__main__":
    read_loop(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:])
