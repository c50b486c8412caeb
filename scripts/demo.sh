#!/usr/bin/env bash
# Sets up and runs the demo: a real Prometheus, an exporter with five nodes, loadext, and
# scheduler calls with their decisions. Everything is installed into .venv (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python demo/run.py "$@"
