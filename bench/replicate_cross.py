#!/usr/bin/env python3
"""Replication with CouchDB on one end, side by side (issue 22's cross rows).

    python3 bench/replicate_cross.py --settee $S --couchdb $C [--docs 100000]
        [--rounds 3] [--settee-pid PID] [--json OUT] [--rows s2s,…]

Rows, each a one-shot POST /_replicate of DOCS new documents into a new
database, timed from the request to its answer:
  anchor   CouchDB -> CouchDB, CouchDB's replicator (POST $C/_replicate)
  c2s      CouchDB -> Settee,  Settee's replicator  (POST $S/_replicate)
  s2c      Settee  -> CouchDB, Settee's replicator  (POST $S/_replicate)
  s2s      Settee  -> Settee,  Settee's replicator
Rounds interleave the rows (the order rotates each round). Ratios are of
medians against the anchor. With --settee-pid, Settee's peak RSS during each
row is sampled from /proc (every 50 ms). Sources are filled before the clock
starts; every database is deleted afterwards.
"""
import argparse
import base64
import json
import statistics
import threading
import time
import urllib.parse
import urllib.request


def split(url):
    u = urllib.parse.urlsplit(url)
    auth = None
    if u.username:
        auth = "Basic " + base64.b64encode(
            f"{urllib.parse.unquote(u.username)}:{urllib.parse.unquote(u.password or '')}".encode()
        ).decode()
    base = f"{u.scheme}://{u.hostname}:{u.port}"
    return base, auth


def call(url, method, path, body=None, timeout=3600):
    base, auth = split(url)
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    if auth:
        req.add_header("Authorization", auth)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def fill(url, db, n):
    st, _ = call(url, "PUT", f"/{db}")
    assert st in (201, 202), (url, db, st)
    for i in range(0, n, 1000):
        docs = [{"_id": f"{j:010d}", "foo": "bar"} for j in range(i, min(n, i + 1000))]
        st, out = call(url, "POST", f"/{db}/_bulk_docs", {"docs": docs})
        assert st in (201, 202), (st, out)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def run_row(args, row, tag):
    s, c = args.settee, args.couchdb
    src_server, dst_server, runner = {
        "anchor": (c, c, c),
        "c2s": (c, s, s),
        "s2c": (s, c, s),
        "s2s": (s, s, s),
    }[row]
    src, dst = f"bench-xrep-src-{tag}", f"bench-xrep-dst-{tag}"
    fill(src_server, src, args.docs)
    source = src if src_server == runner else f"{src_server}/{src}"
    target = dst if dst_server == runner else f"{dst_server}/{dst}"
    peak = [0]
    stop = threading.Event()
    if args.settee_pid:
        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], rss_kib(args.settee_pid))
                time.sleep(0.05)
        threading.Thread(target=sample, daemon=True).start()
    t0 = time.monotonic()
    st, out = call(runner, "POST", "/_replicate",
                   {"source": source, "target": target, "create_target": True})
    secs = time.monotonic() - t0
    stop.set()
    assert st == 200 and out.get("ok"), (row, st, out)
    _, info = call(dst_server, "GET", f"/{dst}")
    assert info.get("doc_count") == args.docs, (row, info)
    call(src_server, "DELETE", f"/{src}")
    call(dst_server, "DELETE", f"/{dst}")
    return {"row": row, "docs_per_s": args.docs / secs, "secs": secs,
            "settee_peak_rss_mib": peak[0] / 1024 if args.settee_pid else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--settee", required=True)
    ap.add_argument("--couchdb", required=True)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settee-pid", type=int)
    ap.add_argument("--json")
    ap.add_argument("--rows", default="anchor,c2s,s2c,s2s",
                    help="comma-separated subset of anchor,c2s,s2c,s2s")
    args = ap.parse_args()
    rows = args.rows.split(",")
    results = []
    for r in range(args.rounds):
        order = rows[r % len(rows):] + rows[:r % len(rows)]
        for row in order:
            res = run_row(args, row, f"{r}-{row}")
            res["round"] = r + 1
            results.append(res)
            print(json.dumps(res), flush=True)
    med = {row: statistics.median(x["docs_per_s"] for x in results if x["row"] == row) for row in rows}
    summary = []
    print("\n| row | docs/s (median) | ratio to anchor | rounds | Settee peak RSS (MiB) |")
    print("|---|---:|---:|---|---:|")
    for row in rows:
        rounds = [x["docs_per_s"] for x in results if x["row"] == row]
        peaks = [x["settee_peak_rss_mib"] for x in results if x["row"] == row and x["settee_peak_rss_mib"]]
        ratio = med[row] / med["anchor"] if "anchor" in med else float("nan")
        summary.append({"row": row, "median_docs_per_s": med[row], "ratio": ratio,
                        "rounds": rounds, "settee_peak_rss_mib": max(peaks) if peaks else None})
        print(f"| {row} | {med[row]:,.0f} | {ratio:.1f}x | {', '.join(f'{x:,.0f}' for x in rounds)} | "
              f"{max(peaks):.0f} |" if peaks else
              f"| {row} | {med[row]:,.0f} | {ratio:.1f}x | {', '.join(f'{x:,.0f}' for x in rounds)} | - |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"docs": args.docs, "results": results, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
