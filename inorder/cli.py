"""The `inorder` command line. Every command but `generate` and `init` works on an existing home:
INORDER_HOME (default ./.inorder)."""

from __future__ import annotations

import argparse
import contextlib
import csv
import difflib
import importlib
import json
import logging
import os
import re
import select
import sys
import time
import tomllib
from collections import Counter
from dataclasses import replace
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from inorder.terminal import say
from pipelines import faults
from pipelines.config import Settings
from pipelines.engine.outcomes import COUNTED, OPERATOR_KINDS
from pipelines.engine.routing import describe_unrouted, subscribed_types, unrouted
from pipelines.observe.status import (BLOCKED_HEADER, ERROR_HEADER, ERROR_KINDS, acted_on, blocked_streams,
                                      describe_operator_outcome, format_status, plural, read_error, read_errors,
                                      read_status, status_document)
from pipelines.registry import load_views, view_named, views_folder_to_record
from pipelines.serve.publish import describe, format_positions, read_positions
from pipelines.spark import server as spark_server
from pipelines.store.database import Home, Store, StoreBusy
from pipelines.store.versions import ViewSetMismatch, remove_view

# Dagster and Spark take seconds to import: the commands that run them import inorder.dagster_runs (or
# pipelines.facade) in their function, so that `inorder --help`, `status` and the other readers start at once
if TYPE_CHECKING:
    from inorder.dagster_runs import CliRun


class NotAHome(FileNotFoundError):
    """INORDER_HOME names a folder with neither a landing folder nor a store."""


def _version() -> str:
    try:
        return version("inorder")
    except PackageNotFoundError:  # running from a checkout that is not installed
        with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
            return tomllib.load(f)["project"]["version"]


def _iso_time(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _count(text: str) -> int:
    """A --limit: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative: give 0 or more")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, plus "did you mean" for a mistyped command, and a usage error in one line."""

    def error(self, message: str):
        wrong = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if wrong:
            choices = re.findall(r"'?([\w-]+)'?", wrong.group(2))
            close = difflib.get_close_matches(wrong.group(1), choices, n=1)
            if close:
                message += f"; did you mean {close[0]!r}?"
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")


def _positive(text: str) -> int:
    """A count of things to make: a whole number, 1 or more."""
    value = _count(text)
    if value < 1:
        raise argparse.ArgumentTypeError("0: give 1 or more")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r} (a fraction between 0 and 1)") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1")
    return value


DEMO_HOMES = (".inorder/demo", ".inorder/demo-shop")  # where scripts/demo.sh makes its homes
DEMO_MARKER = ".made-by-inorder-demo"  # the file scripts/home_kind.sh looks for


def _demo_home_hint(settings: Settings) -> str:
    """When INORDER_HOME is unset and a demo home exists here, the line to reach it (the likely meaning)."""
    if settings.home != Settings.home:
        return ""
    demos = [Path(d).resolve() for d in DEMO_HOMES if (Path(d) / DEMO_MARKER).is_file()]
    if not demos:
        return ""
    return f"; the demo's home is {demos[0]}: `export INORDER_HOME={demos[0]}`"


def _home(args: argparse.Namespace) -> Home:
    """The home of a command that reads or writes one: a mistyped INORDER_HOME is refused in one line
    instead of becoming a new, empty store."""
    home = Home.of(args.settings)
    if not home.exists:
        raise NotAHome(f"no inorder home at {home.root} (neither {home.landing} nor {home.database} exists)"
                       + (_demo_home_hint(args.settings) or f": check INORDER_HOME, or create one with `inorder init {home.root}`"))
    return home


def _print_json(document: object) -> None:
    """One JSON document on stdout (times as ISO 8601); docs/CLI.md lists each command's keys."""
    def moment(value: object) -> str:
        if isinstance(value, datetime):
            return value.isoformat()
        raise TypeError(f"{type(value).__name__} is not JSON")

    print(json.dumps(document, indent=2, ensure_ascii=False, default=moment))


def _print_table(names: Sequence[str], rows: Iterable[Sequence[object]], null: str = "-") -> None:
    cells = [list(names), *[[null if v is None else str(v).replace("\n", " ") for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(names))]
    for i, row in enumerate(cells):
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


GENERATORS = {"bank": "demos.bank", "shop": "demos.shop"}  # the demo domains


def cmd_generate(args: argparse.Namespace) -> None:
    generator = importlib.import_module(GENERATORS[args.domain])
    paths = generator.generate(Path(args.out), generator.GeneratorConfig(
        args.events, args.streams, args.batches, args.disorder, args.duplicates, args.gaps, args.poison, args.seed),
        prefix=args.prefix)
    names = paths[0].name if len(paths) == 1 else f"{paths[0].name} to {paths[-1].name}"
    print(f"wrote {len(paths)} {args.domain} batch files ({names}) with {args.events} events to {args.out}")


def cmd_init(args: argparse.Namespace) -> None:
    folder = views_folder_to_record(args.views) if args.views else None
    home = Home.of(args.settings, args.home)
    views = load_views(args.views) if args.views else _views(args, home)
    existed = home.exists
    recorded = home.recorded_views()
    if args.views and recorded is not None and recorded != args.views:
        raise ValueError(f"{home.views_file} records the views {recorded!r}, not {args.views!r}: edit that file "
                         "yourself to change them")
    Store.open(home, views).close()  # the folders, the engine's tables and the views' tables
    if args.views and recorded is None:
        home.record_views(args.views, folder)
    print(f"{home.root} is an inorder home already (landing {home.landing}, store {home.database})" if existed else
          f"created the inorder home {home.root}: drop batch files into {home.landing}, then `inorder run`")
    if args.views and recorded is None:
        print(f"recorded its views in {home.views_file}: commands on this home load {args.views}"
              + (f" from {folder}" if folder else "") + " unless INORDER_VIEWS is set")


def _views(args: argparse.Namespace, home: Home | None = None):
    """The views of INORDER_VIEWS (else the ones the home recorded), refused with one line (before anything
    touches the store) when they cannot run together."""
    return load_views(home=home or Home.of(args.settings))


def _store_views(args: argparse.Namespace):
    """The home, and the views of INORDER_VIEWS: views that cannot run together are refused first, then
    views the home's store does not hold (ViewSetMismatch, exit 5), each in one line, before anything is
    written."""
    views = _views(args)
    home = _home(args)
    _refuse_views_the_store_does_not_hold(home, views)
    return home, views


def _refuse_views_the_store_does_not_hold(home: Home, views) -> None:
    if home.database.exists():
        Store.open_read_only(home, views).close()


def _refuse_views_early(home: Home, views) -> None:
    """A run's refusal before it starts the Spark server ahead, so that a refused run leaves none idling. A store
    another process holds is not waited for: the run's own check, under its run lock, refuses then."""
    with contextlib.suppress(StoreBusy):
        _refuse_views_the_store_does_not_hold(replace(home, file_wait_seconds=0), views)


RUN_VIEW_COUNTS = (*COUNTED, "streams_touched")
REFUSED_EXIT = 4  # `inorder run` projected the other views, but refused some whose tables changed
WRONG_VIEWS_EXIT = 5  # INORDER_VIEWS names none of the store's views, or would add views to it
INTERRUPTED_EXIT = 130  # Ctrl-C, as a shell reports SIGINT
FAILED_CHECKS_EXIT = 6  # `inorder checks`: a check's latest verdict is a failure (a warning is none)


def _run_document(report: CliRun, views) -> dict:
    """`inorder run --json` (docs/CLI.md lists the keys); the text summary is made from it too."""
    batches = [{"batch_id": r.batch_id, "entry_idx": r.entry_idx, "status": r.status, "records": r.records,
                "malformed": r.malformed, "rejected_reason": r.reason if r.status == "rejected" else None,
                "unrouted": unrouted(r.stream_types, views)} for r in report.ingested]
    by_type = sum((Counter(batch["unrouted"]) for batch in batches), Counter())
    stats, plan = report.projection, report.plan
    counted = {view.name: {**stats.by_view.get(view.name, {}), "streams_touched": stats.streams_touched.get(view.name, 0)}
               for view in views}
    per_view = {name: {count: n.get(count, 0) for count in RUN_VIEW_COUNTS} for name, n in counted.items()}
    return {
        "ran": ("batches" if report.ingested else "tick" if plan.tick else "resumed" if plan.resumed
                else "caught_up" if plan.catching_up else "nothing"),
        "caught_up": list(plan.catching_up),
        "batches": batches,
        "records": sum(b["records"] for b in batches if b["status"] == "archived"),
        "unrouted": dict(sorted(by_type.items())),
        "applied": sum(v["applied"] for v in per_view.values()),
        "views": per_view,
        "seconds": round(report.seconds, 3),
        "dagster_run_ids": report.run_ids,
        "publish_error": report.publish_error,
        "refused": {**plan.refused, **stats.refused},  # a tick does not project a refused view: the plan says it
        "checks": dict(sorted(report.checks.items())),
    }


def _where_the_time_went(report, records: int) -> str:
    """Records per second when the engine's passes and commits are most of the run, the only time that number
    means something; else where the time went (a small batch's run is mostly Spark's start, Dagster and checks)."""
    stats = report.projection
    engine = stats.spark_seconds + stats.commit_seconds
    if records and report.seconds and engine >= report.seconds / 2:
        return f" ({records / report.seconds:,.0f} records/s)"
    parts = {"Spark start": stats.spark_start_seconds, "passes": stats.spark_seconds, "commit": stats.commit_seconds,
             "publish": stats.publish_seconds}
    said = [f"{name} {seconds:.1f}s" for name, seconds in parts.items() if seconds >= 0.05]
    rest = max(0.0, report.seconds - sum(parts.values()))
    return f" ({', '.join([*said, f'the rest {rest:.1f}s: imports, ingest, Dagster, checks'])})"


def _add_views(home: Home, views, names: list[str]) -> None:
    """`inorder run --add-views`: record views the store does not hold yet (and make their tables), the
    explicit act that lets INORDER_VIEWS bring them to a store holding others."""
    for name in names:
        view_named(views, name)
    Store.open(home, views, adding=names).close()


def cmd_run(args: argparse.Namespace) -> None:
    views = _views(args)
    home = _home(args)
    if args.add_views:
        _add_views(home, views, args.add_views)
    notice = spark_server.start_ahead(spark_server.ServerFiles.of(home.root), home.settings,
                                      refuse=lambda: _refuse_views_early(home, views))
    if notice:
        say(notice)
    from inorder.dagster_runs import run_through_dagster

    subscribed = subscribed_types(views)  # the store's views are checked under the run lock (run_through_dagster)
    report = run_through_dagster(home, views, args.now)
    run = _run_document(report, views)
    for line in _batch_warnings(run["batches"], subscribed):
        print(f"inorder: warning: {line}", file=sys.stderr)
    if args.json:
        _print_json(run)
    else:
        archived = [b for b in run["batches"] if b["status"] == "archived"]
        rejected = [b for b in run["batches"] if b["status"] == "rejected"]
        what = {"batches": f"{plural(len(archived), 'batch', 'batches')}, {plural(run['records'], 'record')}",
                "tick": "a tick",
                "resumed": "batches archived earlier but not yet projected (an interrupted run's, or an ingest-only one's)",
                "caught_up": f"the archive for the added views {', '.join(run['caught_up'])}",
                "nothing": "nothing new (logical time has not moved since the last entry)"}[run["ran"]]
        print(f"ran {what} in {run['seconds']:.1f}s{_where_the_time_went(report, run['records'])}; {plural(run['applied'], 'message')} applied across "
              f"views; {plural(len(run['dagster_run_ids']), 'Dagster run')}"
              + (f"; {plural(len(rejected), 'file')} rejected" if rejected else "")
              + (f"; {describe_checks(run['checks'])}" if run["checks"] else ""))
        for b in rejected:
            print(f"rejected batch {b['batch_id']} (entry {b['entry_idx']}): {b['rejected_reason']}")
        if rejected:
            from assets.ingest import rejection_next_step

            print(rejection_next_step([b["batch_id"] for b in archived], by_cli=True))
        if run["unrouted"]:
            print(f"unrouted: {describe_unrouted(run['unrouted'], subscribed)}")
    for line in run["refused"].values():  # the other views went on; this one waits for `inorder rebuild`
        print(f"inorder: {line}", file=sys.stderr)
    if run["publish_error"]:  # the views are committed in DuckDB; readers of PostgreSQL lag until it is caught up
        failure = (f"publishing to PostgreSQL failed: {run['publish_error']} (DuckDB is committed; the next run or "
                   "`inorder publish` catches up)")
        if not run["refused"]:
            raise RuntimeError(failure)
        print(f"inorder: error: {failure}", file=sys.stderr)
    if run["refused"]:  # the status that asks for an act (a rebuild) wins over a lag the next run heals
        sys.exit(REFUSED_EXIT)


def _batch_warnings(batches: list[dict], subscribed: list[str]) -> list[str]:
    """A batch none of whose records reached a view: every one malformed, or of a stream type no view
    subscribes to (a source.json that maps them wrong, most likely)."""
    lines = []
    for b in batches:
        if b["status"] != "archived" or not b["records"]:
            continue
        unrouted = sum(b["unrouted"].values())
        if b["malformed"] + unrouted < b["records"]:
            continue
        why = [f"{b['malformed']} malformed (`inorder errors --batch {b['batch_id']}` says why)"] if b["malformed"] else []
        if unrouted:
            why.append(f"{unrouted} of stream types {', '.join(b['unrouted'])}, which no view subscribes to (they "
                       f"subscribe to {', '.join(subscribed)})")
        lines.append(f"batch {b['batch_id']}: none of its {b['records']} records reached a view: {'; '.join(why)}. "
                     f"If source.json maps them wrong, fix it, then `inorder reingest {b['batch_id']}`")
    return lines


def _store(args: argparse.Namespace, views=None):
    """A read-only connection to the home's store (it waits while a run holds the file, like every reader),
    refusing loaded views the store does not hold (exit 5)."""
    return Store.open_read_only(_home(args), _views(args) if views is None else views)


def cmd_status(args: argparse.Namespace) -> None:
    views = _views(args)
    with _store(args, views) as store:
        status = read_status(store.con, views)
        positions = read_positions(store.con, views, store.home.settings)
    if args.json:
        _print_json(status_document(status, positions))
        return
    print(format_status(status, args.wide))
    if positions.error is not None:
        print(f"PostgreSQL (INORDER_SERVE_POSTGRES): cannot read what is published: {positions.error}")
    elif positions.configured:
        print("\n".join(format_positions(positions.entries)))


def _known_view(args: argparse.Namespace, name: str | None, views: Sequence | None = None) -> None:
    """Refuse a --view that names no view of INORDER_VIEWS (`views`, when the command loaded them), listing the
    known ones."""
    if name is not None:
        view_named(views or _views(args), name)


def _print_listing(args: argparse.Namespace, counts: dict[str, int], key: str, rows: Sequence,
                   header: Sequence[str], summary: str, order: str) -> None:
    """`errors` and `pending`: with --json, {**counts, key: [row, …]}; else a table, then the summary."""
    if args.json:
        _print_json({**counts, key: [row._asdict() for row in rows]})
        return
    if rows:
        _print_table(header, [row.cells() for row in rows])
    shown = f", {len(rows):,} shown (--limit {args.limit})" if len(rows) < counts["total"] else ""
    print(f"{summary}{shown}" + (f"; {order}" if rows else ""))


def cmd_errors(args: argparse.Namespace) -> None:
    if args.id is not None:
        return _print_error_row(args)
    _known_view(args, args.view)
    with _store(args) as store:
        if args.batch is not None and not store.con.execute(
                "SELECT count(*) FROM inorder.ingest_log WHERE batch_id = ?", [args.batch]).fetchone()[0]:
            raise LookupError(f"no batch {args.batch!r} in the ingest log (`inorder status` lists the batches)")
        log = read_errors(store.con, args.view, args.kind, args.batch, args.since, args.limit, args.superseded,
                          stream_id=args.stream)
    summary = f"{plural(log.total, 'error log row')} (a parked message logs one per failed attempt)"
    if log.superseded:
        summary += (f"; {plural(log.superseded, 'malformed row')} a re-ingest superseded "
                    + ("among them" if args.superseded else "left out (--superseded lists them)"))
    _print_listing(args, {"total": log.total, "superseded": log.superseded}, "errors", log.newest, ERROR_HEADER,
                   summary, "newest first")


def _print_error_row(args: argparse.Namespace) -> None:
    """`inorder errors --id N`: the row whole, a column a line; a value of several lines (a traceback, a
    malformed record's text) indented under its column's name."""
    with _store(args) as store:
        row = read_error(store.con, args.id)
    if row is None:
        raise LookupError(f"no error log row with id {args.id} (`inorder errors` lists them, the id first)")
    if args.json:
        _print_json(row)
        return
    for column, value in row.items():
        if value is None:
            continue
        text = value.isoformat() if isinstance(value, datetime) else str(value)
        if "\n" in text.strip():
            print(f"{column}:")
            print("\n".join(f"    {line}" for line in text.rstrip().splitlines()))
        else:
            print(f"{column}: {text}")


def cmd_pending(args: argparse.Namespace) -> None:
    views = _views(args)
    _known_view(args, args.view, views)
    with _store(args, views) as store:
        blocked = blocked_streams(store.con, views, args.view, args.limit)
    _print_listing(args, {"total": blocked.total, "blocked": blocked.blocked, "parked": blocked.parked,
                          "distinct_streams": blocked.streams}, "streams", blocked.oldest, BLOCKED_HEADER,
                   blocked.describe(), "oldest blocked first; times are logical (the batches' received_at)")


def cmd_query(args: argparse.Namespace) -> None:
    with Store.open_read_only(_home(args)) as store:  # any SQL, whatever INORDER_VIEWS loads
        cursor = store.con.execute(args.sql)
        names = [d[0] for d in cursor.description or ()]
        rows = cursor.fetchall()
    if args.format == "json":
        print(json.dumps([dict(zip(names, row)) for row in rows], default=str, ensure_ascii=False))
    elif args.format == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(names)
        writer.writerows(rows)
    else:
        _print_table(names, rows, null="NULL")
        print(f"({len(rows)} rows)", file=sys.stderr)


def cmd_operator(args: argparse.Namespace) -> None:
    """`inorder retry` and `skip`, as a Dagster run (the view's materialisation, followed by its checks)."""
    from inorder.dagster_runs import operator_through_dagster
    home, views = _store_views(args)
    view_named(views, args.view)
    streams = operator_through_dagster(home, views, args.view, None if args.all else [args.stream], args.command)
    if not streams:
        print(f"view {args.view} has no parked streams: nothing to {args.command}")
        return
    with _store(args, views) as store:
        print(describe_operator_outcome(args.command, args.view, acted_on(store.con, args.view, streams)))


def cmd_rebuild(args: argparse.Namespace) -> None:
    from inorder.dagster_runs import rebuild_through_dagster

    started = time.perf_counter()
    home, views = _store_views(args)
    _known_view(args, args.view, views)
    done = rebuild_through_dagster(home, views, args.view)
    print(f"rebuilt {args.view}: {plural(done.stats.entries, 'entry', 'entries')} "
          f"replayed in {plural(done.stats.passes, 'pass', 'passes')} and swapped in, "
          f"{time.perf_counter() - started:.1f}s; {describe_checks(done.checks)}")


def cmd_checks(args: argparse.Namespace) -> None:
    """The latest verdict of every check of the home's views (or of --view) and of its ingest log, as the home's
    Dagster instance recorded them; exit FAILED_CHECKS_EXIT when one of them failed."""
    from inorder.verdicts import format_verdicts, latest_verdicts

    home, views = _store_views(args)
    _known_view(args, args.view, views)
    verdicts = latest_verdicts(home, [args.view] if args.view else [view.name for view in views],
                               ingest_log=args.view is None)
    named = {f"{v.asset}.{v.check}": v.verdict for v in verdicts if v.verdict}
    if args.json:
        _print_json({"evaluated": bool(named), **{verdict: sum(v == verdict for v in named.values())
                                                 for verdict in ("passed", "warned", "failed")},
                     "checks": [v.document() for v in verdicts]})
    elif not named:
        print(f"no check has been evaluated on {home.root} yet: `inorder run` evaluates every check after it projects")
    else:
        print("\n".join(format_verdicts(verdicts)))
        print(describe_checks(named))
    if "failed" in named.values():
        sys.exit(FAILED_CHECKS_EXIT)


def describe_checks(checks: dict[str, str]) -> str:
    """`checks: 7 of 9 passed (failed: …) (warning, not a failure: …)`: a run Dagster calls a success
    can still have failed checks, and a warning is not a failure."""
    named = {verdict: sorted(name for name, v in checks.items() if v == verdict) for verdict in ("failed", "warned")}
    return (f"checks: {sum(v == 'passed' for v in checks.values())} of {len(checks)} passed"
            + (f" (failed: {', '.join(named['failed'])})" if named["failed"] else "")
            + (f" (warning, not a failure: {', '.join(named['warned'])})" if named["warned"] else ""))


def cmd_publish(args: argparse.Namespace) -> None:
    """`inorder publish`, as a Dagster run (each view published is materialised, followed by its checks)."""
    from inorder.dagster_runs import publish_through_dagster

    home, views = _store_views(args)
    if args.full:
        view_named(views, args.full)
    done = publish_through_dagster(home, views, args.full)
    print(f"published {describe(done)}" if done else "every view is published up to DuckDB's newest commit")


def cmd_reingest(args: argparse.Namespace) -> None:
    """`inorder reingest`, as a Dagster run (every view materialised after it, followed by its checks)."""
    from inorder.dagster_runs import reingest_through_dagster

    home, views = _store_views(args)
    done = reingest_through_dagster(home, views, args.batches, args.now)
    results, stats = done.entries, done.projection
    for r in results:
        print(f"re-ingested {r.batch_id} (entry {r.entry_idx}, superseding entry {r.reingest_of}): {r.records} records, "
              f"{r.malformed} malformed, by stream type {r.stream_types}")
    applied = sum(counts.get("applied", 0) for counts in stats.by_view.values())
    print(f"{len(results)} of {len(args.batches)} batches re-ingested; {applied} messages applied across views")


def cmd_remove_view(args: argparse.Namespace) -> None:
    """`inorder remove-view`: what it would drop; with --yes, a Dagster run that drops it."""
    from inorder.dagster_runs import remove_view_through_dagster

    if args.yes:
        removed = remove_view_through_dagster(_home(args), args.view)
    else:
        with Store.open(_home(args), ()) as store:  # no views: none is recorded or checked on the way
            removed = remove_view(store.con, args.view, confirmed=False)
    rows = ", ".join(f"{n} {table}" for table, n in removed.state_rows.items())
    what = f"its tables {', '.join(removed.tables) or '(none of its own)'} and its engine rows ({rows})" + (
        f"; it keeps {', '.join(removed.shared)}, which another of the store's views claims too" if removed.shared
        else "")
    if not args.yes:
        print(f"would remove view {args.view}: {what}; the archive stays. Run again with --yes to remove it")
        sys.exit(1)
    print(f"removed view {args.view}: {what}. Take it out of INORDER_VIEWS too; the archive stays, so "
          f"`inorder run --add-views {args.view}` would build it again")


def cmd_rename_view(args: argparse.Namespace) -> None:
    from pipelines.facade import rename_view

    rows = rename_view(_home(args), args.old, args.new)
    kept = ", ".join(f"{n} {table}" for table, n in rows.items())
    print(f"renamed view {args.old} to {args.new} in the store: its tables, version and engine rows ({kept}) keep "
          f"their history, nothing is replayed. INORDER_VIEWS must now load it as {args.new}")


def cmd_spark(args: argparse.Namespace) -> None:
    """`inorder spark start|stop|status`: the home's warm Spark Connect server (pipelines/spark/server.py)."""
    home = _home(args)
    files = spark_server.ServerFiles.of(home.root)
    if args.action == "start":
        state, started = spark_server.start(files, (args.idle_timeout or home.settings.spark_idle_minutes) * 60)
        print(state.endpoint if started else f"already running: {state.endpoint} (pid {state.pid})")
    elif args.action == "stop":
        state = spark_server.stop(files)
        print(f"stopped the warm Spark server {state.endpoint} (pid {state.pid})" if state else
              "no warm Spark server is running")
    else:
        state = spark_server.running_state(files)
        now = time.time()
        document = {"running": state is not None, "endpoint": state and state.endpoint, "pid": state and state.pid,
                    "jvm_pid": state and state.jvm_pid, "uptime_seconds": state and round(now - state.started_at, 1),
                    "idle_seconds": state and round(files.idle_seconds(), 1),
                    "idle_timeout_seconds": state and state.idle_timeout_seconds, "log": str(files.log),
                    "this_build": state and state.build == spark_server.this_build()}
        if args.json:
            _print_json(document)
        elif state:
            other = "" if document["this_build"] else ", of another inorder or venv: the next run replaces it"
            print(f"running: {state.endpoint} (pid {state.pid}){other}, up {document['uptime_seconds']:.0f}s, idle "
                  f"{document['idle_seconds']:.0f}s of {state.idle_timeout_seconds:.0f}s; log {files.log}")
        else:
            print("not running; " + ("the next run starts one" if home.settings.spark_warm else
                                     "runs start Spark local[*] (INORDER_SPARK_WARM=0)") + f", for {home.root}")
        if state is None:
            sys.exit(3)  # as `systemctl status` does: scripts can test it


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="inorder", description=__doc__)
    p.add_argument("--version", action="version", version=f"inorder {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    as_json = {"action": "store_true", "help": "one JSON document on stdout (docs/CLI.md lists the keys)"}

    def command(name: str, help: str, under=sub, parent: str = "inorder") -> argparse.ArgumentParser:
        """A subcommand whose `--help` starts with what it does (the line its parent's `--help` lists)."""
        return under.add_parser(name, help=help, description=f"{parent} {name}: {help}.")
    _home_commands(command)
    _reading_commands(command, as_json)
    _operator_commands(command)
    _spark_command(command, as_json)
    return p


def _home_commands(command) -> None:
    """`generate` and `init`: what makes a home and its first batches."""
    g = command("generate", help="write demo batches (the bank's, or the shop's)")
    g.add_argument("--domain", choices=sorted(GENERATORS), default="bank",
                   help="bank: account streams (views/); shop: order and customer streams (shop/views/) "
                        "(default %(default)s)")
    g.add_argument("--out", required=True, metavar="DIR", help="the folder to write the batch files into (made if missing)")
    g.add_argument("--prefix", default="batch-",
                   help="file names: PREFIX00001.jsonl…, numbered on from the highest PREFIX<number> file in --out "
                        "(default %(default)s)")
    for name, default, what in (("events", 10_000, "events in all, across the batches"),
                                ("streams", 100, "streams they belong to: accounts, or orders and customers"),
                                ("batches", 10, "batch files to split them into")):
        g.add_argument(f"--{name}", type=_positive, default=default, metavar="N", help=f"{what} (default %(default)s)")
    for name, default, what in (("disorder", 0.1, "delivered out of order"), ("duplicates", 0.02, "delivered twice"),
                                ("gaps", 0.005, "never delivered"),
                                ("poison", 0.005, "corrupted (bad fields, and a tenth as many lines that do not parse)")):
        g.add_argument(f"--{name}", type=_fraction, default=default, metavar="FRACTION",
                       help=f"the share of events {what}, 0 to 1 (default %(default)s: {default * 100:g} %%)")
    g.add_argument("--seed", type=int, default=7, help="the same seed writes the same files (default %(default)s)")
    g.set_defaults(func=cmd_generate)
    i = command("init", help="create a home: landing/, archive/ and the store")
    i.add_argument("home", nargs="?", help="default: INORDER_HOME, else ./.inorder")
    i.add_argument("--views", metavar="MODULE[,MODULE]",
                   help="the view modules of this home, recorded in HOME/views.txt: commands load them when "
                        "INORDER_VIEWS is unset")
    i.set_defaults(func=cmd_init)


def _reading_commands(command, as_json: dict) -> None:
    """`run`, and the commands that read the store: `status`, `query`, `errors`, `pending`."""
    r = command("run", help="ingest new batches (or tick) and project them")
    r.add_argument("--now", type=_iso_time, help="logical time of this run (default: the wall clock)")
    r.add_argument("--json", **as_json)
    r.add_argument("--add-views", type=lambda text: [n.strip() for n in text.split(",") if n.strip()],
                   metavar="VIEW[,VIEW]", help="add these views of INORDER_VIEWS to a store that holds others "
                                              "(they are then projected over the whole archive)")
    r.set_defaults(func=cmd_run)
    s = command("status", help="per-view summary")
    s.add_argument("--json", **as_json)
    s.add_argument("--wide", action="store_true",
                   help="every outcome, gaps skipped and the oldest wait too (the table is then over 100 columns)")
    s.set_defaults(func=cmd_status)
    q = command("query", help="run one read-only SQL query on the store (waits while a run holds it)")
    q.add_argument("sql", help="one SQL statement; the store is opened read-only")
    q.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="how to print the rows (default %(default)s)")
    q.set_defaults(func=cmd_query)
    e = command("errors", help="list the error log, newest first")
    e.add_argument("--view", help="only the errors of this view (default: every view, and malformed records)")
    e.add_argument("--kind", choices=ERROR_KINDS, help="only errors of this kind (default: every kind)")
    e.add_argument("--batch", metavar="BATCH_ID", help="only the errors of this batch")
    e.add_argument("--stream", metavar="STREAM_ID", help="only the errors of this stream")
    e.add_argument("--id", type=_count, metavar="N",
                   help="show the row with this id (the listing's first column) whole: its payload, raw text, "
                        "traceback and reason; the other filters do not apply")
    e.add_argument("--since", type=_iso_time, metavar="ISO8601",
                   help="only errors logged at or after this logical time")
    e.add_argument("--limit", type=_count, default=100, help="show at most this many (default 100)")
    e.add_argument("--superseded", action="store_true",
                   help="also list the malformed rows a re-ingest superseded (left out by default)")
    e.add_argument("--json", **as_json)
    e.set_defaults(func=cmd_errors)
    c = command("checks", help="the latest verdict of every check: reasons, the GX results table, the next "
                               f"command (exit {FAILED_CHECKS_EXIT} when one failed)")
    c.add_argument("--view", help="only this view's checks (default: every view's, and the ingest log's)")
    c.add_argument("--json", **as_json)
    c.set_defaults(func=cmd_checks)
    n = command("pending", help="blocked and parked streams, oldest blocked first")
    n.add_argument("--view", help="only this view's streams (default: every view's)")
    n.add_argument("--limit", type=_count, default=20, help="show at most this many (default 20)")
    n.add_argument("--json", **as_json)
    n.set_defaults(func=cmd_pending)


def _operator_commands(command) -> None:
    """What an operator does to a home: `retry`, `skip`, `publish`, `rebuild`, `reingest`, `remove-view`,
    `rename-view`."""
    for action in OPERATOR_KINDS:
        o = command(action, help=f"{action} a parked stream, or every parked stream of a view")
        o.add_argument("--view", required=True, help="the view the stream is parked in")
        which = o.add_mutually_exclusive_group(required=True)
        which.add_argument("--stream", help="the parked stream's id (`inorder pending --view V` lists them)")
        which.add_argument("--all", action="store_true", help="every parked stream of the view")
        o.set_defaults(func=cmd_operator)
    u = command("publish", help="publish to PostgreSQL (INORDER_SERVE_POSTGRES) what it does not show yet")
    u.add_argument("--full", metavar="VIEW", help="replace this view's PostgreSQL tables with DuckDB's, in one transaction")
    u.set_defaults(func=cmd_publish)
    b = command("rebuild", help="build a view anew from the archive beside the live one, swap it in "
                                      "at once, then run its checks")
    b.add_argument("view", help="one of the views of INORDER_VIEWS")
    b.set_defaults(func=cmd_rebuild)
    g = command("reingest", help="after fixing source.json: inspect archived batches again, as new entries "
                                        "carrying the records no view received (unrouted or malformed), and project them")
    g.add_argument("batches", nargs="+", metavar="BATCH_ID", help="archived batches (`inorder status` lists them)")
    g.add_argument("--now", type=_iso_time, help="logical time of the new entries (default: the wall clock)")
    g.set_defaults(func=cmd_reingest)
    m = command("remove-view", help="take a view out of the store: its tables and engine rows (the archive "
                                           "stays); says what it would drop unless --yes")
    m.add_argument("view", help="a view the store holds")
    m.add_argument("--yes", action="store_true", help="remove it (without: only say what would be dropped)")
    m.set_defaults(func=cmd_remove_view)
    n = command("rename-view", help="rename a view in the store after renaming it in its module: its tables and "
                                    "history stay, nothing is replayed")
    n.add_argument("old", metavar="OLD", help="the name the store holds it under")
    n.add_argument("new", metavar="NEW", help="its new name, as its module declares it now")
    n.set_defaults(func=cmd_rename_view)


def _spark_command(command, as_json: dict) -> None:
    """`inorder spark start|stop|status`."""
    k = command("spark", help="a warm Spark Connect server on loopback that runs of this home use")
    k_sub = k.add_subparsers(dest="action", required=True)
    k_start = command("start", "start it (if none is running) and print its sc:// endpoint", k_sub, "inorder spark")
    k_start.add_argument("--idle-timeout", type=float, metavar="MINUTES",
                         help="it stops by itself after this long with no run using it (default "
                              "INORDER_SPARK_IDLE_MINUTES, else 15)")
    command("stop", "stop it and wait for its processes to end", k_sub, "inorder spark")
    k_status = command("status", "running or not, endpoint, uptime, idle time (exit 3: not running)", k_sub, "inorder spark")
    k_status.add_argument("--json", **as_json)
    k.set_defaults(func=cmd_spark)


@contextlib.contextmanager
def _library_logs_quiet(settings: Settings) -> Iterator[None]:
    """Libraries that log to the root logger (py4j's tracebacks when Ctrl-C cuts a Spark call) print nothing:
    the command says what happened itself, in one line; INORDER_DEBUG=1 leaves them as they are."""
    root = logging.getLogger()
    level = root.level
    if not settings.debug:
        root.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        root.setLevel(level)


def _stdout_reader_gone() -> bool:
    """Is stdout a pipe whose reader closed it? Linux reports POLLERR on such a pipe's write end."""
    with contextlib.suppress(ValueError, OSError):  # no file descriptor: not a pipe
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    return False


def main(argv: list[str] | None = None) -> int:
    faults.arm()  # the crash sweep's crash points (pipelines/faults.py): nothing when INORDER_CRASH_AT is unset
    args = parser().parse_args(argv)
    children_before = spark_server.own_children()
    settings = Settings()
    try:
        settings = args.settings = Settings.from_env()  # the one read of the INORDER_* variables: passed down
        with _library_logs_quiet(settings):
            args.func(args)
            sys.stdout.flush()  # output still buffered fails here, where a reader that left is told from an error
    except SystemExit as exc:  # a command's own exit status (3, 4, 6): main returns what the process exits with
        return exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt as exc:  # RunInterrupted says what the run left for the next one
        spark_server.end_processes(spark_server.own_children() - children_before)  # a Spark JVM the command started
        print(f"inorder: interrupted{f': {exc}' if str(exc) else ''}", file=sys.stderr)
        return INTERRUPTED_EXIT
    except ViewSetMismatch as exc:
        print(f"inorder: refused: {exc}", file=sys.stderr)
        return WRONG_VIEWS_EXIT
    except Exception as exc:  # one clear line; INORDER_DEBUG=1 shows the traceback
        if isinstance(exc, BrokenPipeError) and not settings.debug and _stdout_reader_gone():
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail again
            return 1  # quietly: `inorder errors | head` has what it wanted
        if settings.debug:
            raise
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"inorder: error: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
