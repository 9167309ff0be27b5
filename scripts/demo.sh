#!/usr/bin/env bash
# Installs everything, generates demo batches with disorder, duplicates, conflicts, gaps and poison
# messages, ingests and projects them, lets open gaps time out, delivers a straggler batch (whose
# messages for skipped gaps are now late), and prints the per-view summary.
# DOMAIN=bank (default: the bank's views/) or DOMAIN=shop (the online shop's shop/views/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
DOMAIN="${DOMAIN:-bank}"
case "$DOMAIN" in
  bank) export INORDER_VIEWS="${INORDER_VIEWS:-views}"; DEFAULT_HOME="$PWD/.inorder/demo" ;;
  shop) export INORDER_VIEWS="${INORDER_VIEWS:-shop.views}"; DEFAULT_HOME="$PWD/.inorder/demo-shop" ;;
  *) echo "DOMAIN must be bank or shop, not '$DOMAIN'" >&2; exit 2 ;;
esac
export INORDER_HOME="${INORDER_HOME:-$DEFAULT_HOME}"
EVENTS="${EVENTS:-50000}"
rm -rf "$INORDER_HOME"
mkdir -p "$INORDER_HOME/landing" "$INORDER_HOME/staging"
. .venv/bin/activate
inorder generate --domain "$DOMAIN" --out "$INORDER_HOME/staging" --events "$EVENTS" --streams $((EVENTS / 50 + 1)) --batches 9 \
  --disorder 0.1 --duplicates 0.02 --gaps 0.005 --poison 0.005 --seed 7
mv "$INORDER_HOME"/staging/batch-0000[1-8].jsonl "$INORDER_HOME/landing/"
echo "--- run 1: ingest and project batches 1-8 at logical time 2026-11-02T00:00:00Z"
inorder run --now 2026-11-02T00:00:00Z
echo "--- run 2: no new batch, a tick 15 minutes later: gaps older than gap_timeout (600 s) are skipped"
inorder run --now 2026-11-02T00:15:00Z
echo "--- run 3: batch 9 arrives; its messages for gaps already skipped are logged as late"
mv "$INORDER_HOME/staging/batch-00009.jsonl" "$INORDER_HOME/landing/"
inorder run --now 2026-11-02T00:16:00Z
echo "--- summary"
inorder status
echo "--- newest errors"
inorder errors --limit 8
echo "--- streams still blocked, oldest first"
inorder pending --limit 5
echo "store: $INORDER_HOME/store.duckdb"
