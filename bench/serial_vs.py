#!/usr/bin/env python3
"""The serial paths through a neutral client: one client, one request at a time.

    python3 bench/serial_vs.py --url http://admin:pw@127.0.0.1:PORT \
        --vs http://admin:admin@127.0.0.1:15984 [--rounds 3] [--secs 10] \
        [--docs 100000] [--fsync-dir DIR] [--json FILE]

The client is Python's standard library (http.client, one keep-alive
HTTP/1.1 connection per server), as CouchDB users' scripts are, so the
figures do not depend on Settee's own bench client. Scenarios (issue 43,
after the chapter the product is built from):

  put_durable     PUT /db/{id} {"foo":"bar"}, new ids, full commit
                  (X-Couch-Full-Commit: true), for --secs seconds
  get_random      GET /db/{id} of a random one of --docs preloaded docs
  all_docs_50     GET /db/_all_docs?include_docs=true&limit=51&startkey=K
                  paging through the preloaded docs by 50 (the 51st row
                  is the next page's start key, as CouchDB's docs advise)

Rounds are interleaved: round r runs every scenario on every server before
round r+1 starts, so a slow minute on a shared machine hits both. Per
scenario and server: the median over rounds of (ops/s, p50, p99); the
ratio is the first server's median ops/s over each other's.

fsync_floor: before the rounds and after each, --fsync-dir (default: the
current directory) gets a file, written whole and synced first (as
Settee's pre-formatted write-ahead log is); then 2,000 times a 64-byte
record written after the previous one and os.fdatasync, timed (p50/p99). The durable PUT's p50 is reported
as a multiple of the floor's median p50 (the disk's own limit: an
acknowledged durable write needs at least one).

Every response is checked (status; the body for GETs and pages). Bounded:
every scenario stops after --secs seconds or its count; every request has
a 60 s socket timeout. The databases are deleted at the end.
"""

import argparse
import base64
import http.client
import json
import os
import random
import statistics
import sys
import tempfile
import time
import urllib.parse

PRELOAD_BATCH = 1000


class Client:
    """One keep-alive connection, standard library only."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.headers = {"Accept": "application/json"}
        if u.username is not None:
            cred = f"{urllib.parse.unquote(u.username)}:{urllib.parse.unquote(u.password or '')}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(cred.encode()).decode()
        self.conn = None
        self.reconnect()

    def reconnect(self):
        """A fresh connection: each scenario starts on one (servers close
        keep-alive connections left idle while the others are measured)."""
        if self.conn is not None:
            self.conn.close()
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def call(self, method, path, body=None, extra=None):
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        if extra:
            headers.update(extra)
        self.conn.request(method, path, body=body, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        return r.status, data

    def expect(self, method, path, body=None, want=(200,), extra=None):
        status, data = self.call(method, path, body, extra)
        if status not in want:
            raise SystemExit(f"{method} {path}: {status} {data[:300]!r}")
        return data


def redact(url):
    """The URL without its credentials."""
    u = urllib.parse.urlsplit(url)
    return u._replace(netloc=f"{u.hostname}:{u.port or 80}").geturl()


def pct(sorted_lat, p):
    if not sorted_lat:
        return float("nan")
    i = min(len(sorted_lat) - 1, int(round(p / 100.0 * (len(sorted_lat) - 1))))
    return sorted_lat[i]


def summary(lat, ops, secs, cpu0):
    """The figures of one scenario run; `cpu0` is this process's CPU time
    when it started, so the client's own CPU per request shows how much of
    each latency is the client's (a neutral client is not a free one)."""
    lat.sort()
    cpu = time.process_time() - cpu0
    return {"ops": ops, "secs": secs, "ops_s": ops / secs if secs else 0.0,
            "p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3,
            "client_cpu_us": cpu / ops * 1e6 if ops else float("nan")}


def fsync_floor(directory, n=2000):
    fd, path = tempfile.mkstemp(prefix="fsync-floor-", dir=directory)
    lat = []
    try:
        # Pre-formatted, as Settee's write-ahead log is: the syncs below
        # commit data blocks, not a growing file size.
        os.write(fd, b"\0" * (64 * n))
        os.fsync(fd)
        payload = b"x" * 64
        for i in range(n):
            os.pwrite(fd, payload, 64 * i)
            t0 = time.perf_counter()
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.unlink(path)
    lat.sort()
    return {"samples": n, "p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3}


def preload(c, db, docs):
    c.expect("DELETE", f"/{db}", want=(200, 202, 404))
    c.expect("PUT", f"/{db}", want=(201, 202))
    for start in range(0, docs, PRELOAD_BATCH):
        rows = [{"_id": f"{i:010}", "foo": "bar"} for i in range(start, min(docs, start + PRELOAD_BATCH))]
        out = json.loads(c.expect("POST", f"/{db}/_bulk_docs", json.dumps({"docs": rows}), want=(201, 202)))
        if any("error" in r for r in out):
            raise SystemExit(f"preload of {db}: {out[:3]}")


def put_durable(c, db, secs, tag):
    c.expect("DELETE", f"/{db}", want=(200, 202, 404))
    c.expect("PUT", f"/{db}", want=(201, 202))
    lat, n, body = [], 0, json.dumps({"foo": "bar"})
    full = {"X-Couch-Full-Commit": "true"}
    t_end = time.perf_counter() + secs
    start = time.perf_counter()
    cpu0 = time.process_time()
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        status, data = c.call("PUT", f"/{db}/{tag}-{n:08}", body, full)
        lat.append(time.perf_counter() - t0)
        if status != 201:
            raise SystemExit(f"PUT: {status} {data[:200]!r}")
        n += 1
    return summary(lat, n, time.perf_counter() - start, cpu0)


def get_random(c, db, docs, secs, rng):
    lat, n = [], 0
    t_end = time.perf_counter() + secs
    start = time.perf_counter()
    cpu0 = time.process_time()
    while time.perf_counter() < t_end:
        want = f"{rng.randrange(docs):010}"
        t0 = time.perf_counter()
        status, data = c.call("GET", f"/{db}/{want}")
        lat.append(time.perf_counter() - t0)
        if status != 200 or json.loads(data)["_id"] != want:
            raise SystemExit(f"GET {want}: {status} {data[:200]!r}")
        n += 1
    return summary(lat, n, time.perf_counter() - start, cpu0)


def all_docs_50(c, db, docs, secs):
    lat, rows_read, pages = [], 0, 0
    t_end = time.perf_counter() + secs
    start = time.perf_counter()
    cpu0 = time.process_time()
    key = None
    while time.perf_counter() < t_end:
        q = "include_docs=true&limit=51"
        if key is not None:
            q += "&startkey=" + urllib.parse.quote(json.dumps(key))
        t0 = time.perf_counter()
        status, data = c.call("GET", f"/{db}/_all_docs?{q}")
        lat.append(time.perf_counter() - t0)
        if status != 200:
            raise SystemExit(f"_all_docs: {status} {data[:200]!r}")
        rows = json.loads(data)["rows"]
        page = rows[:50]
        if not page or any(r["doc"]["_id"] != r["id"] for r in page):
            raise SystemExit(f"_all_docs page from {key!r}: {len(rows)} rows")
        rows_read += len(page)
        pages += 1
        key = rows[50]["key"] if len(rows) > 50 else None  # wrap round at the end
    s = summary(lat, pages, time.perf_counter() - start, cpu0)
    s["docs_s"] = rows_read / s["secs"] if s["secs"] else 0.0
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="the server measured (ratios are relative to it)")
    ap.add_argument("--vs", action="append", default=[], help="servers measured beside it")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--secs", type=float, default=10.0, help="seconds per scenario per round")
    ap.add_argument("--docs", type=int, default=100_000, help="preloaded documents for reads")
    ap.add_argument("--fsync-dir", default=".", help="a directory on the data directory's disk")
    ap.add_argument("--json", help="write every figure to this file")
    a = ap.parse_args()
    if not (1 <= a.rounds <= 50 and 0.5 <= a.secs <= 600 and 100 <= a.docs <= 10_000_000):
        raise SystemExit("rounds 1..50, secs 0.5..600, docs 100..10M")
    urls = [a.url] + a.vs
    names = [redact(u) for u in urls]
    clients = [Client(u) for u in urls]
    tag = f"{os.getpid()}-{int(time.time())}"
    read_db, write_db = f"serial-vs-read-{tag}", f"serial-vs-write-{tag}"
    floors = [fsync_floor(a.fsync_dir)]
    for c in clients:
        preload(c, read_db, a.docs)
    results = {n: {"put_durable": [], "get_random": [], "all_docs_50": []} for n in names}
    rng = random.Random(20261207)
    try:
        for r in range(a.rounds):
            for name, c in zip(names, clients):
                res = results[name]
                c.reconnect()
                res["put_durable"].append(put_durable(c, f"{write_db}-{r}", a.secs, tag))
                c.expect("DELETE", f"/{write_db}-{r}", want=(200, 202, 404))
                res["get_random"].append(get_random(c, read_db, a.docs, a.secs, rng))
                res["all_docs_50"].append(all_docs_50(c, read_db, a.docs, a.secs))
                print(f"round {r + 1}/{a.rounds} {name}: " + ", ".join(
                    f"{k} {v[-1]['ops_s']:.0f}/s p50 {v[-1]['p50_ms']:.3f} ms" for k, v in res.items()),
                    file=sys.stderr, flush=True)
            floors.append(fsync_floor(a.fsync_dir))
    finally:
        for c in clients:
            c.reconnect()
            c.call("DELETE", f"/{read_db}")
    floor_p50 = statistics.median(f["p50_ms"] for f in floors)
    floor_p99 = statistics.median(f["p99_ms"] for f in floors)
    print(f"\nfsync_floor ({a.fsync_dir}): p50 {floor_p50:.3f} ms, p99 {floor_p99:.3f} ms "
          f"(median of {len(floors)} probes of 2,000 fdatasyncs)\n")
    print("| scenario | server | ops/s (median of rounds) | p50 ms | p99 ms | client CPU µs/req | rounds (ops/s) | ratio to first |")
    print("|---|---|---:|---:|---:|---:|---|---:|")
    med = {}
    for scen in ("put_durable", "get_random", "all_docs_50"):
        for name in names:
            runs = results[name][scen]
            m = {k: statistics.median(x[k] for x in runs)
                 for k in ("ops_s", "p50_ms", "p99_ms", "client_cpu_us")}
            med[(scen, name)] = m
            base = med[(scen, names[0])]["ops_s"]
            ratio = "" if name == names[0] else f"{base / m['ops_s']:.1f}×"
            print(f"| {scen} | {name} | {m['ops_s']:.0f} | {m['p50_ms']:.3f} | {m['p99_ms']:.3f} | "
                  f"{m['client_cpu_us']:.0f} | "
                  + ", ".join(f"{x['ops_s']:.0f}" for x in runs) + f" | {ratio} |")
    p = med[("put_durable", names[0])]["p50_ms"]
    print(f"\nput_durable p50 on {names[0]}: {p:.3f} ms = {p / floor_p50:.2f} × the fsync floor")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "servers": names, "fsync_floor": floors,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
