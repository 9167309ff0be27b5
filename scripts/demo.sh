#!/usr/bin/env bash
# Installs everything, generates demo batches with disorder, duplicates, conflicts, gaps and poison
# messages, ingests and projects them, lets open gaps time out, delivers a straggler batch (whose
# messages for skipped gaps are now late), says which checks are not green on purpose, and prints the
# per-view summary.
# DOMAIN=bank (default: the bank's views/) or DOMAIN=shop (the online shop's shop/views/).
# EVENTS=N generates N events (default 50000) over N/50+1 streams, e.g. EVENTS=2000 for a quick run
# (tests/cli/test_quickstart.py does).
#
# It works in its own home only: INORDER_DEMO_HOME (default .inorder/demo, or .inorder/demo-shop), never
# INORDER_HOME. That home holds a marker file saying the demo made it; the demo deletes and remakes a
# home with that marker, uses a missing or empty folder, and refuses any other (a user's files).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/home_kind.sh
DOMAIN="${DOMAIN:-bank}"
# what each domain's checks show on purpose (each run's line ends with its checks' verdicts)
case "$DOMAIN" in
  bank) DEMO_VIEWS=views; DEFAULT_HOME="$PWD/.inorder/demo"
        ON_PURPOSE="none is red or yellow on purpose: the late messages, refusals and conflicts the demo makes stay \
within the bank views' alerts (views/design.py), so every run above ends with all its checks passed" ;;
  shop) DEMO_VIEWS=shop.views; DEFAULT_HOME="$PWD/.inorder/demo-shop"
        ON_PURPOSE="on purpose, the shop's views keep the default alerts (warn above 1 %, fail above 5 %): the \
refusals its poison messages cause turn reject_rate yellow or red, the last batch's late messages turn late_rate \
yellow, and orders parks a stream on a refusal (on_error=\"park\"), so no_parked_streams warns" ;;
  *) echo "DOMAIN must be bank or shop, not '$DOMAIN'" >&2; exit 2 ;;
esac
DEMO_HOME="$(realpath -m "${INORDER_DEMO_HOME:-$DEFAULT_HOME}")"
case "$(home_kind "$DEMO_HOME")" in
  user) echo "demo: $DEMO_HOME holds files the demo did not make (no $DEMO_MARKER): left as it is." >&2
        echo "demo: set INORDER_DEMO_HOME to a new folder for the demo's home." >&2
        exit 2 ;;
  demo) rm -rf "$DEMO_HOME" ;;  # the demo's own home, made by an earlier demo: start afresh
esac
if [ -n "${INORDER_HOME:-}" ] && [ "$(realpath -m "$INORDER_HOME")" != "$DEMO_HOME" ]; then
  echo "demo: INORDER_HOME ($INORDER_HOME) is left alone; the demo uses its own home $DEMO_HOME" >&2
fi
mkdir -p "$DEMO_HOME/landing" "$DEMO_HOME/staging"
echo "made by scripts/demo.sh: the demo deletes and remakes this folder when it runs again" > "$DEMO_HOME/$DEMO_MARKER"
export INORDER_HOME="$DEMO_HOME" INORDER_VIEWS="$DEMO_VIEWS"
EVENTS="${EVENTS:-50000}"
bash scripts/setup.sh
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
echo "--- checks: $ON_PURPOSE"
echo "--- summary"
inorder status
echo "--- newest errors"
inorder errors --limit 8
echo "--- streams still blocked, oldest first"
inorder pending --limit 5
echo "store: $INORDER_HOME/store.duckdb"
echo "--- to work with it in this shell:"
echo ". .venv/bin/activate"
echo "export INORDER_HOME=$INORDER_HOME INORDER_VIEWS=$INORDER_VIEWS"
