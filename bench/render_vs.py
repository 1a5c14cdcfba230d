#!/usr/bin/env python3
"""Show and update functions side by side (issue 23).

    python3 bench/render_vs.py --settee $S --couchdb $C [--requests 2000]
        [--threads 8] [--rounds 3]

Each server gets a fresh database with 100 documents and a design document
with a show (`{json: {id, n}}` of the document) and an update (increments
a counter, `[doc, 'ok']`). Rows: `show` (GET of the show on a random
document) and `update` (PUT through the update function on a random
document), REQUESTS requests from THREADS keep-alive clients, rounds
interleaved (Settee, CouchDB, then the other order). Medians of requests/s.
"""
import argparse
import base64
import http.client
import json
import random
import statistics
import threading
import time
import urllib.parse


def conn_for(url):
    u = urllib.parse.urlsplit(url)
    auth = "Basic " + base64.b64encode(f"{u.username}:{u.password}".encode()).decode()
    return (u.hostname, u.port), auth


def call(target, method, path, body=None):
    (host, port), auth = target
    c = http.client.HTTPConnection(host, port, timeout=60)
    headers = {"Authorization": auth, "Content-Type": "application/json"}
    c.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def setup(target, db):
    call(target, "DELETE", f"/{db}")
    st, _ = call(target, "PUT", f"/{db}")
    assert st in (201, 202), st
    docs = [{"_id": f"d{i:03d}", "n": i} for i in range(100)]
    st, _ = call(target, "POST", f"/{db}/_bulk_docs", {"docs": docs})
    assert st in (201, 202), st
    ddoc = {
        "shows": {"s": "function(doc, req){ return {json: {id: doc._id, n: doc.n}}; }"},
        "updates": {"u": "function(doc, req){ doc.c = (doc.c || 0) + 1; return [doc, 'ok']; }"},
    }
    st, _ = call(target, "PUT", f"/{db}/_design/r", ddoc)
    assert st in (201, 202), st


def run(target, db, kind, requests, threads):
    (host, port), auth = target
    per = requests // threads
    errors = [0]

    def worker(seed):
        rnd = random.Random(seed)
        c = http.client.HTTPConnection(host, port, timeout=60)
        for _ in range(per):
            if kind == "show":
                path, method = f"/{db}/_design/r/_show/s/d{rnd.randrange(100):03d}", "GET"
            else:
                path, method = f"/{db}/_design/r/_update/u/d{rnd.randrange(100):03d}", "PUT"
            c.request(method, path, body=b"" if method == "PUT" else None,
                      headers={"Authorization": auth, "Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            if r.status >= 400 and not (kind == "update" and r.status == 409):
                errors[0] += 1
        c.close()

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    t0 = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.time() - t0
    assert errors[0] == 0, f"{kind}: {errors[0]} errors"
    return per * threads / secs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--settee", required=True)
    ap.add_argument("--couchdb", required=True)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    servers = {"settee": conn_for(args.settee), "couchdb": conn_for(args.couchdb)}
    for t in servers.values():
        setup(t, "bench_render")
    results = {(n, k): [] for n in servers for k in ("show", "update")}
    for r in range(args.rounds):
        order = list(servers) if r % 2 == 0 else list(reversed(servers))
        for kind in ("show", "update"):
            for name in order:
                results[(name, kind)].append(run(servers[name], "bench_render", kind, args.requests, args.threads))
    for kind in ("show", "update"):
        s = statistics.median(results[("settee", kind)])
        c = statistics.median(results[("couchdb", kind)])
        print(f"{kind}: settee {s:.0f} req/s, couchdb {c:.0f} req/s, ratio {s / c:.1f}x "
              f"(rounds settee {[round(x) for x in results[('settee', kind)]]}, couchdb {[round(x) for x in results[('couchdb', kind)]]})")
    for t in servers.values():
        call(t, "DELETE", "/bench_render")


if __name__ == "__main__":
    main()
