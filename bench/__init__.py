"""The benchmark suite: `python -m bench [--quick] [--sizes ...]` (or `make bench` / `make bench-quick`).

Every comparison runs side by side in one worker process and one Spark session, and the table
reports ratios; absolute times are noted, but on a shared machine only the ratios mean much.
Modules: `data` (inputs), `measure` (timers, peak RSS), one module per case (`bulk` with the
Spark floor, `peer` for the DuckDB ordering peer, `state_peer` for the Spark one, `prior_art`,
`incremental`, `tick`, `freshness`), `worker` (runs a plan in one process), `report` (table, JSON,
chart) and `__main__` (the runner). `studies/` holds the before/after studies the suite does not run.
"""
