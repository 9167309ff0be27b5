"""The walk's speed in-process, no Spark: handler calls per CPU-second of the executor's body (a
partition's rows decoded, ordered, applied and written out as Arrow batches) over the bank views.

The messages are generated once (demos/bank.py) and normalised as the ingest does; each
checkout named on the command line then walks the same messages in a process of its own (PYTHONPATH set
to it), the checkouts taking turns round after round, so a slower machine moment costs both alike.
Each round is one partition holding every stream; a checkout's figure is its best round.

    python -m bench.studies.walk_speed [--events N] [--rounds R] BEFORE_CHECKOUT AFTER_CHECKOUT

prints, per checkout, the handler calls, the best CPU seconds and calls per CPU-second, then the
ratio of the last to the first.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# where the executor's body lives: the engine's rooms after the split of project.py, then before it
EXECUTOR_MODULES = ("pipelines.engine.executor", "pipelines.engine.project")
BATCH_ROWS = 10_000  # Spark's Arrow batches (spark.sql.execution.arrow.maxRecordsPerBatch)


def generate(folder: Path, events: int, streams: int, batches: int) -> list[Path]:
    from demos.bank import GeneratorConfig, generate as write_batches
    return write_batches(folder, GeneratorConfig(events=events, streams=streams, batches=batches))


def partition_input(files: list[Path]):
    """The files' messages as a partition's NEW rows, sorted as the shuffle sorts them, with the pass's
    views and entries."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pipelines.engine.normalise import SourceMapping, inspect_json_lines
    from pipelines.engine.order import PassEntry
    from pipelines.engine.pass_data import InputKind  # the checkout's own numbering
    from pipelines.registry import load_views

    views = load_views("views")
    tables, entries = [], []
    for entry_idx, path in enumerate(files, start=1):
        tables.append(inspect_json_lines(path.read_bytes(), path.stem, entry_idx, SourceMapping()).messages)
        entries.append(PassEntry(entry_idx, path.stem, "batch", 1_700_000_000_000_000 + entry_idx * 60_000_000))
    messages = pa.concat_tables(tables)
    routes = {t: ",".join(sorted(v.name for v in views if t in v.subscribes)) for t in
              pc.unique(messages["stream_type"]).to_pylist()}
    messages = messages.filter(pc.is_in(messages["stream_type"], pa.array([t for t, r in routes.items() if r])))
    rows = messages.num_rows
    table = messages.append_column("rec_type", pa.array([int(InputKind.NEW)] * rows, pa.int32())) \
        .append_column("view", pa.nulls(rows, pa.string())) \
        .append_column("views", pa.array([routes[t] for t in messages["stream_type"].to_pylist()], pa.string()))
    table = table.sort_by([("stream_id", "ascending"), ("entry_idx", "ascending"), ("line", "ascending")])
    walked = [v for v in views if any(v.name in r.split(",") for r in routes.values() if r)]
    from pyspark import cloudpickle  # the views as an executor gets them: copies, their handlers' modules its own
    walked = cloudpickle.loads(cloudpickle.dumps(walked))
    return table, {v.name: v for v in walked}, {v.name: list(entries) for v in walked}


def walk_once(table, views, entries) -> tuple[int, float]:
    """One partition's walk: its handler calls and CPU seconds."""
    import pyarrow.compute as pc
    from pipelines.engine.pass_data import OutputKind, output_schema
    executor = next(m for m in map(_module, EXECUTOR_MODULES) if m is not None)
    schema = output_schema(views.values())
    batches = table.to_batches(max_chunksize=BATCH_ROWS)
    started = time.process_time()
    out = list(executor.order_and_apply_partition(iter(batches), views, entries, 1, schema))
    cpu = time.process_time() - started
    calls = 0
    for batch in out:
        counts = batch.filter(pc.and_(pc.equal(batch["kind"], OutputKind.COUNT.value),
                                      pc.is_in(batch["name"], pc.cast(["applied", "handler_error"], "string"))))
        calls += pc.sum(counts["n"]).as_py() or 0
    return calls, cpu


def _module(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        return None


def child(folder: Path, rounds: int) -> None:
    """In the checkout's own process: walk the messages `rounds` times, print JSON figures."""
    table, views, entries = partition_input(sorted(folder.glob("*.jsonl")))
    walk_once(table.slice(0, 20_000), views, entries)  # warm: imports, first handler calls
    results = [walk_once(table, views, entries) for _ in range(rounds)]
    import pipelines
    print(json.dumps({"calls": results[0][0], "cpu": [cpu for _, cpu in results], "messages": table.num_rows,
                      "engine": pipelines.__file__}))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="+", type=Path)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--streams", type=int, default=3_000)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="turns each checkout takes")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, 1)
    with tempfile.TemporaryDirectory(prefix="walk_speed_") as tmp:
        folder = Path(tmp)
        generate(folder, args.events, args.streams, args.batches)
        figures: dict[Path, dict] = {}
        for _ in range(args.rounds):
            for checkout in args.checkouts:
                env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
                # this file run as a script: the checkout's own pipelines and views come first on the path
                done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(folder), "x"],
                                      cwd=checkout, env=env, check=True, capture_output=True, text=True)
                got = json.loads(done.stdout.strip().splitlines()[-1])
                if not got["engine"].startswith(str(checkout.resolve())):
                    raise SystemExit(f"{checkout}: the walk ran {got['engine']}, another checkout's engine")
                mine = figures.setdefault(checkout, {"calls": got["calls"], "cpu": []})
                if mine["calls"] != got["calls"]:
                    raise SystemExit(f"{checkout}: {got['calls']} handler calls, not {mine['calls']} as before")
                mine["cpu"] += got["cpu"]
    rates = {}
    for checkout, mine in figures.items():
        best = min(mine["cpu"])
        rates[checkout] = mine["calls"] / best
        print(f"{checkout}: {mine['calls']:,} handler calls, best of {len(mine['cpu'])} rounds {best:.2f} CPU-s "
              f"(all: {', '.join(f'{c:.2f}' for c in mine['cpu'])}): {rates[checkout]:,.0f} handler calls/CPU-s")
    first, last = args.checkouts[0], args.checkouts[-1]
    if first != last:
        print(f"ratio {last} / {first}: {rates[last] / rates[first]:.3f}")


if __name__ == "__main__":
    main()
