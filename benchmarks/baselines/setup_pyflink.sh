#!/usr/bin/env bash
# Create benchmarks/.venv-pyflink with PyFlink (apache-flink) for the PyFlink baseline.
# Usage: benchmarks/baselines/setup_pyflink.sh [python-executable]
# Env: PYFLINK_VERSION (default 2.3.0), PYFLINK_VENV (default benchmarks/.venv-pyflink).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${PYFLINK_VENV:-$HERE/../.venv-pyflink}"
PY="${1:-python3}"
VERSION="${PYFLINK_VERSION:-2.3.0}"

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install "apache-flink==${VERSION}" numpy pyarrow
"$VENV/bin/python" -c "import pyflink, importlib.metadata as m; print('pyflink', m.version('apache-flink'), 'in', '$VENV')"
