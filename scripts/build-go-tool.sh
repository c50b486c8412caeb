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
#   --tags: Go build tags, as the project's own release build sets them (Thanos: slicelabels).
set -euo pipefail
module="" tags=""
while [[ ${1:-} == --* ]]; do
  case $1 in
    --module) module=$2 ;;
    --tags) tags=$2 ;;
    *) echo "build-go-tool.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
name=$1 package=$2 version=$3 about=${4:-}
bin="${LOADEXT_E2E_CACHE:-$HOME/.cache/loadext-e2e}/${name}-${version}${tags:+-$tags}/bin"
if [[ ! -x "$bin/$name" ]]; then
  command -v go >/dev/null 2>&1 || { echo "build-go-tool.sh: needs Go (golang) to build ${name} ${version}" >&2; exit 1; }
  start=$(date +%s)
  echo "building ${name} ${version} from ${module:+$module/}${package}${about:+ ($about, once)}" >&2
  if [[ -z $module ]]; then
    GOBIN="$bin" GOFLAGS=-trimpath go install -tags="$tags" -ldflags="-s -w" "${package}@${version}" >&2
  else
    source_dir=$(go mod download -json "${module}@${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [[ -n $source_dir ]] || { echo "build-go-tool.sh: go mod download ${module}@${version} failed" >&2; exit 1; }
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cp -r "$source_dir/." "$work" && chmod -R u+w "$work"
    (cd "$work" && GOFLAGS=-trimpath go build -tags="$tags" -ldflags="-s -w" -o "$bin/$name" "$package") >&2
  fi
  echo "built ${name} ${version} in $(( $(date +%s) - start ))s" >&2
fi
echo "$bin/$name"
