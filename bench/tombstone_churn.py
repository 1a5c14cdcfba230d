#!/usr/bin/env python3
"""Tombstone churn: a queue-like load, with and without automatic purge.

    python3 bench/tombstone_churn.py --url http://admin:admin@127.0.0.1:PORT \
        --data-dir SETTEE_DATA_DIR [--vs http://admin:admin@127.0.0.1:15984] \
        [--docs 1000000] [--live 20000] [--batch 1000] [--ttl 10_sec] \
        [--rounds 3] [--out bench/plots/tombstone_churn]

The load (the same on every server): documents of ~200 bytes are created by
_bulk_docs in batches of --batch with sequential ids; once --live of them
exist, every batch created is followed by the deletion of the oldest batch
(a queue: at most --live live documents), until --docs were created and all
but the last --live deleted. One client, one request at a time.

Settee runs --rounds times without a TTL and --rounds times with
`_auto_purge` {"deleted_document_ttl": --ttl} (a pass every second),
interleaved; the purger's cost is the ratio of the two median throughputs
(documents created and deleted per second). The reference (--vs, CouchDB
3.4.3, which has no automatic purge) runs the same load once.

Every 2 s (and at the end, and 30 s after it, to see the space reclaimed
once the last tombstones are due) the script samples the database's
`sizes.file` and, for Settee, the data directory's size on disk (du: SST
files, logs and all). Writes OUT.csv and OUT.svg (disk size over time) and
prints a summary table. Databases are deleted at the end. Bounded: every
request has a 300 s timeout; the load is bounded by --docs.
"""

import argparse
import base64
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.parse


class Server:
    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if u.username is not None:
            cred = f"{urllib.parse.unquote(u.username)}:{urllib.parse.unquote(u.password or '')}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(cred.encode()).decode()
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=300)

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        self.conn.request(method, path, body=data, headers=self.headers)
        r = self.conn.getresponse()
        raw = r.read()
        return r.status, (json.loads(raw) if raw else None)

    def ok(self, method, path, body=None, want=(200, 201, 202)):
        status, v = self.call(method, path, body)
        if status not in want:
            sys.exit(f"{method} {path}: {status} {v}")
        return v


def du(path):
    out = subprocess.run(["du", "-sb", path], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def run(server, db, args, ttl, data_dir, label):
    server.call("DELETE", f"/{db}")
    server.ok("PUT", f"/{db}")
    if ttl:
        server.ok("PUT", f"/{db}/_auto_purge", {"deleted_document_ttl": ttl})
    pad = "x" * 160
    samples = []
    t0 = time.monotonic()
    next_sample = 0.0
    revs = {}
    created = deleted = 0
    n_batches = args.docs // args.batch
    keep = args.live // args.batch

    def sample(phase):
        info = server.ok("GET", f"/{db}")
        row = {"server": label, "t": round(time.monotonic() - t0, 2), "phase": phase,
               "created": created, "deleted": deleted,
               "file": info["sizes"]["file"], "doc_del_count": info["doc_del_count"],
               "disk": du(data_dir) if data_dir else ""}
        samples.append(row)

    for b in range(n_batches):
        docs = [{"_id": f"q{b:06d}-{i:04d}", "n": b * args.batch + i, "pad": pad}
                for i in range(args.batch)]
        res = server.ok("POST", f"/{db}/_bulk_docs", {"docs": docs})
        revs[b] = [(r["id"], r["rev"]) for r in res]
        created += len(res)
        old = b - keep
        if old >= 0:
            dels = [{"_id": i, "_rev": r, "_deleted": True} for i, r in revs.pop(old)]
            server.ok("POST", f"/{db}/_bulk_docs", {"docs": dels})
            deleted += len(dels)
        now = time.monotonic() - t0
        if now >= next_sample:
            sample("load")
            next_sample = now + 2.0
    elapsed = time.monotonic() - t0
    sample("end")
    # After the load: the last tombstones come due, the space comes back.
    for _ in range(15):
        time.sleep(2.0)
        sample("after")
    server.ok("DELETE", f"/{db}")
    rate = (created + deleted) / elapsed
    return rate, samples


def svg(path, series, title):
    """Disk size over time, one line per run (a plain SVG, no dependency)."""
    w, h, m = 900, 420, 60
    tmax = max(s["t"] for _, rows in series for s in rows) or 1
    ymax = max(max(s["disk"] or s["file"], s["file"]) for _, rows in series for s in rows) or 1
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w/2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{m}" y1="{h-m}" x2="{w-m}" y2="{h-m}" stroke="black"/>',
           f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h-m}" stroke="black"/>',
           f'<text x="{w/2}" y="{h-20}" text-anchor="middle">seconds</text>',
           f'<text x="15" y="{h/2}" transform="rotate(-90 15 {h/2})" text-anchor="middle">MB on disk</text>']
    for i in range(6):
        y = h - m - i * (h - 2 * m) / 5
        out.append(f'<text x="{m-5}" y="{y+4}" text-anchor="end">{ymax * i / 5 / 1e6:.0f}</text>')
        x = m + i * (w - 2 * m) / 5
        out.append(f'<text x="{x}" y="{h-m+15}" text-anchor="middle">{tmax * i / 5:.0f}</text>')
    for k, (name, rows) in enumerate(series):
        pts = " ".join(f"{m + s['t'] / tmax * (w - 2 * m):.1f},{h - m - (s['disk'] or s['file']) / ymax * (h - 2 * m):.1f}"
                       for s in rows)
        c = colors[k % len(colors)]
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{pts}"/>')
        out.append(f'<text x="{m+10}" y="{m + 15 * k}" fill="{c}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--data-dir", required=True, help="the Settee server's data directory (for du)")
    ap.add_argument("--vs")
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--live", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--ttl", default="10_sec")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="bench/plots/tombstone_churn")
    args = ap.parse_args()

    settee = Server(args.url)
    settee.ok("PUT", "/_node/_local/_config/couch_auto_purge_plugin/check_interval", "1_sec")
    results = {"no_ttl": [], "ttl": []}
    series = []
    rows = []
    for r in range(args.rounds):
        for mode in ("no_ttl", "ttl"):
            label = f"settee {mode} #{r + 1}"
            rate, samples = run(settee, "churn_bench", args, args.ttl if mode == "ttl" else None,
                                args.data_dir, label)
            results[mode].append((rate, samples))
            print(f"{label}: {rate:,.0f} docs/s, end disk {samples[-1]['disk']/1e6:.1f} MB, "
                  f"file {samples[-1]['file']/1e6:.1f} MB, tombstones {samples[-1]['doc_del_count']}",
                  flush=True)
            rows.extend(samples)
    for mode in ("no_ttl", "ttl"):
        # The median round's curve goes in the plot.
        ranked = sorted(results[mode], key=lambda x: x[0])
        series.append((f"Settee, {'no TTL' if mode == 'no_ttl' else 'TTL ' + args.ttl}", ranked[len(ranked) // 2][1]))
    couch = None
    if args.vs:
        ref = Server(args.vs)
        rate, samples = run(ref, "churn_bench", args, None, None, "couchdb")
        couch = (rate, samples)
        rows.extend(samples)
        series.append(("CouchDB 3.4.3 (no automatic purge)", [dict(s, disk=s["file"]) for s in samples]))
        print(f"couchdb: {rate:,.0f} docs/s, end file {samples[-1]['file']/1e6:.1f} MB, "
              f"tombstones {samples[-1]['doc_del_count']}", flush=True)

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".csv", "w") as f:
        keys = ["server", "t", "phase", "created", "deleted", "file", "disk", "doc_del_count"]
        f.write(",".join(keys) + "\n")
        for s in rows:
            f.write(",".join(str(s[k]) for k in keys) + "\n")
    svg(args.out + ".svg", series, f"Queue churn: {args.docs:,} documents created and deleted, {args.live:,} live")

    med = {m: statistics.median(r for r, _ in results[m]) for m in results}
    last = {m: sorted(results[m], key=lambda x: x[0])[len(results[m]) // 2][1][-1] for m in results}
    print()
    print("| run | docs/s (median) | disk after (du) | db file after | tombstones after |")
    print("|---|---:|---:|---:|---:|")
    for m, name in (("no_ttl", "Settee, no TTL"), ("ttl", f"Settee, TTL {args.ttl}")):
        print(f"| {name} | {med[m]:,.0f} | {last[m]['disk']/1e6:.1f} MB | {last[m]['file']/1e6:.1f} MB | {last[m]['doc_del_count']:,} |")
    if couch:
        s = couch[1][-1]
        print(f"| CouchDB 3.4.3 | {couch[0]:,.0f} | – | {s['file']/1e6:.1f} MB | {s['doc_del_count']:,} |")
    print(f"\npurger cost: {100 * (1 - med['ttl'] / med['no_ttl']):.1f}% of throughput "
          f"(rounds: no TTL {[round(r) for r, _ in results['no_ttl']]}, TTL {[round(r) for r, _ in results['ttl']]})")


if __name__ == "__main__":
    main()
