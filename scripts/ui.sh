#!/usr/bin/env bash
# Installs everything and opens the Dagster UI (http://127.0.0.1:3000, DAGSTER_HOME under INORDER_HOME).
# Its runs share the home's warm Spark server with the CLI's, as every run does (INORDER_SPARK_WARM).
# Ctrl-C stops it.
#
# With INORDER_HOME set, it serves that home as it is (a missing or empty folder becomes an empty home
# whose landing folder the sensor watches); it never runs the demo there, unless the demo made it.
# Without INORDER_HOME, it serves the demo's home (DOMAIN=bank|shop), made by scripts/demo.sh if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/home_kind.sh
DOMAIN="${DOMAIN:-bank}"  # as in scripts/demo.sh: bank or shop
if [ -n "${INORDER_HOME:-}" ]; then
  export INORDER_HOME="$(realpath -m "$INORDER_HOME")"
  case "$(home_kind "$INORDER_HOME")" in
    demo) [ -e "$INORDER_HOME/store.duckdb" ] || INORDER_DEMO_HOME="$INORDER_HOME" DOMAIN="$DOMAIN" bash scripts/demo.sh ;;
    missing|empty) mkdir -p "$INORDER_HOME/landing"
                   echo "ui: serving the new, empty home $INORDER_HOME: drop batch files into $INORDER_HOME/landing" >&2 ;;
    user) echo "ui: serving your home $INORDER_HOME as it is" >&2 ;;
  esac
else
  export INORDER_HOME="$PWD/.inorder/demo$([ "$DOMAIN" = shop ] && echo -shop)"
  [ "$DOMAIN" = shop ] && export INORDER_VIEWS=shop.views || export INORDER_VIEWS=views
  if [ ! -e "$INORDER_HOME/store.duckdb" ]; then
    INORDER_DEMO_HOME="$INORDER_HOME" DOMAIN="$DOMAIN" bash scripts/demo.sh  # refuses a home it did not make
  fi
fi
bash scripts/setup.sh
. .venv/bin/activate
export DAGSTER_HOME="${DAGSTER_HOME:-$INORDER_HOME/dagster}"
python -c "from inorder.dagster_runs import dagster_home; from pipelines.store.database import Home; from pipelines.config import Settings; dagster_home(Home.of(Settings.from_env()))"
echo "ui: serving the Dagster UI at http://127.0.0.1:${PORT:-3000} for the home $INORDER_HOME" \
     "(DAGSTER_HOME $DAGSTER_HOME); Ctrl-C stops it" >&2
if [ "$(home_kind "$INORDER_HOME")" = demo ]; then
  # the demo's runs are at fixed logical times; the UI's runs (sensor, tick schedule) use the wall clock
  echo "ui: the demo projected at logical time 2026-11-02T00:16Z; runs from the UI take the wall clock as" \
       "theirs, so the first one times out every gap still buffered (gaps skipped, reason timeout): expected" >&2
fi
# quiet: the services log warnings and errors only (an idle daemon would log every skipped sensor
# evaluation, about once a second). `dagster dev` says to use `dg dev`, which lives in dagster-dg-cli,
# a package the pinned Dagster (1.13.27) does not need and requirements.lock does not carry: `dagster
# dev` serves the same, so its SupersessionWarning (a FutureWarning) is silenced, and only it.
PYTHONWARNINGS='ignore:Function `dev_command` is superseded:FutureWarning' \
  dagster dev -h 127.0.0.1 -p "${PORT:-3000}" --log-level warning
