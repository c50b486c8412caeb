#!/usr/bin/env bash
# Builds one Go command from its module at a pinned version (the module proxy is the only source
# reachable; no release binaries are downloaded) into a cache folder outside the repo keyed by
# name and version: a second run is instant. Prints the binary's path on stdout (progress goes
# to stderr).
# Usage: scripts/build-go-tool.sh NAME MODULE_PATH/cmd/NAME VERSION [ABOUT]
#        scripts/build-go-tool.sh --module MODULE_PATH NAME ./PACKAGE_DIR VERSION [ABOUT]
#   ABOUT: how long the build took when measured here, shown while it builds.
#   --module: for a module whose go.mod has replace directives (`go install pkg@version` refuses
#   those): the module's source comes from the module proxy and the package is built inside it.
set -euo pipefail
module=""
if [[ ${1:-} == --module ]]; then module=$2; shift 2; fi
name=$1 package=$2 version=$3 about=${4:-}
bin="${LOADEXT_E2E_CACHE:-$HOME/.cache/loadext-e2e}/${name}-${version}/bin"
if [[ ! -x "$bin/$name" ]]; then
  command -v go >/dev/null 2>&1 || { echo "build-go-tool.sh: needs Go (golang) to build ${name} ${version}" >&2; exit 1; }
  start=$(date +%s)
  echo "building ${name} ${version} from ${module:+$module/}${package}${about:+ ($about, once)}" >&2
  if [[ -z $module ]]; then
    GOBIN="$bin" GOFLAGS=-trimpath go install -ldflags="-s -w" "${package}@${version}" >&2
  else
    source_dir=$(go mod download -json "${module}@${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [[ -n $source_dir ]] || { echo "build-go-tool.sh: go mod download ${module}@${version} failed" >&2; exit 1; }
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cp -r "$source_dir/." "$work" && chmod -R u+w "$work"
    (cd "$work" && GOFLAGS=-trimpath go build -ldflags="-s -w" -o "$bin/$name" "$package") >&2
  fi
  echo "built ${name} ${version} in $(( $(date +%s) - start ))s" >&2
fi
echo "$bin/$name"
