#!/usr/bin/env bash
# Installs what loadext needs on a fresh Debian machine, never into the system interpreter
# (Debian's python3 refuses that: PEP 668). Usage: scripts/setup.sh [dev]
#   - Debian packages: prometheus (the real server the demo and tests run), python3-venv where
#     Debian's python3 lacks it; with `dev` also prometheus-node-exporter (a real exporter the
#     tests scrape), victoria-metrics (VictoriaMetrics and vmauth, backends the tests query) and
#     mmdebstrap, buildah and umoci (the image and fresh-Debian tests).
#   - a project virtualenv, .venv (git-ignored), with loadext installed editable; with `dev` also
#     its dev tools. Skipped when pyproject.toml and the Python have not changed since the last
#     install (a stamp in .venv), so a second run takes a second.
# pip's output goes to .venv/install.log; on failure its tail is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""; [[ "${1:-}" == dev ]] && extras="[dev]"
python=${LOADEXT_PYTHON:-python3}
SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

updated=0
apt_install() {
  if [[ $updated == 0 ]]; then $SUDO apt-get update -qq; updated=1; fi
  echo "setup: installing Debian packages: $*" >&2
  # --no-install-recommends: prometheus would otherwise pull node-exporter and ~25 more.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

packages=()
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || packages+=(prometheus)
if [[ -n $extras ]]; then
  for tool in prometheus-node-exporter victoria-metrics mmdebstrap buildah umoci; do
    command -v "$tool" >/dev/null 2>&1 || packages+=("$tool")
  done
fi
command -v "$python" >/dev/null 2>&1 || packages+=(python3)
if [[ ${#packages[@]} -gt 0 ]]; then apt_install "${packages[@]}"; fi

if [[ ! -x .venv/bin/python ]]; then
  # Debian splits ensurepip out of python3 into python3-venv; without it venv creation fails.
  if ! "$python" -m venv .venv >/dev/null 2>&1; then
    rm -rf .venv
    apt_install python3-venv
    "$python" -m venv .venv
  fi
fi

key=$(cat pyproject.toml <(echo "$extras") <(.venv/bin/python -VV) | sha256sum | cut -c1-16)
stamp=.venv/.loadext-installed
if [[ "$(cat "$stamp" 2>/dev/null)" != "$key" ]]; then
  start=$(date +%s)
  echo "setup: installing loadext${extras} into .venv (log: .venv/install.log)" >&2
  if ! .venv/bin/python -m pip install --disable-pip-version-check -e ".${extras}" >.venv/install.log 2>&1; then
    tail -n 30 .venv/install.log >&2
    echo "setup: pip install failed; the whole log is .venv/install.log" >&2
    exit 1
  fi
  echo "$key" >"$stamp"
  echo "setup: installed in $(( $(date +%s) - start ))s" >&2
fi
