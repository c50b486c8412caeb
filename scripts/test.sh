#!/usr/bin/env bash
# Sets up and runs every check: lint, types, and the test suite (real Prometheus included).
# Extra arguments go to pytest, e.g. scripts/test.sh -k reload
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
python3 -m ruff check .
python3 -m ruff format --check .
python3 -m mypy
python3 -m pytest "$@"
