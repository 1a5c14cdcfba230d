#!/usr/bin/env python3
"""Medians over rounds of a Settee-vs-CouchDB run, and one JSON of the raw rounds.

    python3 bench/vs_couchdb_medians.py --out bench/vs-couchdb-DATE.json \
        --bench r1.json r2.json r3.json --changes c1.json c2.json c3.json \
        [--uptime uptime.log]

--bench: the JSON files of `settee bench --url SETTEE --vs COUCHDB ... --json F`,
one per round; --changes: those of bench/changes_vs.py, one per round.
Prints the markdown table (median of the rounds' throughputs for each server,
ratio of the medians; the median of the per-round ratios is in the JSON) and writes every round's raw report plus the medians
to --out.
"""

import argparse
import json
import statistics

# Targets of the issue, as ratios Settee / CouchDB measured in the same run.
TARGETS = {
    "bulk_doc_1000": 20, "benchbulk": 20,
    "single_doc_insert": 10, "batch_ok_doc_insert": 10,
    "concurrent_writers_1": 10, "concurrent_writers_32": 10,
    "random_reads_1": 10, "random_reads_32": 10,
}


def rate(v):
    for div, suf in ((1e6, "M"), (1e3, "k")):
        if v >= div:
            x = v / div
            return f"{x:.{0 if x >= 100 else 1 if x >= 10 else 2}f}{suf}"
    return f"{v:.0f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--bench", nargs="+", required=True)
    ap.add_argument("--changes", nargs="*", default=[])
    ap.add_argument("--uptime")
    a = ap.parse_args()
    rounds = [json.load(open(f)) for f in a.bench]
    changes = [json.load(open(f)) for f in a.changes]
    runs = {}  # row -> {"settee": [...], "couchdb": [...]}
    units = {}
    for r in rounds:
        for o in r["results"]:
            who = "settee" if o["server"].startswith("settee") else "couchdb"
            runs.setdefault(o["name"], {"settee": [], "couchdb": []})[who].append(
                o["summary"]["throughput"])
            units[o["name"]] = o["unit"] + "/s"
    for c in changes:
        for row in c["rows"]:
            for who in ("settee", "couchdb"):
                runs.setdefault(row["name"], {"settee": [], "couchdb": []})[who].append(
                    row["median"][who])
            units[row["name"]] = "rows/s"
    medians = []
    print("| row | Settee | CouchDB 3.4.3 | ratio | target | met? | rounds (Settee; CouchDB) |")
    print("|---|---:|---:|---:|---:|---|---|")
    for name, v in runs.items():
        s, c = statistics.median(v["settee"]), statistics.median(v["couchdb"])
        ratio = s / c
        t = TARGETS.get(name)
        met = None if t is None else ratio >= t
        per_round = [x / y for x, y in zip(v["settee"], v["couchdb"])]
        medians.append({"row": name, "unit": units[name], "settee": s, "couchdb": c,
                        "ratio": ratio, "target_ratio": t, "met": met,
                        "round_ratios": per_round,
                        "median_of_round_ratios": statistics.median(per_round),
                        "settee_rounds": v["settee"], "couchdb_rounds": v["couchdb"]})
        print(f"| {name} | {rate(s)} {units[name]} | {rate(c)} {units[name]} | {ratio:.1f}× | "
              f"{'≥ %d×' % t if t else '—'} | {'—' if met is None else 'yes' if met else 'no'} | "
              f"{' '.join(rate(x) for x in v['settee'])}; {' '.join(rate(x) for x in v['couchdb'])} |")
    out = {"medians": medians, "rounds": rounds, "changes_rounds": changes}
    if a.uptime:
        out["uptime_log"] = open(a.uptime).read().splitlines()
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
