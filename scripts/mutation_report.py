"""`make mutation`'s report: per mutated file, how many mutants were killed, survived, timed out or had
no test, the share detected, and each survivor: explained (in docs/mutants_explained.toml, with the
reason it cannot or need not be killed) or not (`mutmut show NAME` prints its diff).

    python scripts/mutation_report.py [--target 90]

The share counts a timed-out mutant as detected (the walk looped), over the mutants checked so far.
Exits 1 when some mutants are not checked yet, or when a file is under the target and one of its
survivors is not explained. An explanation whose mutant is no longer a survivor is listed as stale."""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code

FILES = tuple(tomllib.loads(Path("pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"])
EXPLAINED = Path("docs/mutants_explained.toml")
UNDETECTED = ("survived", "no tests", "suspicious")


def statuses(path: str) -> dict[str, str]:
    meta = Path("mutants") / f"{path}.meta"
    if not meta.exists():
        return {}
    codes = json.loads(meta.read_text()).get("exit_code_by_key", {})
    return {name: status_by_exit_code[code] for name, code in codes.items()}


def explanations() -> dict[str, str]:
    """Mutant name -> why it survives (the file groups them by source file and kind)."""
    found: dict[str, str] = {}
    for kinds in tomllib.loads(EXPLAINED.read_text()).values():
        for kind in kinds.values():
            for name in kind["mutants"]:
                found[name] = kind["why"]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=90.0, help="percent of mutants detected, per file")
    args = parser.parse_args(argv)
    why = explanations()
    failing = False
    print(f"{'file':32} {'mutants':>7} {'checked':>7} {'killed':>7} {'timeout':>7} {'survived':>8} {'no tests':>8} "
          f"{'detected':>8} {'explained':>9}")
    undetected_anywhere: set[str] = set()
    for path in FILES:
        found = statuses(path)
        counts = Counter(found.values())
        checked = len(found) - counts["not checked"]
        killed = counts["killed"] + counts["caught by type check"]
        share = 100.0 * (killed + counts["timeout"]) / checked if checked else 0.0
        undetected = sorted(name for name, status in found.items() if status in UNDETECTED)
        undetected_anywhere.update(undetected)
        unexplained = [name for name in undetected if name not in why]
        failing |= checked < len(found) or (share < args.target and bool(unexplained))
        print(f"{path:32} {len(found):7} {checked:7} {killed:7} {counts['timeout']:7} {counts['survived']:8} "
              f"{counts['no tests']:8} {share:7.1f}% {len(undetected) - len(unexplained):9}")
        for name in undetected:
            print(f"    {found[name]}: {name}" + (f"  [{why[name]}]" if name in why else "  [NOT EXPLAINED]"))
    stale = sorted(set(why) - undetected_anywhere)
    if stale:
        print(f"explained but no longer surviving ({len(stale)}): drop them from {EXPLAINED}")
        for name in stale:
            print(f"    {name}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
