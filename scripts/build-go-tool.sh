#!/usr/bin/env bash
# Builds one Go command from its module at a pinned version (the module proxy is the only source
# reachable; no release binaries are downloaded) into a cache folder outside the repo keyed by
# name and version: a second run is instant. Prints the binary's path on stdout (progress goes
# to stderr).
# Usage: scripts/build-go-tool.sh NAME MODULE_PATH/cmd/NAME VERSION [ABOUT]
#   ABOUT: how long the build took when measured here, shown while it builds.
set -euo pipefail
name=$1 package=$2 version=$3 about=${4:-}
bin="${LOADEXT_E2E_CACHE:-$HOME/.cache/loadext-e2e}/${name}-${version}/bin"
if [[ ! -x "$bin/$name" ]]; then
  command -v go >/dev/null 2>&1 || { echo "build-go-tool.sh: needs Go (golang) to build ${name} ${version}" >&2; exit 1; }
  start=$(date +%s)
  echo "building ${name} ${version} from ${package}${about:+ ($about, once)}" >&2
  GOBIN="$bin" GOFLAGS=-trimpath go install -ldflags="-s -w" "${package}@${version}" >&2
  echo "built ${name} ${version} in $(( $(date +%s) - start ))s" >&2
fi
echo "$bin/$name"
