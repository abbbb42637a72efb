#!/usr/bin/env bash
# The build's libraries for a lent GPU machine, gathered here: that machine has CUDA,
# NCCL (the wheel) and PyTorch but no jansson, xxhash, cmocka or pkg-config, and no package
# registry, so tools/gpu-check.sh cannot configure there without them. This downloads
# their Debian packages on this machine (apt-get download: no install) and unpacks them
# into .gpu-deps/root (git ignores it); carry ".gpu-deps" in the device run, and
# tools/gpu-check.sh builds against them wherever the machine lacks its own.
#
# usage: tools/gpu-deps.sh        (about 2 MB; needs apt-get and dpkg-deb, i.e. Debian)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.gpu-deps
pkgs="libjansson4 libjansson-dev libxxhash0 libxxhash-dev libcmocka0 libcmocka-dev
      pkgconf-bin libpkgconf3"
rm -rf "$dir"
mkdir -p "$dir/debs" "$dir/root"
# shellcheck disable=SC2086 # $pkgs: a list of packages
(cd "$dir/debs" && apt-get -o APT::Sandbox::User=root download $pkgs >/dev/null)
for deb in "$dir"/debs/*.deb; do
    dpkg-deb -x "$deb" "$dir/root"
done
ls "$dir/root/usr/bin/pkgconf" "$dir"/root/usr/lib/x86_64-linux-gnu/pkgconfig/{jansson,libxxhash,cmocka}.pc \
    >/dev/null
echo "gpu-deps: $(du -sh "$dir" | cut -f1) in $dir (carry it: run(..., carry=[\".gpu-deps\"]))"
