#!/usr/bin/env bash
# Sets up and runs every check: lint, types, and the test suite (real Prometheus included).
# Extra arguments go to pytest, e.g. scripts/test.sh -k reload
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# kube-apiserver, kube-scheduler, kubectl and etcd from their Go modules (cached after the first
# build) for the end-to-end suite; without Go, run `python3 -m pytest -m "not e2e"` instead.
bin_dir=$(bash tests/e2e/build-k8s.sh)
export PATH="$bin_dir:$PATH"
python3 -m ruff check .
python3 -m ruff format --check .
python3 -m mypy
python3 -m pytest "$@"
