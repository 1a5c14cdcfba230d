#!/usr/bin/env python3
"""Partition queries: their cost follows the partition, not the database (issue 23).

    python3 bench/partition_vs.py --settee $S [--couchdb $C]
        [--sizes 10000,1000000] [--per-partition 1000] [--rounds 3] [--reps 20]

For each size N, each server gets a partitioned database of N documents in
N/PER partitions of PER documents (`pNNNN:dNNNN`, body `{"n": i}`), a
partitioned design document with a view (`emit(doc.n, null)`, `_count`)
and a Mango index on `n` (partitioned by default). Built once (view and
index queried once before timing). Rows, each on the middle partition:
`info` (GET /db/_partition/P), `all_docs` (its 1,000 ids), `view` (its
1,000 rows, reduce=false), `view_reduce` (the partition's `_count`),
`find` (`n >= 0` through the index, limit 1000). A row's figure is the
median latency (ms) of REPS sequential requests on one keep-alive
connection, then the median over ROUNDS rounds, servers interleaved
(Settee, CouchDB, then the other order). Prints JSON: per server and size.
"""
import argparse
import base64
import http.client
import json
import statistics
import time
import urllib.parse


class Target:
    def __init__(self, name, url):
        u = urllib.parse.urlsplit(url)
        self.name = name
        self.host, self.port = u.hostname, u.port
        self.auth = "Basic " + base64.b64encode(f"{u.username}:{u.password}".encode()).decode()
        self.conn = None

    def call(self, method, path, body=None):
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=3600)
            try:
                headers = {"Authorization": self.auth, "Content-Type": "application/json"}
                data = None if body is None else json.dumps(body)
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                out = r.read()
                return r.status, out
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


def load(t, db, size, per):
    t.call("DELETE", f"/{db}")
    st, body = t.call("PUT", f"/{db}?partitioned=true")
    assert st in (201, 202), (st, body)
    batch = []
    for i in range(size):
        batch.append({"_id": f"p{i // per:04d}:d{i % per:04d}", "n": i % per})
        if len(batch) == 5000 or i == size - 1:
            st, body = t.call("POST", f"/{db}/_bulk_docs", {"docs": batch})
            assert st in (201, 202), (st, body[:200])
            batch = []
    ddoc = {"views": {"by_n": {"map": "function(doc){ emit(doc.n, null); }", "reduce": "_count"}}}
    st, body = t.call("PUT", f"/{db}/_design/v", ddoc)
    assert st in (201, 202), (st, body)
    st, body = t.call("POST", f"/{db}/_index", {"index": {"fields": ["n"]}, "name": "n", "ddoc": "m"})
    assert st == 200, (st, body)


def ops(db, part, per):
    base = f"/{db}/_partition/{part}"
    find = {"selector": {"n": {"$gte": 0}}, "limit": per, "use_index": "m"}
    return {
        "info": ("GET", base, None),
        "all_docs": ("GET", f"{base}/_all_docs", None),
        "view": ("GET", f"{base}/_design/v/_view/by_n?reduce=false", None),
        "view_reduce": ("GET", f"{base}/_design/v/_view/by_n", None),
        "find": ("POST", f"{base}/_find", find),
    }


def check(name, st, body, per):
    assert st == 200, (name, st, body[:300])
    v = json.loads(body)
    if name == "info":
        assert v["doc_count"] == per, v
    elif name in ("all_docs", "view"):
        assert len(v["rows"]) == per, (name, len(v["rows"]))
    elif name == "view_reduce":
        assert v["rows"][0]["value"] == per, v
    elif name == "find":
        assert len(v["docs"]) == per, len(v["docs"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--settee", required=True)
    ap.add_argument("--couchdb")
    ap.add_argument("--sizes", default="10000,1000000")
    ap.add_argument("--per-partition", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    targets = [Target("settee", a.settee)]
    if a.couchdb:
        targets.append(Target("couchdb", a.couchdb))
    sizes = [int(s) for s in a.sizes.split(",")]
    per = a.per_partition
    results = {t.name: {} for t in targets}
    for size in sizes:
        db = f"part_bench_{size}"
        part = f"p{(size // per) // 2:04d}"
        for t in targets:
            started = time.time()
            load(t, db, size, per)
            loaded = time.time()
            for name, (m, path, body) in ops(db, part, per).items():
                # The first query builds the index; CouchDB answers 500
                # `timeout` while its build outlasts the request (bounded).
                for _ in range(120):
                    st, out = t.call(m, path, body)
                    if not (st == 500 and b'"timeout"' in out):
                        break
                check(name, st, out, per)
            print(f"# {t.name} {size}: loaded in {loaded - started:.0f} s, "
                  f"built in {time.time() - loaded:.0f} s", flush=True)
        rounds = {t.name: {} for t in targets}
        for r in range(a.rounds):
            order = targets if r % 2 == 0 else list(reversed(targets))
            for t in order:
                for name, (m, path, body) in ops(db, part, per).items():
                    lat = []
                    for _ in range(a.reps):
                        t0 = time.perf_counter()
                        st, out = t.call(m, path, body)
                        lat.append((time.perf_counter() - t0) * 1000)
                        check(name, st, out, per)
                    rounds[t.name].setdefault(name, []).append(statistics.median(lat))
        for t in targets:
            results[t.name][size] = {
                name: round(statistics.median(v), 2) for name, v in rounds[t.name].items()
            }
            print(f"# {t.name} {size}: {results[t.name][size]}", flush=True)
        for t in targets:
            t.call("DELETE", f"/{db}")
    print(json.dumps({"per_partition": per, "rounds": a.rounds, "reps": a.reps,
                      "results": results}, indent=1))


if __name__ == "__main__":
    main()
