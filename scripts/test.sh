#!/usr/bin/env bash
# Installs everything and runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the `long` tests (cluster, benchmark suite) run in scripts/reliability.sh, keeping CI under 25 minutes
exec .venv/bin/python -m pytest -m "not long" "$@"
