#!/usr/bin/env bash
# Builds kube-apiserver, kube-scheduler (k8s.io/kubernetes) and etcd (go.etcd.io/etcd/server/v3)
# from their Go modules into a cache folder keyed by version, so a second run is instant.
# Nothing prebuilt is downloaded: only Go modules through the module proxy.
set -euo pipefail
K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.8}"
CACHE="${LOADEXT_E2E_CACHE:-$HOME/.cache/loadext-e2e}/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}"
BIN="$CACHE/bin"
if [[ -x "$BIN/kube-apiserver" && -x "$BIN/kube-scheduler" && -x "$BIN/etcd" ]]; then
  echo "$BIN"; exit 0
fi
start=$(date +%s)
SRC="$CACHE/src"
mkdir -p "$SRC" "$BIN"
cd "$SRC"
# k8s.io/kubernetes is not meant to be required as a module: its go.mod points every k8s.io
# staging module at ./staging. Replace each of them with the published module of the same release.
modfile=$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
staging_version="v0.${K8S_VERSION#v1.}"
{
  echo "module loadext.local/e2e-build"
  echo
  echo "go $(awk '/^go /{print $2}' "$modfile")"
  echo
  echo "require k8s.io/kubernetes ${K8S_VERSION}"
  echo
  grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "$modfile" | awk -v v="$staging_version" '{print "replace " $1 " => " $1 " " v}'
} > go.mod
cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
export GOFLAGS=-mod=mod
go mod tidy >/dev/null 2>&1 || true
go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >/dev/null
go build -trimpath -ldflags="-s -w" -o "$BIN/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -trimpath -ldflags="-s -w" -o "$BIN/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler
go build -trimpath -ldflags="-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3
echo "built in $(( $(date +%s) - start ))s" > "$CACHE/build-time.txt"
echo "$BIN"
