#!/usr/bin/env bash
# Installs everything and runs the test suite; `--fast` runs only tests/fast (no JVM, no subprocess, no Dagster
# run), with fewer examples: the loop after every change. Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the `long` tests (cluster, benchmark suite, soak) run in scripts/reliability.sh, not here;
# the `ci` Hypothesis profile: derandomized, 500 examples for the fast model tests; `--fast` draws the `fast`
# profile's fifth of the examples, new ones every run (tests/profiles.py)
profile=ci
where=()
if [ "${1:-}" = "--fast" ]; then
  shift
  where=(tests/fast)
  profile=fast
fi
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-$profile}"
# three workers on 2 cores, both kept busy while tests wait on timers and servers (four measured slower: docs/TESTING.md);
# each test to the next free worker, but a module's tests that share a fixture it builds once stay together, and the
# long tests go first (tests/conftest.py, docs/TESTING.md); `-n 0` runs in one process
exec .venv/bin/python -m pytest -m "not long" -n 3 --dist loadgroup --no-loadscope-reorder "${where[@]}" "$@"
