#!/usr/bin/env bash
# Installs everything, makes the demo data if there is none (DOMAIN=bank|shop), and opens the Dagster UI on it
# (http://127.0.0.1:3000, DAGSTER_HOME under INORDER_HOME), with a warm Spark server for its runs
# (`inorder spark start`; stopped with the UI unless it was running before). Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
DOMAIN="${DOMAIN:-bank}"  # as in scripts/demo.sh: bank or shop
[ "$DOMAIN" = shop ] && export INORDER_VIEWS="${INORDER_VIEWS:-shop.views}"
export INORDER_HOME="${INORDER_HOME:-$PWD/.inorder/demo$([ "$DOMAIN" = shop ] && echo -shop)}"
if [ ! -e "$INORDER_HOME/store.duckdb" ]; then
  INORDER_HOME="$INORDER_HOME" DOMAIN="$DOMAIN" bash scripts/demo.sh
fi
. .venv/bin/activate
export DAGSTER_HOME="${DAGSTER_HOME:-$INORDER_HOME/dagster}"
python -c "from inorder.dagster_runs import dagster_home; from pipelines.store import Home; dagster_home(Home.from_env())"
if ! inorder spark status >/dev/null; then  # exit 3: not running
  inorder spark start
  trap 'inorder spark stop' EXIT
fi
dagster dev -h 127.0.0.1 -p "${PORT:-3000}"
