#!/usr/bin/env bash
# Installs everything inorder needs into ./.venv (idempotent). Needs Python >= 3.11 and Java 17.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "inorder needs Python >= 3.11 (tried '$PYTHON'; set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi

if ! java -version >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "Java not found: installing openjdk-17-jre-headless (running as root)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "inorder needs Java 17 for Spark, and 'java' is not on PATH." >&2
    echo "Install it, e.g. 'sudo apt-get install openjdk-17-jre-headless' (Debian/Ubuntu)," >&2
    echo "'brew install openjdk@17' (macOS), or set JAVA_HOME and put \$JAVA_HOME/bin on PATH." >&2
    exit 1
  fi
fi

# PostgreSQL serves production reads (INORDER_SERVE_POSTGRES); the tests start a throwaway server of their own
if [ -z "${INORDER_PG_BIN:-}" ] && ! command -v initdb >/dev/null 2>&1 \
    && ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "PostgreSQL server not found: installing Debian's postgresql (running as root)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "warning: no PostgreSQL server binaries (initdb): the publishing tests need them." >&2
    echo "Install them ('sudo apt-get install postgresql') or set INORDER_PG_BIN to their folder." >&2
  fi
fi

# the venv is current when it was installed from these very files: then there is nothing to do (and
# nothing to print); any change to them, or a venv made anew, installs again
STAMP=.venv/.inorder-setup-stamp
WANT="$("$PYTHON" -c 'import hashlib, sys; print(hashlib.sha256(b"".join(open(f, "rb").read() for f in sys.argv[1:])).hexdigest())' \
  requirements.lock pyproject.toml)"
if ! { [ -x .venv/bin/python ] && [ -x .venv/bin/inorder ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ]; }; then
  if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
  fi
  .venv/bin/python -m pip install -q --upgrade pip==26.3
  # requirements.lock pins every package (with test tools) to versions seen working together
  .venv/bin/python -m pip install -q -r requirements.lock
  .venv/bin/python -m pip install -q --no-deps -e .
  echo "$WANT" > "$STAMP"
fi
# the project's own bytecode, written ahead: where PYTHONDONTWRITEBYTECODE is set (CI's machines), every process
# compiled the modules it imports again (0.06-0.1 s of each `inorder` command); up-to-date files are left as they are
.venv/bin/python -m compileall -q -j 0 pipelines inorder assets resources views demos shop tests >/dev/null || true
# Spark's classes recorded once for this Java and these jars (~/.cache/inorder): a JVM then starts in about
# half the time (pipelines/spark/class_archive.py; about 40 s, once; a failure only warns)
.venv/bin/python -m pipelines.spark.class_archive
