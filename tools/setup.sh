#!/usr/bin/env bash
# Install what reshard needs (Debian packages) when missing, then configure and build.
# usage: tools/setup.sh [build-dir (default build)] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
tools/apt-install.sh --group build
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
