#!/usr/bin/env bash
# Sets up and runs the demo: real Prometheus + exporter with five nodes + loadext + scheduler calls.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec python3 demo/run.py
