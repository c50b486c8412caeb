#!/usr/bin/env bash
# Builds kube-apiserver, kube-scheduler, kube-controller-manager, kubectl (k8s.io/kubernetes) and etcd
# (go.etcd.io/etcd/server/v3) from their Go modules, pinned by go.mod/go.sum beside this script,
# into a cache folder outside the repo keyed by those pins: a second run is instant.
# Nothing prebuilt is downloaded; only Go modules come through the module proxy.
# Prints the bin directory on stdout (progress goes to stderr).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == "k8s.io/kubernetes" {print $3; exit}' "$here/go.mod")
key=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
bin="${LOADEXT_E2E_CACHE:-$HOME/.cache/loadext-e2e}/k8s-${version}-${key}/bin"
tools=(kube-apiserver kube-scheduler kube-controller-manager kubectl etcd)
missing=0
for tool in "${tools[@]}"; do [[ -x "$bin/$tool" ]] || missing=1; done
if [[ $missing == 0 ]]; then echo "$bin"; exit 0; fi

start=$(date +%s)
mkdir -p "$bin.tmp"
cd "$here"
export GOFLAGS=-mod=mod
# Measured on this project's 2-core machine from a cold module cache: 465-586 s in all, most of it
# kube-apiserver; each component prints its own time when done.
echo "building Kubernetes ${version} components from their Go modules, once (about 8-10 minutes on 2 cores)" >&2
for package in k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager \
               k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3; do
  name=$(basename "$package"); [[ $name == v3 ]] && name=etcd
  began=$(date +%s)
  echo "  building $name ($package) ..." >&2
  go build -trimpath -ldflags="-s -w" -o "$bin.tmp/$name" "$package" 2> >(grep -v '^go: downloading' >&2)
  echo "  built $name in $(( $(date +%s) - began ))s" >&2
done
rm -rf "$bin"; mv "$bin.tmp" "$bin"
echo "built Kubernetes ${version} components in $(( $(date +%s) - start ))s" | tee "$bin/../build-time.txt" >&2
echo "$bin"
