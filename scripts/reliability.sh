#!/usr/bin/env bash
# The long reliability runs (CI runs only a few crash points):
#  1. the full crash sweep: `inorder run` killed with SIGKILL at every named crash point, inside
#     DuckDB's commit and checkpoint, and at seeded random moments; each re-run must give the
#     store of the uninterrupted run (46 cases, 54 min measured on a shared 2-core machine);
#  2. the soak: 500 small batches with random ticks through one engine process (12 min measured);
#  3. the tests marked `long`: the soak at 60 batches, the same runs on a loopback Spark cluster and through
#     Spark Connect, the Spark peer of bench case 8, and the benchmark suite at tiny sizes (about 10 min).
# Figures are printed and kept as JSON under .inorder/crash-sweep/ and .inorder/soak/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
status=0
python -m tests.crash_sweep --seed "${SEED:-1}" --random "${RANDOM_KILLS:-10}" --postgres start || status=1
python -m tests.soak --batches "${SOAK_BATCHES:-500}" --seed "${SEED:-1}" || status=1
python -m pytest -q -m long || status=1
exit $status
