#!/usr/bin/env bash
# Instructions per `_bulk_docs` request, by server thread (bench/RESULTS.md,
# "Bulk writes after the one-pass parse ..."): repeatable where CPU time on
# this VM is not.
#
#   bench/callgrind_bulk.sh SETTEE_BIN [REQUESTS=30] [PORT=5720]
#
# Starts the server under `valgrind --tool=callgrind --separate-threads=yes`
# on a fresh data directory, posts 5 warm-up bodies of 1,000 documents with
# bench/bulk_threads.py, zeroes the counters, posts REQUESTS more, dumps, and
# prints millions of instructions per request for the connection, writer
# and committer threads. Group composition depends on timing, so repeated
# runs differ by a few percent (mostly the writer and committer).
set -euo pipefail
bin=$1 reqs=${2:-30} port=${3:-5720}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d) out=$(mktemp -d)
valgrind --tool=callgrind --separate-threads=yes --dump-instr=no \
  --callgrind-out-file="$out/cg.%p" \
  "$bin" serve --bind "127.0.0.1:$port" --data "$dir" --admin admin:admin >/dev/null 2>&1 &
vpid=$!
for _ in $(seq 60); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 1; done
url="http://admin:admin@127.0.0.1:$port"
python3 "$here/bulk_threads.py" --url "$url" --pid "$vpid" --requests 5 >/dev/null
callgrind_control -z "$vpid" >/dev/null 2>&1
python3 "$here/bulk_threads.py" --url "$url" --pid "$vpid" --requests "$reqs" >/dev/null
callgrind_control -d "$vpid" >/dev/null 2>&1
sleep 1
kill "$vpid"; wait "$vpid" 2>/dev/null || true
for f in "$out"/cg.*.1-*; do
  total=$(grep -m1 -E '^(totals|summary):' "$f" | awk '{print $2}')
  role=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null |
    grep -oE 'settee_http::server::serve_thread|settee_db::writer::Writer::run|settee_db::committer::Committer::run' | head -1 || true)
  case $role in
    *serve_thread) name=connection ;;
    *Writer::run) name=writer ;;
    *Committer::run) name=committer ;;
    *) continue ;;
  esac
  awk -v t="$total" -v r="$reqs" -v n="$name" 'BEGIN { printf "%-10s %6.2f M instructions per request\n", n, t / r / 1e6 }'
done
rm -rf "$dir" "$out"
