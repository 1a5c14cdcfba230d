#!/usr/bin/env bash
# One 1 GiB attachment up and down through a fresh Settee (bench/RESULTS.md):
# generated on the fly (never a file), sent chunked; the server's RSS sampled
# every 50 ms. Usage: bench/att_1gib.sh [SETTEE_BIN] (default target/release/settee).
BIN=${1:-target/release/settee}
PORT=17002
pkill -f "settee serve --bind 127.0.0.1:$PORT"; sleep 1
rm -rf /tmp/s2 && mkdir -p /tmp/s2
("$BIN" serve --bind 127.0.0.1:$PORT --data /tmp/s2/data --admin admin:admin > /tmp/s2/log 2>&1 &)
sleep 2
PID=$(pgrep -f "settee serve --bind 127.0.0.1:$PORT")
U=http://admin:admin@127.0.0.1:$PORT
curl -s -XPUT $U/g >/dev/null
sample() { local max=0; while [ -f /tmp/s2/run ]; do r=$(awk '/VmRSS/{print $2}' /proc/$PID/status); [ "$r" -gt "$max" ] && max=$r; sleep 0.05; done; echo $max; }
base=$(awk '/VmRSS/{print $2}' /proc/$PID/status)
touch /tmp/s2/run; sample > /tmp/s2/peak_up & SP=$!
# 1 GiB generated on the fly (never a file), chunked upload
head -c $((1<<30)) /dev/zero | openssl enc -aes-128-ctr -pass pass:x -nosalt -pbkdf2 2>/dev/null | curl -s -o /tmp/s2/up.json -w "up %{http_code} %{time_total}s %{size_upload}B\n" -H "Content-Type: application/octet-stream" -T - $U/g/d/big.bin
rm /tmp/s2/run; wait $SP
mid=$(awk '/VmRSS/{print $2}' /proc/$PID/status)
touch /tmp/s2/run; sample > /tmp/s2/peak_down & SP=$!
curl -s -o /dev/null -w "down %{http_code} %{time_total}s %{size_download}B\n" $U/g/d/big.bin
rm /tmp/s2/run; wait $SP
echo "rss base ${base} kB, peak during upload $(cat /tmp/s2/peak_up) kB, after upload ${mid} kB, peak during download $(cat /tmp/s2/peak_down) kB"
echo "growth up $(( ($(cat /tmp/s2/peak_up) - base) / 1024 )) MiB, down $(( ($(cat /tmp/s2/peak_down) - mid) / 1024 )) MiB"
cat /tmp/s2/up.json; echo
