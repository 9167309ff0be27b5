"""Crash anywhere: kill `inorder run` with SIGKILL at named crash points (pipelines/faults.py) and
at seeded random moments, run it again, and compare the whole read store with a run that was
never interrupted.

    python -m tests.crash_sweep [--quick] [--seed N] [--random K] [--out DIR]

A scenario is four `inorder run`s at fixed logical times over bank demo batches (with duplicates,
conflicts, gaps, poison, malformed lines and a file that is rejected): two batches and a bad
file; one more batch; a tick an hour later, so gaps time out; a straggler batch with late
messages. The uninterrupted reference is snapshotted after each run.

Rebuild cases kill `inorder rebuild account_activity` (with the view's table changed:
tests/bank_changed.py) at its own crash points, from the replay into the shadow to the swap's
COMMIT. Right after the kill, the live store must be exactly as before the rebuild, or exactly as
after it (when the kill came after the swap's commit), ignoring the shadow a killed rebuild leaves;
the re-run must then give the same store as an uninterrupted rebuild, shadow gone. A crash case copies the
snapshot before its run, lands that run's files, kills the run, re-runs it, and requires the
store (view tables, watermarks, pending, errors, gaps, ledger, ingest log, archive) to equal the
reference snapshot after that run, with the conservation identity holding; some cases then go
on with the next run too, to show the home (and its Dagster instance) still works.

With `--postgres DSN` (the CI test starts a server of its own), every run also publishes to
PostgreSQL (INORDER_SERVE_POSTGRES), each home into a schema of its own: the reference's schema
is copied after each run, a case starts from the copy made before its run, and after the re-run
its PostgreSQL tables and `inorder_published` must equal the reference's too.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from tests.command import INORDER, REPO, clean_environment

# columns that hold the wall clock or a generated id: the only ones a re-run may change
VOLATILE = {"inorder.batches": {"committed_at"}, "inorder.errors": {"error_id"},
            "inorder.view_versions": {"recorded_at"}}
REBUILT_VIEW = "account_activity"
SHADOW_PREFIX = "inorder_rebuild_"  # pipelines/store/layout.py: a rebuild's shadow schemas


@dataclass(frozen=True)
class Step:
    now: str
    files: tuple[str, ...]  # staged files landed before this run


STEPS = (
    Step("2026-11-02T00:00:00Z", ("batch-00001.jsonl", "batch-00002.jsonl", "notes.txt")),
    Step("2026-11-02T00:01:00Z", ("batch-00003.jsonl",)),
    Step("2026-11-02T01:00:00Z", ()),  # a tick: open gaps time out
    Step("2026-11-02T01:01:00Z", ("batch-00004.jsonl",)),  # stragglers: late messages
)


@dataclass(frozen=True)
class Crash:
    step: int  # index into STEPS of the run that is killed
    point: str | None  # a named crash point, or None: killed from outside `after_s` after start
    nth: int = 1  # the n-th time the point is passed
    delay_us: int = 0  # kill this long after the point (lands inside what follows it)
    after_s: float = 0.0
    rebuild: bool = False  # kill `inorder rebuild` after the `step`-th run, not the run

    @property
    def label(self) -> str:
        if self.rebuild:
            delay = f" +{self.delay_us}us" if self.delay_us else ""
            return f"rebuild after run {self.step + 1}: {self.point}#{self.nth}{delay}"
        if self.point is None:
            return f"run {self.step + 1}: SIGKILL after {self.after_s:.2f}s"
        delay = f" +{self.delay_us}us" if self.delay_us else ""
        return f"run {self.step + 1}: {self.point}#{self.nth}{delay}"


# (point, step, nth): every point is reached in that run of the scenario
NAMED = [
    ("ingest.listed", 0, 1), ("ingest.inspected", 0, 2), ("ingest.archive_written", 0, 1),
    ("ingest.archive_in_place", 0, 2), ("ingest.registering", 0, 1), ("ingest.registered", 0, 1),
    ("ingest.rejected_registered", 0, 1), ("dagster.ingested", 0, 1), ("project.planned", 0, 1),
    ("order.candidate", 0, 200), ("apply.applied", 0, 300), ("apply.handler_error", 0, 1),
    ("order.stream_walked", 0, 40), ("project.ordered", 0, 1), ("commit.begun", 0, 1),
    ("commit.watermarks", 0, 1), ("commit.pending", 0, 1), ("commit.errors", 0, 1),
    ("commit.view_tables", 0, 1), ("commit.ledger", 0, 1), ("project.committed", 0, 1),
    ("ingest.registered", 1, 1), ("tick.recorded", 2, 1), ("order.gap_skipped", 2, 3), ("commit.gaps", 2, 1),
    ("commit.ledger", 3, 1), ("apply.applied", 3, 50),
    # between the DuckDB commit and the PostgreSQL publication (with --postgres)
    ("publish.begun", 0, 1), ("publish.staged", 0, 2), ("publish.committed", 0, 1), ("publish.staged", 2, 1),
    ("publish.begun", 3, 3),
]
# inside DuckDB: the projection's COMMIT (the tick run commits once) and the checkpoint on close
INSIDE_DUCKDB = [("store.commit", 2, 1, us) for us in (0, 300, 1_000, 3_000, 10_000)] + \
                [("store.close", 2, 2, us) for us in (0, 1_000, 5_000, 20_000)]
# (point, nth) of `inorder rebuild`: the shadow's preparation, replay and commit, the catch-up, the swap
# (store.commit #1 prepares the shadow, #2 commits the replay, #3 is the swap: the catch-up commits nothing)
REBUILD_POINTS = [("rebuild.prepared", 1), ("project.planned", 1), ("apply.applied", 500), ("commit.begun", 1),
                  ("commit.view_tables", 1), ("project.committed", 1), ("rebuild.replayed", 1),
                  ("rebuild.caught_up", 1), ("store.commit", 3), ("rebuild.swapped", 1)]
INSIDE_SWAP = [("store.commit", 3, us) for us in (300, 3_000, 30_000)]
# one point in a Spark worker among them: it kills the driver through INORDER_CRASH_PID, which the session
# hands its executors (pipelines/faults.py)
QUICK = [Crash(0, "ingest.archive_in_place", 2), Crash(0, "dagster.ingested"), Crash(2, "store.commit", 1, 1_000),
         Crash(1, "publish.staged", 2), Crash(1, "apply.applied", 5), Crash(2, "store.commit", 3, 1_000, rebuild=True)]


@dataclass
class Outcome:
    label: str
    killed: bool  # the run died by SIGKILL (False: it finished before the kill came)
    identical: bool
    conserved: bool
    continued: bool | None  # the next run after recovery matched too (None: not tried)
    seconds: float
    detail: str = ""


def stage(staging: Path, seed: int) -> None:
    """Bank batches, with malformed lines in batch 2, and a file no reader accepts."""
    subprocess.run([INORDER, "generate", "--out", str(staging), "--events", "4000", "--streams", "200",
                    "--batches", "4", "--disorder", "0.3", "--duplicates", "0.05", "--gaps", "0.02",
                    "--poison", "0.02", "--seed", str(seed)], check=True, capture_output=True)
    with (staging / "batch-00002.jsonl").open("ab") as f:
        f.write(b'{"stream_id": "acct-x", "seq": "one"}\n{not json\n\xff\xfe\n')
    (staging / "notes.txt").write_text("not a batch\n")


def run_env(home: Path, serve: tuple[str, str] | None = None, views: str | None = None) -> dict[str, str]:
    """A clean environment for an `inorder` process on `home`: unarmed, with the home's own Dagster instance,
    publishing to `serve` (PostgreSQL DSN, schema) when given, with `views` of this repository when given."""
    publish = dict(zip(("INORDER_SERVE_POSTGRES", "INORDER_SERVE_SCHEMA"), serve or ()))
    return clean_environment(home, views, path=(REPO,) if views else (), **publish)


def inorder_run(home: Path, step: Step | None, crash: Crash | None = None,
                serve: tuple[str, str] | None = None) -> tuple[int, float, str]:
    """`inorder run` at the step's time; with no step, `inorder rebuild` of REBUILT_VIEW, changed."""
    if step is not None:
        env, command = run_env(home, serve), ["run", "--now", step.now]
    else:
        from tests.bank_changed import VIEWS

        env, command = run_env(home, serve, VIEWS), ["rebuild", REBUILT_VIEW]
    if crash is not None and crash.point is not None:
        env["INORDER_CRASH_AT"] = f"{crash.point}:{crash.nth}"
        env["INORDER_CRASH_DELAY_US"] = str(crash.delay_us)
    started = time.perf_counter()
    proc = subprocess.Popen([INORDER, *command], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    if crash is not None and crash.point is None:
        try:
            proc.wait(timeout=crash.after_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
    output, _ = proc.communicate(timeout=600)
    return proc.returncode, time.perf_counter() - started, output


def land(staging: Path, home: Path, step: Step) -> None:
    (home / "landing").mkdir(parents=True, exist_ok=True)
    for name in step.files:
        shutil.copy2(staging / name, home / "landing" / name)


def store_snapshot(home: Path, shadows: bool = True) -> dict[str, list]:
    """Every table of the read store (minus VOLATILE columns; without a rebuild's shadow tables unless
    `shadows`) and every archived entry, sorted."""
    con = duckdb.connect(str(home / "store.duckdb"), read_only=True)
    try:
        tables = [f"{schema}.{name}" for schema, name in con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() ORDER BY ALL").fetchall()
            if shadows or not schema.startswith(SHADOW_PREFIX)]
        snapshot = {}
        for table in tables:
            skip = VOLATILE.get(table, set())
            columns = [c for (c,) in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE schema_name || '.' || table_name = ? "
                "ORDER BY column_index", [table]).fetchall() if c not in skip]
            quoted = ", ".join(f'"{c}"' for c in columns)
            schema, name = table.split(".")
            snapshot[table] = [repr(r) for r in con.execute(
                f'SELECT {quoted} FROM "{schema}"."{name}" ORDER BY ALL').fetchall()]
    finally:
        con.close()
    for entry in sorted((home / "archive").glob("entry=*/messages.parquet")):
        snapshot[f"archive/{entry.parent.name}"] = [repr(r) for r in pq.read_table(entry).to_pylist()]
    return snapshot


def first_difference(got: dict[str, list], want: dict[str, list]) -> str:
    for name in sorted(set(got) | set(want)):
        g, w = got.get(name), want.get(name)
        if g != w:
            if g is None or w is None:
                return f"{name}: only in the {'reference' if g is None else 'crashed run'}"
            extra, missing = sorted(set(g) - set(w))[:2], sorted(set(w) - set(g))[:2]
            return f"{name}: {len(g)} rows vs {len(w)}; extra {extra}; missing {missing}"
    return ""


def published_snapshot(dsn: str, schema: str) -> dict[str, list]:
    """Every table of a PostgreSQL schema, sorted (minus `inorder_published.published_at`, a wall-clock stamp)."""
    import psycopg

    with psycopg.connect(dsn) as pg:
        pg.execute("SET TimeZone = 'UTC'")
        snapshot = {}
        for (table,) in pg.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                                   [schema]).fetchall():
            columns = "view, entry_idx, batch_id" if table == "inorder_published" else "*"
            snapshot[f"pg:{table}"] = sorted(repr(r) for r in pg.execute(
                f'SELECT {columns} FROM "{schema}"."{table}"').fetchall())
    return snapshot


def copy_schema(dsn: str, source: str | None, target: str) -> None:
    """Replace schema `target` with a copy of `source` (tables, keys and rows), or an empty one."""
    import psycopg

    with psycopg.connect(dsn) as pg:
        pg.execute(f'DROP SCHEMA IF EXISTS "{target}" CASCADE')
        pg.execute(f'CREATE SCHEMA "{target}"')
        for (table,) in pg.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                                   [source]).fetchall():
            pg.execute(f'CREATE TABLE "{target}"."{table}" (LIKE "{source}"."{table}" INCLUDING ALL)')
            pg.execute(f'INSERT INTO "{target}"."{table}" SELECT * FROM "{source}"."{table}"')


def unfinished_dagster_runs(home: Path) -> int:
    """Runs left 'started' (or queued) in the home's Dagster instance: a killed run must not stay so."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        return len(instance.get_runs(dg.RunsFilter(statuses=[
            dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED,
            dg.DagsterRunStatus.QUEUED])))


def conserved(home: Path) -> bool:
    """DESIGN §3, computed from the raw tables (tests/conservation.py), not by the engine's status."""
    from tests.conservation import store_violations
    from tests.domains import BANK_VIEWS

    return not store_violations(home / "store.duckdb", [v.name for v in BANK_VIEWS])


@dataclass
class Sweep:
    root: Path
    seed: int = 1
    postgres: str | None = None  # a DSN: every run also publishes there (see the module's docstring)
    step_seconds: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.staging = self.root / "staging"

    @staticmethod
    def schema_of(home: Path) -> str:
        """The PostgreSQL schema holding what `home` published (a reference snapshot's: its copy)."""
        return home.name.replace("-", "_")

    def serve(self, schema: str) -> tuple[str, str] | None:
        return (self.postgres, schema) if self.postgres else None

    def snapshot(self, home: Path, schema: str) -> dict[str, list]:
        """The store, and with --postgres the home's published schema."""
        return {**store_snapshot(home), **(published_snapshot(self.postgres, schema) if self.postgres else {})}

    def snapshot_home(self, after_step: int) -> Path:
        return self.root / f"reference-{after_step}"

    def rebuilt_home(self, after_step: int) -> Path:
        """The store after an uninterrupted `inorder rebuild` that followed the `after_step`-th run."""
        rebuilt = self.root / f"rebuilt-{after_step}"
        if not rebuilt.exists():
            shutil.copytree(self.snapshot_home(after_step), rebuilt)
            if self.postgres:
                copy_schema(self.postgres, self.schema_of(self.snapshot_home(after_step)), self.schema_of(rebuilt))
            code, _, output = inorder_run(rebuilt, None, serve=self.serve(self.schema_of(rebuilt)))
            if code != 0:
                raise RuntimeError(f"the reference rebuild failed:\n{output}")
        return rebuilt

    def try_rebuild_crash(self, crash: Crash) -> Outcome:
        """Kill the rebuild; the live store must be the one before it or the one after it; re-run it."""
        started = time.perf_counter()
        before, after = self.snapshot_home(crash.step), self.rebuilt_home(crash.step)
        home = self.root / "case"
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(before, home)
        if self.postgres:
            copy_schema(self.postgres, self.schema_of(before), "case")
        serve = self.serve("case")
        code, _, output = inorder_run(home, None, crash, serve)
        killed = code == -signal.SIGKILL
        if not killed:  # the rebuild ended before the kill came: the case tested nothing, so it fails
            return Outcome(crash.label, False, False, False, None, time.perf_counter() - started,
                           f"the kill did not land (exit {code}): {output[-500:]}")
        live = store_snapshot(home, shadows=False)
        untouched = not first_difference(live, store_snapshot(before))
        swapped = not first_difference(live, store_snapshot(after))
        code, _, output = inorder_run(home, None, serve=serve)
        if code != 0:
            return Outcome(crash.label, killed, False, False, None, time.perf_counter() - started,
                           f"re-run failed: {output[-1500:]}")
        difference = ("" if untouched or swapped else
                      f"after the kill, the live store is neither the old nor the new: "
                      f"{first_difference(live, store_snapshot(before))}")
        difference = difference or first_difference(self.snapshot(home, "case"),
                                                     self.snapshot(after, self.schema_of(after)))
        return Outcome(crash.label, killed, not difference, conserved(home), None, time.perf_counter() - started,
                       difference)

    def prepare(self, runs: int = len(STEPS)) -> None:
        """Stage the batches and run the reference (its first `runs` runs), snapshotting the home after each."""
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        stage(self.staging, self.seed)
        home = self.root / "reference"
        if self.postgres:
            copy_schema(self.postgres, None, "reference")
        for i, step in enumerate(STEPS[:runs]):
            land(self.staging, home, step)
            code, seconds, output = inorder_run(home, step, serve=self.serve("reference"))
            if code != 0:
                raise RuntimeError(f"reference run {i + 1} failed:\n{output}")
            self.step_seconds.append(seconds)
            shutil.copytree(home, self.snapshot_home(i))
            if self.postgres:
                copy_schema(self.postgres, "reference", self.schema_of(self.snapshot_home(i)))
                if not published_snapshot(self.postgres, "reference").get("pg:inorder_published"):
                    raise RuntimeError(f"reference run {i + 1} published nothing to PostgreSQL:\n{output}")

    def try_crash(self, crash: Crash, go_on: bool = False) -> Outcome:
        started = time.perf_counter()
        home = self.root / "case"
        shutil.rmtree(home, ignore_errors=True)
        if crash.step == 0:
            home.mkdir()
        else:
            shutil.copytree(self.snapshot_home(crash.step - 1), home)
        if self.postgres:
            copy_schema(self.postgres, self.schema_of(self.snapshot_home(crash.step - 1)) if crash.step else None,
                        "case")
        serve = self.serve("case")
        step = STEPS[crash.step]
        land(self.staging, home, step)
        code, _, output = inorder_run(home, step, crash, serve)
        killed = code == -signal.SIGKILL
        if not killed:  # the run ended before the kill came: the case tested nothing, so it fails
            return Outcome(crash.label, False, False, conserved(home), None, time.perf_counter() - started,
                           f"the kill did not land (exit {code}): {output[-500:]}")
        code, _, output = inorder_run(home, step, serve=serve)
        if code != 0:
            return Outcome(crash.label, killed, False, False, None, time.perf_counter() - started,
                           f"re-run failed: {output[-1500:]}")
        reference = self.snapshot_home(crash.step)
        difference = first_difference(self.snapshot(home, "case"), self.snapshot(reference, self.schema_of(reference)))
        if not difference and unfinished_dagster_runs(home):
            difference = f"{unfinished_dagster_runs(home)} Dagster runs left unfinished"
        continued = None
        if go_on and crash.step + 1 < len(STEPS):
            land(self.staging, home, STEPS[crash.step + 1])
            code, _, output = inorder_run(home, STEPS[crash.step + 1], serve=serve)
            following = self.snapshot_home(crash.step + 1)
            after = first_difference(self.snapshot(home, "case"), self.snapshot(following, self.schema_of(following)))
            continued = code == 0 and not after
            difference = difference or (after and f"next run: {after}") or (code and output[-1500:]) or ""
        return Outcome(crash.label, killed, not difference, conserved(home), continued,
                       time.perf_counter() - started, difference)


def full_plan(step_seconds: list[float], seed: int, random_kills: int, publishing: bool) -> list[Crash]:
    rng = random.Random(seed)
    plan = [Crash(step, point, nth) for point, step, nth in NAMED if publishing or not point.startswith("publish.")]
    plan += [Crash(step, point, nth, delay) for point, step, nth, delay in INSIDE_DUCKDB]
    last = len(STEPS) - 1
    plan += [Crash(last, point, nth, rebuild=True) for point, nth in REBUILD_POINTS]
    plan += [Crash(last, point, nth, delay, rebuild=True) for point, nth, delay in INSIDE_SWAP]
    for _ in range(random_kills):
        step = rng.randrange(len(STEPS))
        plan.append(Crash(step, None, after_s=round(rng.uniform(0.5, step_seconds[step]), 2)))
    return plan


def format_table(outcomes: list[Outcome]) -> str:
    lines = [f"{'case':58} {'killed':6} {'same':5} {'conserved':9} {'next':5} {'s':>5}"]
    for o in outcomes:
        nxt = "-" if o.continued is None else "yes" if o.continued else "NO"
        lines.append(f"{o.label:58} {'yes' if o.killed else 'no':6} {'yes' if o.identical else 'NO':5} "
                     f"{'yes' if o.conserved else 'NO':9} {nxt:5} {o.seconds:5.1f}"
                     + (f"  {o.detail}" if o.detail else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="four crash points, as CI runs them")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--random", type=int, default=10, help="random-moment kills (full sweep)")
    p.add_argument("--out", default=".inorder/crash-sweep")
    p.add_argument("--postgres", metavar="DSN",
                   help="publish every run to this PostgreSQL and compare it too ('start': a throwaway server)")
    args = p.parse_args(argv)
    if args.postgres == "start":
        from tests.postgres_server import PostgresServer

        with PostgresServer() as server:
            args.postgres = server.dsn
            return sweep_main(args)
    return sweep_main(args)


def sweep_main(args: argparse.Namespace) -> int:
    sweep = Sweep(Path(args.out).resolve(), args.seed, args.postgres)
    publishing = bool(args.postgres)
    plan = [c for c in QUICK if publishing or not c.point.startswith("publish.")] if args.quick else None
    sweep.prepare(runs=3 if args.quick else len(STEPS))
    print(f"reference: {len(STEPS)} runs in {', '.join(f'{s:.1f}' for s in sweep.step_seconds)} s", flush=True)
    plan = plan or full_plan(sweep.step_seconds, args.seed, args.random, publishing)
    outcomes = []
    for i, crash in enumerate(plan):
        outcomes.append(sweep.try_rebuild_crash(crash) if crash.rebuild else sweep.try_crash(crash, go_on=i % 4 == 0))
        print(format_table(outcomes[-1:]).splitlines()[-1], flush=True)
    print(format_table(outcomes))
    survived = [o for o in outcomes if o.killed and o.identical and o.conserved and o.continued is not False]
    killed = sum(o.killed for o in outcomes)
    print(f"{len(survived)}/{len(outcomes)} crash cases survived ({killed} killed mid-run, "
          f"{len({o.label.split(': ')[1].split('#')[0] for o in outcomes if '#' in o.label})} distinct named points)")
    (sweep.root / "results.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0 if len(survived) == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
