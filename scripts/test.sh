#!/usr/bin/env bash
# Sets up and runs every check: lint, types, package layering (lint-imports), and the test suite
# (real Prometheus, node_exporter and Kubernetes components included). Extra arguments go to
# pytest, e.g. scripts/test.sh -k reload
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
# kube-apiserver, kube-scheduler, kubectl and etcd from their Go modules, and helm (each cached
# after the first build) for the end-to-end suite and the chart tests; without Go, run
# `.venv/bin/python -m pytest -m "not e2e"` instead.
bin_dir=$(bash tests/e2e/build-k8s.sh)
helm=$(bash charts/build-helm.sh)
# vmauth that routes on a tenant header, and Thanos (sidecar, query), for
# tests/integration/test_backends.py (cached likewise; harness/victoria.py and harness/thanos.py
# name the same versions)
bash scripts/build-go-tool.sh --module github.com/VictoriaMetrics/VictoriaMetrics vmauth ./app/vmauth v1.150.0 "10-60 s" >/dev/null
bash scripts/build-go-tool.sh --module github.com/thanos-io/thanos --tags slicelabels thanos ./cmd/thanos v0.42.4 "about 3 min" >/dev/null
export PATH="$PWD/.venv/bin:$bin_dir:$(dirname "$helm"):$PATH"
python -m ruff check .
python -m ruff format --check .
python -m mypy
lint-imports
python -m pytest "$@"
