#!/usr/bin/env bash
# Install the Debian packages that are not installed yet: those named on the
# command line, or those of the groups of tools/packages.txt.
# usage: tools/apt-install.sh PACKAGE...
#        tools/apt-install.sh --group GROUP...   (build, python, fuzz, cluster)
#        tools/apt-install.sh --all               (every group)
set -euo pipefail
list="$(dirname "$0")/packages.txt"
want=()
case "${1:-}" in
  --all) mapfile -t want < <(awk '!/^#/ && NF >= 2 && $1 !~ /^cmd:/ {print $1}' "$list") ;;
  --group)
    shift
    for g in "$@"; do
      mapfile -t -O "${#want[@]}" want < <(awk -v g="$g" '!/^#/ && $2 == g && $1 !~ /^cmd:/ {print $1}' "$list")
      awk -v g="$g" '!/^#/ && $2 == g {found=1} END {exit !found}' "$list" ||
        { echo "apt-install.sh: no group '$g' in $list" >&2; exit 2; }
    done ;;
  *) want=("$@") ;;
esac
missing=()
for p in "${want[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing ${missing[*]}"
sudo_cmd=""
[ "$(id -u)" = 0 ] || sudo_cmd=sudo
$sudo_cmd apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
