"""One side of a side-by-side case (bench/studies/side_by_side.py): the engine of ONE checkout, in a process of its own.

    PYTHONPATH=<checkout> python bench/studies/side.py PLAN.json RESULT.json

Run by path, not as `-m bench.studies.side`: it imports nothing from the bench's checkout, only the engine
(`pipelines`) and the bank views (`views`) of the checkout on PYTHONPATH, so the same file drives
c8cd829 and any later engine. On stdout it says `run <name>` as each run starts and `phase <name>` as
each phase starts, for the runner that samples this process tree's memory; its figures go to RESULT.json.

The plan: a home folder, then runs, each landing one file at its own logical time; every run is
timed by phase. The phases are found by wrapping the engine functions named in PHASE_HOOKS (the
first that exists for each phase); an engine without one still reports its whole run and the
Spark and commit seconds of its ProjectionStats.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import shutil
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # the bench's folder: nothing of the bench's checkout may shadow the engine's

T0 = datetime(2026, 11, 2, tzinfo=timezone.utc)
# phase -> (module, function) candidates, tried in order: the first one found is wrapped
PHASE_HOOKS = {
    # load_inputs is wrapped where run_pass calls it (pipelines/engine/spark_pass.py since the split of project.py)
    "state_load": [("pipelines.engine.spark_pass", "load_inputs"), ("pipelines.engine.project", "load_inputs"),
                   ("pipelines.project", "load_inputs")],
    "commit": [("pipelines.facade", "commit_pass"), ("pipelines.run", "commit_pass")],
}
# where each engine function the bench calls lives: the package's rooms, then the flat layout before them
ENGINE_NAMES = {"run": ("pipelines.facade", "pipelines.run"),
                "spark_session": ("pipelines.spark.session", "pipelines.spark"),
                "Home": ("pipelines.store.database", "pipelines.store")}


def engine_name(name: str):
    """`name` from the first of its ENGINE_NAMES modules that this checkout's engine has."""
    for module in ENGINE_NAMES[name]:
        try:
            return getattr(importlib.import_module(module), name)
        except ModuleNotFoundError:
            continue
    raise ImportError(f"no engine module of {ENGINE_NAMES[name]} defines {name}")


def say_phase(name: str) -> None:
    print(f"phase {name}", flush=True)


class PhaseClock:
    """Seconds per phase of the current run, from the wrapped engine functions."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.hooked: dict[str, str] = {}

    def install(self) -> None:
        for phase, candidates in PHASE_HOOKS.items():
            for module_name, attribute in candidates:
                try:
                    module = importlib.import_module(module_name)
                except ModuleNotFoundError:  # an engine of the other layout
                    continue
                if hasattr(module, attribute):
                    setattr(module, attribute, self._timed(phase, getattr(module, attribute)))
                    self.hooked[phase] = f"{module_name}.{attribute}"
                    break

    def _timed(self, phase: str, function):
        after = "spark" if phase == "state_load" else "driver"  # what the pass does next

        @functools.wraps(function)
        def timed(*args, **kwargs):
            say_phase(phase)
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - started
                say_phase(after)

        return timed


def land(source: Path, landing: Path) -> None:
    landing.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, landing / source.name)
    except OSError:
        shutil.copyfile(source, landing / source.name)


def measured_run(spark, home, views, step: dict, clock: PhaseClock) -> dict:
    run = engine_name("run")

    land(Path(step["file"]), home.landing)
    clock.seconds = {}
    cpu_before = os.times()
    print(f"run {step['name']}", flush=True)
    say_phase("ingest")
    report = run(spark, home, views, now=T0 + timedelta(seconds=step["at_s"]))
    cpu_after = os.times()
    say_phase("idle")
    stats = report.projection
    state_load = clock.seconds.get("state_load")
    return {
        "name": step["name"], "wall_s": report.seconds, "ingest_s": report.ingest_seconds,
        "state_load_s": state_load,
        # ProjectionStats.spark_seconds is the whole pass, its state load included
        "spark_s": stats.spark_seconds - (state_load or 0.0),
        "commit_s": stats.commit_seconds,
        "commit_call_s": clock.seconds.get("commit"),
        "driver_cpu_s": (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system),
        "passes": stats.passes,
        "streams_touched": dict(stats.streams_touched),
        "by_view": {view: dict(counts) for view, counts in stats.by_view.items()},
    }


def main(plan_path: str, result_path: str) -> None:
    plan = json.loads(Path(plan_path).read_text())
    import pipelines
    from pipelines.registry import load_views
    spark_session, Home = engine_name("spark_session"), engine_name("Home")

    views = load_views("views")
    clock = PhaseClock()
    clock.install()
    result: dict = {"engine": str(Path(pipelines.__file__).resolve().parent), "hooks": clock.hooked,
                    "master": os.environ.get("INORDER_SPARK_MASTER"), "runs": []}
    say_phase("spark_start")
    started = time.perf_counter()
    spark = spark_session()
    result["spark_start_s"] = time.perf_counter() - started
    home = Home(Path(plan["home"])).ensure()
    result["database"] = str(home.database)
    try:
        for step in plan["runs"]:
            result["runs"].append(measured_run(spark, home, views, step, clock))
            Path(result_path).write_text(json.dumps(result, indent=1))  # what ran so far, if a later run fails
    finally:
        spark.stop()
    Path(result_path).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:3])
