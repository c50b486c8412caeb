#!/usr/bin/env bash
# Sets up and runs the benchmark suite (wrk from Debian, the Go reference built with go).
# Arguments go to benchmarks/run.py, e.g. scripts/bench.sh --quick --duration 3
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
if ! command -v wrk >/dev/null 2>&1; then
  SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends wrk >/dev/null
fi
exec .venv/bin/python benchmarks/run.py "$@"
