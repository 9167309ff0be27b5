"""The `inorder` command line. Every command reads INORDER_HOME (default ./.inorder)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from pipelines.store import Home


def _progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _iso_time(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1")
    return value


def _spark():
    """A lazy session: the engine starts Spark only when a pass has work."""
    from pipelines.spark import spark_session

    return spark_session


GENERATORS = {"bank": "views.bank_generator", "shop": "shop.generator"}  # the demo domains


def cmd_generate(args: argparse.Namespace) -> None:
    import importlib

    generator = importlib.import_module(GENERATORS[args.domain])
    paths = generator.generate(Path(args.out), generator.GeneratorConfig(
        args.events, args.streams, args.batches, args.disorder, args.duplicates, args.gaps, args.poison, args.seed))
    print(f"wrote {len(paths)} {args.domain} batch files with {args.events} events to {args.out}")


def _views():
    """The views of INORDER_VIEWS, refused with one line (before anything touches the store) when
    they cannot run together."""
    from pipelines.registry import load_views

    return load_views()


def cmd_run(args: argparse.Namespace) -> None:
    from inorder.dagster_runs import run_through_dagster

    _views()
    report = run_through_dagster(Home.from_env(), args.now, _progress)
    archived = [m for m in report.ingested if m.get("status") == "archived"]
    rejected = [m for m in report.ingested if m.get("status") == "rejected"]
    records = sum(m.get("records", 0) for m in archived)
    applied = sum(m.get("applied", 0) for m in report.projection.values())
    what = (f"{len(archived)} batches, {records} records" if report.ingested else
            "a tick" if report.ticked else "what an interrupted run had archived" if report.resumed else
            "nothing new (logical time has not moved since the last entry)")
    rate = f", {records / report.seconds:,.0f} records/s" if records else ""
    print(f"ran {what} in {report.seconds:.1f}s{rate}; {applied} messages applied across views; "
          f"{len(report.run_ids)} Dagster runs" + (f"; {len(rejected)} files rejected" if rejected else ""))
    for m in rejected:
        print(f"rejected batch (entry {m.get('entry_idx')}): {m.get('rejected_reason')}")
    failed = next((m["publish_error"] for m in report.projection.values() if m.get("publish_error")), None)
    if failed:  # the views are committed in DuckDB; readers of PostgreSQL lag until it is caught up
        raise RuntimeError(f"publishing to PostgreSQL failed: {failed} (DuckDB is committed; the next run or "
                           "`inorder publish` catches up)")


def cmd_status(args: argparse.Namespace) -> None:
    from pipelines.status import format_status, open_read_only, read_status

    from pipelines.publish import format_positions, read_positions

    views = _views()
    con = open_read_only(Home.from_env())
    try:
        print(format_status(read_status(con, views)))
        positions = read_positions(con, views)
    finally:
        con.close()
    if isinstance(positions, str):
        print(f"PostgreSQL (INORDER_SERVE_POSTGRES): cannot read what is published: {positions}")
    elif positions is not None:
        print("\n".join(format_positions(positions)))


def cmd_errors(args: argparse.Namespace) -> None:
    from pipelines.status import open_read_only

    con = open_read_only(Home.from_env())
    try:
        rows = con.execute(
            "SELECT kind, coalesce(view, '-'), coalesce(stream_id, '-'), coalesce(seq::VARCHAR, '-'), batch_id, "
            "line, coalesce(reason, message) FROM inorder.errors "
            "WHERE (? IS NULL OR view = ?) AND (? IS NULL OR kind = ?) ORDER BY error_id LIMIT ?",
            [args.view, args.view, args.kind, args.kind, args.limit]).fetchall()
    finally:
        con.close()
    for kind, view, stream_id, seq, batch_id, line, reason in rows:
        print(f"{kind}\t{view}\t{stream_id}\t{seq}\t{batch_id}:{line}\t{reason}")
    print(f"{len(rows)} errors shown (limit {args.limit})", file=sys.stderr)


def cmd_query(args: argparse.Namespace) -> None:
    import csv
    import json

    from pipelines.status import open_read_only

    con = open_read_only(Home.from_env())  # waits while a run holds the file, like every reader
    try:
        cursor = con.execute(args.sql)
        names = [d[0] for d in cursor.description or ()]
        rows = cursor.fetchall()
    finally:
        con.close()
    if args.format == "json":
        print(json.dumps([dict(zip(names, row)) for row in rows], default=str, ensure_ascii=False))
    elif args.format == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(names)
        writer.writerows(rows)
    else:
        cells = [names, *[["NULL" if v is None else str(v) for v in row] for row in rows]]
        widths = [max(len(r[i]) for r in cells) for i in range(len(names))]
        for i, row in enumerate(cells):
            print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
            if i == 0:
                print("  ".join("-" * w for w in widths))
        print(f"({len(rows)} rows)", file=sys.stderr)


def cmd_operator(args: argparse.Namespace) -> None:
    from pipelines.registry import view_named
    from pipelines.run import operator_action

    views = _views()
    view = view_named(views, args.view)
    streams = operator_action(_spark(), Home.from_env(), views, view, None if args.all else [args.stream],
                              args.command, progress=_progress)
    if not streams:
        print(f"view {args.view} has no parked streams: nothing to {args.command}")
    else:
        print(f"{args.command} of {len(streams)} parked streams of {args.view} committed: "
              + ", ".join(streams[:10]) + (" …" if len(streams) > 10 else ""))


def cmd_rebuild(args: argparse.Namespace) -> None:
    from pipelines.registry import view_named
    from pipelines.run import rebuild

    started = time.perf_counter()
    views = _views()
    view = view_named(views, args.view)
    stats = rebuild(_spark(), Home.from_env(), views, view, progress=_progress)
    print(f"rebuilt {args.view}: {stats.entries} entries replayed in {stats.passes} passes, "
          f"{time.perf_counter() - started:.1f}s")


def cmd_publish(args: argparse.Namespace) -> None:
    from pipelines.publish import describe
    from pipelines.registry import view_named
    from pipelines.run import publish

    views = _views()
    done = publish(Home.from_env(), views, view_named(views, args.full) if args.full else None)
    print(f"published {describe(done)}" if done else "every view is published up to DuckDB's newest commit")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="inorder", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="write demo batches (the bank's, or the shop's)")
    g.add_argument("--domain", choices=sorted(GENERATORS), default="bank",
                   help="bank: account streams (views/); shop: order and customer streams (shop/views/)")
    g.add_argument("--out", required=True)
    g.add_argument("--events", type=int, default=10_000)
    g.add_argument("--streams", type=int, default=100)
    g.add_argument("--batches", type=int, default=10)
    g.add_argument("--disorder", type=_fraction, default=0.1)
    g.add_argument("--duplicates", type=_fraction, default=0.02)
    g.add_argument("--gaps", type=_fraction, default=0.005)
    g.add_argument("--poison", type=_fraction, default=0.005)
    g.add_argument("--seed", type=int, default=7)
    g.set_defaults(func=cmd_generate)
    r = sub.add_parser("run", help="ingest new batches (or tick) and project them")
    r.add_argument("--now", type=_iso_time, help="logical time of this run (default: the wall clock)")
    r.set_defaults(func=cmd_run)
    sub.add_parser("status", help="per-view summary").set_defaults(func=cmd_status)
    q = sub.add_parser("query", help="run one read-only SQL query on the store (waits while a run holds it)")
    q.add_argument("sql")
    q.add_argument("--format", choices=("table", "csv", "json"), default="table")
    q.set_defaults(func=cmd_query)
    e = sub.add_parser("errors", help="list the error log")
    e.add_argument("--view")
    e.add_argument("--kind", choices=("malformed", "handler_error", "late", "conflict"))
    e.add_argument("--limit", type=int, default=100)
    e.set_defaults(func=cmd_errors)
    for action in ("retry", "skip"):
        o = sub.add_parser(action, help=f"{action} a parked stream, or every parked stream of a view")
        o.add_argument("--view", required=True)
        which = o.add_mutually_exclusive_group(required=True)
        which.add_argument("--stream")
        which.add_argument("--all", action="store_true", help="every parked stream of the view")
        o.set_defaults(func=cmd_operator)
    u = sub.add_parser("publish", help="publish to PostgreSQL (INORDER_SERVE_POSTGRES) what it does not show yet")
    u.add_argument("--full", metavar="VIEW", help="replace this view's PostgreSQL tables with DuckDB's, in one transaction")
    u.set_defaults(func=cmd_publish)
    b = sub.add_parser("rebuild", help="truncate a view and replay the archive")
    b.add_argument("view")
    b.set_defaults(func=cmd_rebuild)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        args.func(args)
    except KeyboardInterrupt:
        print("inorder: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one clear line; INORDER_DEBUG=1 shows the traceback
        if os.environ.get("INORDER_DEBUG"):
            raise
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"inorder: error: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
