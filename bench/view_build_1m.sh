#!/bin/bash
# A 1M-document view build (map + _sum) on a fresh server: build time and
# the server's peak RSS (VmHWM) after loading and after the build.
#   bench/view_build_1m.sh   (SETTEE_BIN: the binary; default target/release/settee)
set -e
D=${TMPDIR:-/tmp}/settee-view-1m; rm -rf $D; mkdir -p $D
SETTEE_ADMIN=admin:admin ${SETTEE_BIN:-target/release/settee} serve --bind 127.0.0.1:16020 --data $D/data > $D/log 2>&1 &
PID=$!; sleep 1
U=http://admin:admin@127.0.0.1:16020
curl -s -X PUT $U/m >/dev/null
python3 -c '
import json
T=["a","b","c","d","e","f","g","h","i","j"]
for i in range(1000000):
    print(json.dumps({"_id":"%08d"%i,"type":T[i%10],"n":i%100}))
' | ${SETTEE_BIN:-target/release/settee} post-docs $U/m >/dev/null
echo "after load: $(grep -E 'VmRSS|VmHWM' /proc/$PID/status | tr -s ' ' | tr '\n' ' ')"
curl -s -X PUT $U/m/_design/d -d '{"views":{"m":{"map":"function (doc) { if (doc.type) { emit(doc.type, doc.n); } }","reduce":"_sum"}}}' >/dev/null
# reset the high-water mark to measure the build alone
echo 5 > /proc/$PID/clear_refs 2>/dev/null || true
T0=$(date +%s.%N)
curl -s "$U/m/_design/d/_view/m?limit=1&reduce=false" > $D/first.json
T1=$(date +%s.%N)
echo "build: $(python3 -c "print(round($T1-$T0,1))") s; $(cat $D/first.json | head -c 120)"
echo "after build: $(grep -E 'VmRSS|VmHWM' /proc/$PID/status | tr -s ' ' | tr '\n' ' ')"
kill $PID
