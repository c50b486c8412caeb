#!/usr/bin/env bash
# Installs what loadext's demo and tests need on a fresh Debian machine: the real Prometheus
# server (Debian package, for tests and the demo) and loadext itself with its dev tools.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  # --no-install-recommends: the package would otherwise pull node-exporter and ~25 more.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -e '.[dev]'
