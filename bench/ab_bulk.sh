#!/usr/bin/env bash
# Same-machine A/B of two Settee binaries on the bulk write path.
#
#   bench/ab_bulk.sh BIN_A BIN_B [PAIRS=3] [PORT=5993]
#
# For each pair, each binary in turn serves a fresh data directory on
# 127.0.0.1:PORT and bench/bulk_threads.py posts 300 bodies of 1,000
# documents to it; prints one line per run (wall time per request and the
# CPU per request of each thread kind). Compare threads' CPU within a run:
# this VM's speed moves between runs.
set -euo pipefail
a=$1 b=$2 pairs=${3:-3} port=${4:-5993}
here=$(cd "$(dirname "$0")" && pwd)
for r in $(seq 1 "$pairs"); do
  for bin in "$a" "$b"; do
    dir=$(mktemp -d)
    "$bin" serve --bind "127.0.0.1:$port" --data "$dir" --admin admin:admin >/dev/null 2>&1 &
    pid=$!
    sleep 1.2
    line=$(python3 "$here/bulk_threads.py" --url "http://admin:admin@127.0.0.1:$port" \
      --pid "$pid" --requests 300 | tr '\n' ' ' | sed 's/  */ /g')
    echo "$bin pair $r: $line"
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
  done
done
