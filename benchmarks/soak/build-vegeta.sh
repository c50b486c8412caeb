#!/usr/bin/env bash
# Builds vegeta (the open-loop HTTP load generator the soak uses) from the Go module proxy into
# a cache folder outside the repo, pinned by version; a second run is instant.
# Prints the binary's path on stdout (progress goes to stderr).
set -euo pipefail
version=v12.13.0
bin="${LOADEXT_E2E_CACHE:-$HOME/.cache/loadext-e2e}/vegeta-${version}/bin"
if [[ ! -x "$bin/vegeta" ]]; then
  echo "building vegeta ${version}" >&2
  GOBIN="$bin" go install "github.com/tsenart/vegeta/v12@${version}" >&2
fi
echo "$bin/vegeta"
