#!/usr/bin/env bash
# Makes a Debian 12 (bookworm) root filesystem tarball from Debian packages with mmdebstrap
# (no base image is pulled: no registry is needed), cached outside the repo by variant and
# package list, so a second call is instant. Usage: packaging/rootfs.sh VARIANT PACKAGES
#   e.g. packaging/rootfs.sh minbase python3,ca-certificates
# With a third argument `slim`, documentation, man pages and locales are left out (as Debian's
# slim images do), and glibc's iconv modules (8 MB; Python has its own codecs), for the
# container image; without it the tree is stock Debian.
# Prints the tarball's path on stdout (progress goes to stderr).
set -euo pipefail
variant=$1 packages=$2 flavour=${3:-stock}
cache="${LOADEXT_IMAGE_CACHE:-$HOME/.cache/loadext-image}"
out="$cache/bookworm-${variant}-${flavour}-$(echo "$packages" | tr ',' '+').tar"
slim=()
if [[ $flavour == slim ]]; then
  for path in '/usr/share/doc/*' '/usr/share/man/*' '/usr/share/locale/*' '/usr/lib/x86_64-linux-gnu/gconv/*'; do
    slim+=(--dpkgopt="path-exclude=$path")
  done
  slim+=(--dpkgopt='path-include=/usr/share/doc/*/copyright')
  # mmdebstrap sets up merged /usr with the usrmerge package, which drags in full perl (~50 MB);
  # once /usr is merged, the usr-is-merged marker package does instead.
  slim+=(--customize-hook='if chroot "$1" dpkg -s usrmerge >/dev/null 2>&1; then chroot "$1" apt-get install -y -qq usr-is-merged usrmerge- perl- libperl5.36- perl-modules-5.36- libfile-find-rule-perl- libnumber-compare-perl- libtext-glob-perl- >/dev/null 2>&1; fi')
fi
if [[ -s $out ]]; then echo "$out"; exit 0; fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "rootfs.sh: mmdebstrap is missing (Debian package mmdebstrap)" >&2; exit 1
fi
mkdir -p "$cache"
start=$(date +%s)
echo "rootfs: mmdebstrap --quiet --variant=$variant --include=$packages bookworm ($flavour) (about 80 s, once)" >&2
mmdebstrap --quiet --variant="$variant" --include="$packages" "${slim[@]}" --aptopt='Acquire::Retries "3"' \
  bookworm "${out%.tar}.tmp.tar" \
  "deb http://deb.debian.org/debian bookworm main" \
  "deb http://deb.debian.org/debian bookworm-updates main" \
  "deb http://deb.debian.org/debian-security bookworm-security main" >&2
mv "${out%.tar}.tmp.tar" "$out"
echo "rootfs: $(du -h "$out" | cut -f1) in $(( $(date +%s) - start ))s" >&2
echo "$out"
