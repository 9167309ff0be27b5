#!/usr/bin/env bash
# Installs everything, makes the demo data if there is none, and opens the Dagster UI on it
# (http://127.0.0.1:3000, DAGSTER_HOME under INORDER_HOME). Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export INORDER_HOME="${INORDER_HOME:-$PWD/.inorder/demo}"
if [ ! -e "$INORDER_HOME/store.duckdb" ]; then
  INORDER_HOME="$INORDER_HOME" bash scripts/demo.sh
fi
. .venv/bin/activate
export DAGSTER_HOME="${DAGSTER_HOME:-$INORDER_HOME/dagster}"
python -c "from inorder.dagster_runs import dagster_home; from pipelines.store import Home; dagster_home(Home.from_env())"
exec dagster dev -h 127.0.0.1 -p "${PORT:-3000}"
