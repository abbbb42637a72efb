#!/usr/bin/env bash
# `reshard --help` names every model shipped in <data-dir>/models (NAME.json), and
# with no data directory says so. usage: help_models.sh <reshard> <data-dir>
set -euo pipefail
cli=$1 data=$2
help=$("$cli" --help)
n=0
for f in "$data"/models/*.json; do
  m=$(basename "$f" .json)
  grep -Eq "(^| )$m(,|$)" <<<"$help" || { echo "reshard --help omits $m" >&2; exit 1; }
  n=$((n + 1))
done
[ "$n" -ge 13 ] || { echo "only $n models in $data/models" >&2; exit 1; }
RESHARD_DATA_DIR=/nonexistent "$cli" --help | grep -q "none found" ||
  { echo "reshard --help without a data directory does not say so" >&2; exit 1; }
echo "reshard --help lists the $n shipped models"
