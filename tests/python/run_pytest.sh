#!/usr/bin/env bash
# Run pytest with Debian's /usr/bin/python3 for a ctest test; report the test
# skipped (77, ctest's SKIP_RETURN_CODE) naming what is missing when the python
# group of tools/packages.txt is not installed, unless RESHARD_REQUIRE_PACKAGES=1
# (.ci/run), where a missing package fails the test instead.
# usage: tests/python/run_pytest.sh [pytest arguments...]
missing=()
[ -x /usr/bin/python3 ] || missing+=(python3)
if [ ${#missing[@]} -eq 0 ]; then
  for m in pytest:python3-pytest numpy:python3-numpy torch:python3-torch; do
    /usr/bin/python3 -c "import ${m%%:*}" 2>/dev/null || missing+=("${m#*:}")
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "SKIP: needs ${missing[*]} (install: tools/apt-install.sh --group python)"
  [ "${RESHARD_REQUIRE_PACKAGES:-0}" = 1 ] && { echo "RESHARD_REQUIRE_PACKAGES=1: failing instead"; exit 1; }
  exit 77
fi
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider "$@"
