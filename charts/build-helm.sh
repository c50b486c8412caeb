#!/usr/bin/env bash
# Builds helm from its Go module (the module proxy is the only source reachable; no release
# binaries are downloaded) into a cache folder outside the repo, pinned by version: a second run
# is instant. Prints the binary's path on stdout (progress goes to stderr).
set -euo pipefail
version=v3.21.4
bin="${LOADEXT_E2E_CACHE:-$HOME/.cache/loadext-e2e}/helm-${version}/bin"
if [[ ! -x "$bin/helm" ]]; then
  command -v go >/dev/null 2>&1 || { echo "build-helm.sh: needs Go (golang) to build helm ${version}" >&2; exit 1; }
  start=$(date +%s)
  echo "building helm ${version} from helm.sh/helm/v3 (about 3 minutes on 2 cores, once)" >&2
  GOBIN="$bin" GOFLAGS=-trimpath go install -ldflags="-s -w" "helm.sh/helm/v3/cmd/helm@${version}" >&2
  echo "built helm ${version} in $(( $(date +%s) - start ))s" >&2
fi
echo "$bin/helm"
