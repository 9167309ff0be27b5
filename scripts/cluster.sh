#!/usr/bin/env bash
# A loopback Spark cluster (standalone master, 2 workers, Spark Connect server) on 127.0.0.1,
# from pyspark's own distribution: scripts/cluster.sh start|stop|status.
# Logs and pids under $INORDER_CLUSTER_DIR (default .inorder/cluster). See scripts/cluster.py.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python scripts/cluster.py "$@"
