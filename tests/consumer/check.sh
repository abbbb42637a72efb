#!/usr/bin/env bash
# Install the build in <build-dir> into a temporary prefix and build the consumer against
# it three times, through pkg-config (reshard.pc: the shared library; reshard-static.pc:
# libreshard.a) and through find_package(reshard CONFIG); run them.
# usage: tests/consumer/check.sh <build-dir>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null

# 1. pkg-config (the shared library; its directory is not on the loader's path)
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/consumer-pc" "$here/consumer.c" \
   $(pkg-config --cflags --libs reshard)
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/consumer-pc"

# 2. pkg-config, the static library: the program does not need libreshard.so
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/consumer-static" "$here/consumer.c" \
   $(pkg-config --cflags --libs reshard-static)
if ldd "$tmp/consumer-static" | grep -q libreshard; then
  echo "consumer: the reshard-static build needs libreshard.so:" >&2
  ldd "$tmp/consumer-static" >&2
  exit 1
fi
RESHARD_DATA_DIR="$tmp/prefix/share/reshard" "$tmp/consumer-static"

# 3. find_package(reshard CONFIG)
cmake -S "$here" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cmake" >/dev/null
"$tmp/cmake/consumer"

# the installed command line finds the installed data
"$tmp/prefix/bin/reshard" plan --model qwen3-0.6b --train tp=2 --infer tp=2 --json >/dev/null
echo "consumer: pkg-config (shared, static) and find_package builds ran"
