#!/usr/bin/env python3
"""Full-text search side by side: Settee's built-in `_search` vs what a
CouchDB user without a search service runs for the same question, a Mango
`$regex` scan.

    python3 bench/search_vs.py --url http://admin:admin@127.0.0.1:PORT \
        --vs http://admin:admin@127.0.0.1:25984 [--docs 100000] [--queries 40] [--json FILE]

Each server gets a fresh database of --docs documents
{"title": 8 words of 16, "cat": one of 8, "n": i} (_bulk_docs batches of
1,000, outside the clock). Settee gets a design document with a `_search`
index of title (text), cat (facet) and n (number); the index build is
timed from the design document's write to the first query's answer
(documents/s). Then --queries questions, interleaved server by server:
"which documents have the word W in their title and n in [A, B]?" —
Settee: GET _search?q=title:W AND n:[A TO B]&limit=0 (total_rows);
CouchDB: POST _find {"selector": {"title": {"$regex": "\\\\bW\\\\b"},
"n": {"$gte": A, "$lte": B}}, "fields": ["_id"], "limit": docs} (the
number of documents answered). The counts must agree; latency p50/p99 of
each. One keep-alive connection per server (http.client); every request
has a 600 s timeout. The databases are deleted at the end.
"""

import argparse
import base64
import http.client
import json
import random
import statistics
import sys
import time
import urllib.parse

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
         "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa"]


class Conn:
    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=600)
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if u.username is not None:
            cred = f"{urllib.parse.unquote(u.username)}:{urllib.parse.unquote(u.password or '')}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(cred.encode()).decode()

    def req(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        t0 = time.perf_counter()
        self.c.request(method, path, body=data, headers=self.headers)
        r = self.c.getresponse()
        raw = r.read()
        dt = time.perf_counter() - t0
        return r.status, (json.loads(raw) if raw else None), dt


def doc(i):
    r = random.Random(i)
    return {"_id": f"doc{i:07d}", "title": " ".join(r.choice(WORDS) for _ in range(8)),
            "cat": WORDS[i % 8], "n": i}


def load(conn, db, n):
    conn.req("DELETE", f"/{db}")
    st, _, _ = conn.req("PUT", f"/{db}")
    assert st in (201, 202), st
    for start in range(0, n, 1000):
        st, body, _ = conn.req("POST", f"/{db}/_bulk_docs",
                               {"docs": [doc(i) for i in range(start, min(n, start + 1000))]})
        assert st == 201, (st, body)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--vs", required=True)
    ap.add_argument("--docs", type=int, default=100000)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--json")
    a = ap.parse_args()
    db = "bench_search_vs"
    s, c = Conn(a.url), Conn(a.vs)
    t = time.perf_counter()
    load(s, db, a.docs)
    print(f"settee: loaded {a.docs} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    t = time.perf_counter()
    load(c, db, a.docs)
    print(f"couchdb: loaded {a.docs} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    ddoc = {"indexes": {"i": {"index": "function(doc){ index('title', doc.title); "
                                       "index('cat', doc.cat, {facet: true}); index('n', doc.n); }"}}}
    t0 = time.perf_counter()
    st, body, _ = s.req("PUT", f"/{db}/_design/s", ddoc)
    assert st == 201, (st, body)
    st, body, _ = s.req("GET", f"/{db}/_design/s/_search/i?q=*:*&limit=0")
    build = time.perf_counter() - t0
    assert st == 200 and body["total_rows"] == a.docs, (st, body)
    r = random.Random(42)
    lat = {"settee_search": [], "couchdb_regex_find": []}
    for k in range(a.queries):
        w = r.choice(WORDS)
        lo = r.randrange(a.docs)
        hi = lo + r.randrange(a.docs // 4)
        q = urllib.parse.quote(f"title:{w} AND n:[{lo} TO {hi}]")
        st, body, dt = s.req("GET", f"/{db}/_design/s/_search/i?q={q}&limit=0")
        assert st == 200, (st, body)
        got = body["total_rows"]
        lat["settee_search"].append(dt)
        sel = {"selector": {"title": {"$regex": f"\\b{w}\\b"}, "n": {"$gte": lo, "$lte": hi}},
               "fields": ["_id"], "limit": a.docs}
        st, body, dt = c.req("POST", f"/{db}/_find", sel)
        assert st == 200, (st, body)
        lat["couchdb_regex_find"].append(dt)
        assert len(body["docs"]) == got, (w, lo, hi, got, len(body["docs"]))
    out = {"docs": a.docs, "queries": a.queries,
           "settee_search_build_s": round(build, 2),
           "settee_search_build_docs_per_s": round(a.docs / build),
           "latency_ms": {k: {"p50": round(statistics.median(v) * 1000, 2),
                              "p99": round(pct(v, 99) * 1000, 2)} for k, v in lat.items()}}
    print(json.dumps(out, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    s.req("DELETE", f"/{db}")
    c.req("DELETE", f"/{db}")


if __name__ == "__main__":
    main()
