#!/usr/bin/env bash
# Builds loadext's container image and writes it as an OCI archive: scripts/image.sh [OUT]
# (default dist/loadext-oci.tar). No Docker daemon and no registry are needed: the base is a
# Debian 12 root filesystem made from Debian packages by mmdebstrap (packaging/rootfs.sh,
# cached), imported into buildah, and packaging/Containerfile is built FROM it (vfs storage,
# chroot isolation: works as root without a container runtime daemon).
# Push the archive with: skopeo copy oci-archive:dist/loadext-oci.tar docker://REGISTRY/loadext:TAG
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist/loadext-oci.tar}
for tool in mmdebstrap:mmdebstrap buildah:buildah; do
  if ! command -v "${tool%%:*}" >/dev/null 2>&1; then
    echo "image.sh: ${tool%%:*} is missing; install the Debian package ${tool#*:} (apt-get install ${tool#*:})" >&2
    exit 1
  fi
done
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
image=localhost/loadext:$version
buildah=(buildah --storage-driver vfs)
start=$(date +%s)

# A root filesystem tarball as a base image, named by its content: prints the image name.
import_rootfs() {
  local rootfs=$1 name
  name=localhost/loadext-base:bookworm-$(sha256sum "$rootfs" | cut -c1-12)
  if ! "${buildah[@]}" inspect --type image "$name" >/dev/null 2>&1; then
    echo "image: importing $(basename "$rootfs") as $name" >&2
    local container
    container=$("${buildah[@]}" from scratch)
    "${buildah[@]}" add --quiet "$container" "$rootfs" / >/dev/null
    "${buildah[@]}" config --cmd /bin/sh "$container"
    "${buildah[@]}" commit --quiet --rm "$container" "$name" >/dev/null
  fi
  echo "$name"
}
# The build stage makes the virtualenv (python3-venv); the image itself has python3 alone.
base=$(import_rootfs "$(bash packaging/rootfs.sh minbase python3,python3-venv slim)")
runtime=$(import_rootfs "$(bash packaging/rootfs.sh minbase python3 slim)")

# pip in the build stage trusts what this machine trusts (a TLS-intercepting proxy's CA, say):
# the bundle is mounted for the RUN steps only and is not in the image.
trust=()
ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
if [[ -f $ca ]]; then trust=(--volume "$ca:/run/build-ca.crt:ro" --build-arg PIP_CERT=/run/build-ca.crt); fi
echo "image: building $image FROM $runtime (build stage FROM $base)" >&2
"${buildah[@]}" build --quiet --isolation chroot --layers=false -f packaging/Containerfile "${trust[@]}" \
  --build-arg BASE="$base" --build-arg RUNTIME="$runtime" --label org.opencontainers.image.version="$version" \
  --label org.opencontainers.image.title=loadext -t "$image" . >/dev/null
mkdir -p "$(dirname "$out")"
rm -f "$out"
"${buildah[@]}" push --quiet "$image" "oci-archive:$out:$image" >/dev/null
"${buildah[@]}" rmi --prune >/dev/null 2>&1 || true  # the previous build of this tag, now untagged
size=$("${buildah[@]}" images --format '{{.Size}}' "$image")
echo "image: $image -> $out ($(du -h "$out" | cut -f1) archive, $size unpacked) in $(( $(date +%s) - start ))s" >&2
