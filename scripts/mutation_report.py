"""`make mutation`'s report: per mutated file, how many mutants were killed, survived, timed out or had
no test, the share killed, and the survivors' names (`mutmut show NAME` prints one's diff).

    python scripts/mutation_report.py [--target 90]

The share counts a timed-out mutant as detected, over the mutants checked so far. Exits 1 when a
file's share is under the target, or some of its mutants are not checked yet."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code

FILES = ("pipelines/order.py", "pipelines/apply.py", "pipelines/inspect.py")


def statuses(path: str) -> dict[str, str]:
    meta = Path("mutants") / f"{path}.meta"
    if not meta.exists():
        return {}
    codes = json.loads(meta.read_text()).get("exit_code_by_key", {})
    return {name: status_by_exit_code[code] for name, code in codes.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=90.0, help="percent of mutants killed, per file")
    args = parser.parse_args(argv)
    short = False
    print(f"{'file':24} {'mutants':>7} {'checked':>7} {'killed':>7} {'survived':>8} {'timeout':>7} {'no tests':>8} "
          f"{'killed %':>8}")
    for path in FILES:
        found = statuses(path)
        counts = Counter(found.values())
        checked = len(found) - counts["not checked"]
        killed = counts["killed"] + counts["caught by type check"]
        share = 100.0 * (killed + counts["timeout"]) / checked if checked else 0.0  # a timeout is a detected mutant
        short |= share < args.target or checked < len(found)
        print(f"{path:24} {len(found):7} {checked:7} {killed:7} {counts['survived']:8} {counts['timeout']:7} "
              f"{counts['no tests']:8} {share:7.1f}%")
        for name, status in sorted(found.items()):
            if status in ("survived", "no tests", "suspicious"):
                print(f"    {status}: {name}")
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
