#!/usr/bin/env python3
"""Where a Settee server's CPU goes per `_bulk_docs` request, by thread kind.

    python3 bench/bulk_threads.py --url http://admin:admin@127.0.0.1:5984 --pid PID [--requests 300]

One keep-alive client posts compact bodies of 1,000 `{"_id":…,"foo":"bar"}`
documents (as `settee bench bulk_doc_1000` does) to a new database, one
request after another; the server's threads are read from
/proc/PID/task/*/schedstat before and after, summed by kind (`http`,
`writer`, `commit`, `rocksdb:high`, …) and printed per request: time on a
CPU, time runnable but waiting for one, and times scheduled. The server
must run on this machine (its PID). The database is deleted at the end.
"""
import argparse
import base64
import glob
import http.client
import json
import time
import urllib.parse


def threads(pid):
    out = {}
    for t in glob.glob(f"/proc/{pid}/task/*"):
        try:
            with open(t + "/comm") as f:
                comm = f.read().strip()
            with open(t + "/schedstat") as f:
                on_cpu, waiting, slices = (int(x) for x in f.read().split()[:3])
        except OSError:
            continue  # the thread ended meanwhile
        kind = comm.rsplit("-", 1)[0] if comm.rsplit("-", 1)[-1].isdigit() else comm
        acc = out.setdefault(kind, [0, 0, 0])
        acc[0] += on_cpu
        acc[1] += waiting
        acc[2] += slices
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--pid", required=True, type=int)
    ap.add_argument("--requests", type=int, default=300)
    a = ap.parse_args()
    u = urllib.parse.urlsplit(a.url)
    headers = {"Content-Type": "application/json"}
    if u.username:
        cred = f"{urllib.parse.unquote(u.username)}:{urllib.parse.unquote(u.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(cred.encode()).decode()
    conn = http.client.HTTPConnection(u.hostname, u.port or 80)

    def call(method, path, body=None, want=(200, 201, 202)):
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        r.read()
        if r.status not in want:
            raise SystemExit(f"{method} {path}: HTTP {r.status}")

    db = f"bulk_threads_{int(time.time() * 1000)}"
    call("PUT", f"/{db}")
    bodies = [
        json.dumps(
            {"docs": [{"_id": f"{b * 1000 + i:010d}", "foo": "bar"} for i in range(1000)]},
            separators=(",", ":"),
        ).encode()
        for b in range(a.requests + 1)
    ]
    try:
        call("POST", f"/{db}/_bulk_docs", bodies[0])  # starts the writer
        before, t0 = threads(a.pid), time.perf_counter()
        for body in bodies[1:]:
            call("POST", f"/{db}/_bulk_docs", body)
        t1, after = time.perf_counter(), threads(a.pid)
    finally:
        call("DELETE", f"/{db}", want=(200, 202, 404))
    n = a.requests
    print(f"{n} requests of 1,000 documents, {(t1 - t0) / n * 1e3:.3f} ms per request (wall)")
    print(f"{'threads':<16}{'on CPU':>12}{'waiting':>12}{'slices':>9}   (per request)")
    zero = [0, 0, 0]
    rows = []
    for kind, acc in after.items():
        d = [acc[i] - before.get(kind, zero)[i] for i in range(3)]
        if d[0] > 1e6:
            rows.append((d[0], kind, d))
    for _, kind, d in sorted(rows, reverse=True):
        print(f"{kind:<16}{d[0] / n / 1e6:>9.3f} ms{d[1] / n / 1e6:>9.3f} ms{d[2] / n:>9.1f}")


if __name__ == "__main__":
    main()
