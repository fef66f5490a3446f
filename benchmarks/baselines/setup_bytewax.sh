#!/usr/bin/env bash
# Create benchmarks/.venv-bytewax with Bytewax for the Bytewax baseline.
# Usage: benchmarks/baselines/setup_bytewax.sh [python-executable]
# Env: BYTEWAX_VERSION (default 0.21.1), BYTEWAX_VENV (default benchmarks/.venv-bytewax).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${BYTEWAX_VENV:-$HERE/../.venv-bytewax}"
PY="${1:-python3}"
VERSION="${BYTEWAX_VERSION:-0.21.1}"

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install "bytewax==${VERSION}"
"$VENV/bin/python" -c "import bytewax, importlib.metadata as m; print('bytewax', m.version('bytewax'), 'in', '$VENV')"
