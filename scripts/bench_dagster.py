"""How long a 10k-event batch takes through Dagster, cold (Spark starts) and warm (session reused).

    python scripts/bench_dagster.py

One process, one instance: batch 1 pays the JVM start, batch 2 reuses the session.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inorder.dagster_runs import run_through_dagster  # noqa: E402
from pipelines.store import Home  # noqa: E402
from views.bank_generator import GeneratorConfig, generate  # noqa: E402


def main() -> None:
    root = Path("/tmp/inorder-bench-dagster")
    shutil.rmtree(root, ignore_errors=True)
    home = Home(root).ensure()
    staging = root / "staging"
    generate(staging, GeneratorConfig(events=20_000, streams=200, batches=2, seed=1))
    t0 = datetime(2026, 11, 2, tzinfo=timezone.utc)
    for i, path in enumerate(sorted(staging.iterdir())):
        shutil.move(str(path), home.landing / path.name)
        started = time.perf_counter()
        report = run_through_dagster(home, t0 + timedelta(minutes=i))
        total = time.perf_counter() - started
        records = sum(m.get("records", 0) for m in report.ingested)
        print(f"batch {i + 1} ({records:,} records, {'cold' if i == 0 else 'warm'}): {total:.1f}s through Dagster "
              f"({len(report.run_ids)} runs)")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from pipelines.spark import spark_session; spark_session()"],
                   check=True, capture_output=True)
    print(f"Spark session start alone (JVM, in a fresh process): {time.perf_counter() - started:.1f}s")


if __name__ == "__main__":
    main()
