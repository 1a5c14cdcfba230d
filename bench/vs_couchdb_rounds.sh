#!/usr/bin/env bash
# Settee vs CouchDB 3.4.3 in interleaved rounds (bench/RESULTS.md's table).
#
#   bench/vs_couchdb_rounds.sh SETTEE_BIN SETTEE_URL COUCHDB_URL OUTDIR [ROUNDS=3] [MAX_WAIT_S=900] [FIRST_ROUND=1]
#
# (FIRST_ROUND > 1 adds rounds to an earlier run's OUTDIR.)
# SCENARIOS (env) replaces the list of scenarios (and skips changes_vs.py).
# Each round: `settee bench` over the table's scenarios (servers interleaved
# scenario by scenario), then bench/changes_vs.py (_changes, which the suite
# has no scenario for). Odd rounds put Settee first, even rounds CouchDB, so
# neither always runs in the other's wake. Before a round it waits for the
# 1-minute load average to fall below 1.5, at most MAX_WAIT_S seconds over
# the whole run; `uptime` at the start and end of each round goes to
# OUTDIR/uptime.log. The last round also writes SVG plots to OUTDIR/plots.
# Then: python3 bench/vs_couchdb_medians.py --bench OUTDIR/bench-r*.json \
#         --changes OUTDIR/changes-r*.json --uptime OUTDIR/uptime.log --out F
set -euo pipefail
bin=$1 settee=$2 couch=$3 out=$4 rounds=${5:-3} max_wait=${6:-900} first_round=${7:-1}
last_round=$((first_round + rounds - 1))
here=$(cd "$(dirname "$0")" && pwd)
scenarios=${SCENARIOS:-"bulk_doc_1000 benchbulk single_doc_insert batch_ok_doc_insert concurrent_writers_1 concurrent_writers_32 random_reads all_docs_paging"}
mkdir -p "$out"
waited=0
for r in $(seq "$first_round" "$last_round"); do
  while awk '{exit !($1 >= 1.5)}' /proc/loadavg && [ "$waited" -lt "$max_wait" ]; do
    sleep 15; waited=$((waited + 15))
  done
  if [ $((r % 2)) -eq 1 ]; then first=$settee second=$couch; else first=$couch second=$settee; fi
  plots=(); [ "$r" -eq "$last_round" ] && plots=(--plots "$out/plots")
  echo "round $r start $(date -u +%FT%TZ) waited ${waited}s $(uptime)" | tee -a "$out/uptime.log"
  "$bin" bench --url "$first" --vs "$second" $scenarios --json "$out/bench-r$r.json" "${plots[@]}" \
    > "$out/bench-r$r.txt" 2>&1 || echo "round $r: settee bench exited $?" | tee -a "$out/uptime.log"
  echo "round $r mid   $(date -u +%FT%TZ) $(uptime)" | tee -a "$out/uptime.log"
  if [ -z "${SCENARIOS:-}" ]; then
    python3 "$here/changes_vs.py" --url "$first" --vs "$second" --json "$out/changes-r$r.json" \
      > "$out/changes-r$r.txt" 2>&1 || echo "round $r: changes_vs exited $?" | tee -a "$out/uptime.log"
  fi
  echo "round $r end   $(date -u +%FT%TZ) $(uptime)" | tee -a "$out/uptime.log"
done
