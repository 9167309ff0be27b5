#!/usr/bin/env bash
# Installs everything, generates bank demo batches with disorder, duplicates, gaps and poison
# messages, ingests and projects them, lets the open gaps time out, and prints the per-view summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export INORDER_HOME="${INORDER_HOME:-$PWD/.inorder/demo}"
EVENTS="${EVENTS:-50000}"
rm -rf "$INORDER_HOME"
mkdir -p "$INORDER_HOME/landing"
. .venv/bin/activate
inorder generate --out "$INORDER_HOME/landing" --events "$EVENTS" --streams $((EVENTS / 50 + 1)) --batches 8 \
  --disorder 0.1 --duplicates 0.02 --gaps 0.005 --poison 0.005 --seed 7
echo "--- run 1: ingest and project every batch at logical time 2026-11-02T00:00:00Z"
inorder run --now 2026-11-02T00:00:00Z
echo "--- run 2: a tick 15 minutes later, so gaps older than gap_timeout (600 s) are skipped"
inorder run --now 2026-11-02T00:15:00Z
echo "--- summary"
inorder status
echo "--- newest errors"
inorder errors --limit 8
echo "store: $INORDER_HOME/store.duckdb"
