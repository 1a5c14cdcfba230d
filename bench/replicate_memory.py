#!/usr/bin/env python3
"""The replicator's own memory, however large the database (issue 22).

    python3 bench/replicate_memory.py --bin target/release/settee [--json OUT]
        [--cases 10k,100k,1m,deep,conflicts]

Three Settee processes: A holds the source, B the target, and C — holding
no data — runs the replication (`POST C/_replicate` with A's and B's URLs),
so C's memory is the replicator's: its job, its HTTP client and buffers,
plus an idle server's baseline. C is started fresh for every case, and its
peak resident memory (VmHWM from /proc) is read when the replication has
answered. Cases:
  10k, 100k, 1m   that many new documents (~150 bytes each)
  deep            10,000 documents with 1,000-revision histories
  conflicts       2,000 documents with 100 conflicting leaves each
  atts            10 documents with a 32 MiB attachment each (streamed)
Every process and directory is removed afterwards.
"""
import argparse
import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

ADMIN = ("admin", "admin")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="settee-repmem-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "serve", "--bind", f"127.0.0.1:{self.port}", "--data", self.dir,
             "--admin", f"{ADMIN[0]}:{ADMIN[1]}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                self.call("GET", "/_up")
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("server did not start")

    def url(self, db):
        return f"http://{ADMIN[0]}:{ADMIN[1]}@127.0.0.1:{self.port}/{db}"

    def call(self, method, path, body=None, timeout=3600):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method)
        req.add_header("Authorization", "Basic " + base64.b64encode(
            f"{ADMIN[0]}:{ADMIN[1]}".encode()).decode())
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def mem_kib(self, key):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def post(a, db, docs, new_edits=True):
    body = {"docs": docs}
    if not new_edits:
        body["new_edits"] = False
    st, out = a.call("POST", f"/{db}/_bulk_docs", body)
    assert st in (201, 202), (st, str(out)[:300])


def h(*parts):
    return hashlib.md5("/".join(map(str, parts)).encode()).hexdigest()


def fill_plain(a, db, n):
    for i in range(0, n, 2000):
        post(a, db, [{"_id": f"{j:010d}", "name": f"document {j}", "n": j,
                      "tags": ["a", "b", "c"], "pad": "x" * 64}
                     for j in range(i, min(n, i + 2000))])
    return n


def fill_deep(a, db, n=10_000, depth=1000):
    for i in range(0, n, 100):
        docs = []
        for j in range(i, min(n, i + 100)):
            ids = [h(j, k) for k in range(depth)]
            docs.append({"_id": f"deep{j:06d}", "_rev": f"{depth}-{ids[0]}",
                         "_revisions": {"start": depth, "ids": ids}, "n": j})
        post(a, db, docs, new_edits=False)
    return n


def fill_conflicts(a, db, n=2_000, leaves=100):
    for i in range(0, n, 20):
        docs = []
        for j in range(i, min(n, i + 20)):
            for k in range(leaves):
                leaf = h(j, k)
                docs.append({"_id": f"conf{j:06d}", "_rev": f"2-{leaf}",
                             "_revisions": {"start": 2, "ids": [leaf, h(j, "root")]},
                             "leaf": k})
        post(a, db, docs, new_edits=False)
    return n


def fill_atts(a, db, n=10, size=32 << 20):
    for j in range(n):
        data = os.urandom(size)
        req = urllib.request.Request(
            f"http://127.0.0.1:{a.port}/{db}/att{j:03d}/blob.bin", data=data, method="PUT")
        req.add_header("Authorization", "Basic " + base64.b64encode(
            f"{ADMIN[0]}:{ADMIN[1]}".encode()).decode())
        req.add_header("Content-Type", "application/octet-stream")
        with urllib.request.urlopen(req, timeout=600) as r:
            assert r.status == 201, r.status
    return n


CASES = {
    "10k": lambda a, db: fill_plain(a, db, 10_000),
    "100k": lambda a, db: fill_plain(a, db, 100_000),
    "1m": lambda a, db: fill_plain(a, db, 1_000_000),
    "deep": fill_deep,
    "conflicts": fill_conflicts,
    "atts": fill_atts,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--cases", default="10k,100k,1m,deep,conflicts,atts")
    ap.add_argument("--json")
    args = ap.parse_args()
    a, b = Server(args.bin), Server(args.bin)
    results = []
    try:
        for case in args.cases.split(","):
            db = f"src_{case}"
            assert a.call("PUT", f"/{db}")[0] == 201
            docs = CASES[case](a, db)
            info = a.call("GET", f"/{db}")[1]
            c = Server(args.bin)
            try:
                idle = c.mem_kib("VmRSS")
                t0 = time.time()
                st, out = c.call("POST", "/_replicate", {
                    "source": a.url(db), "target": b.url(f"dst_{case}"), "create_target": True})
                secs = time.time() - t0
                assert st == 200 and out.get("ok"), (st, str(out)[:300])
                peak = c.mem_kib("VmHWM")
                dst = b.call("GET", f"/dst_{case}")[1]
                assert dst["doc_count"] == info["doc_count"], (dst, info)
                row = {"case": case, "docs": docs, "source_bytes": info["sizes"]["file"],
                       "seconds": round(secs, 1), "docs_per_s": round(docs / secs),
                       "replicator_idle_rss_mib": round(idle / 1024, 1),
                       "replicator_peak_rss_mib": round(peak / 1024, 1),
                       "docs_written": out["history"][0]["docs_written"]}
                print(json.dumps(row), flush=True)
                results.append(row)
            finally:
                c.stop()
            a.call("DELETE", f"/{db}")
            b.call("DELETE", f"/dst_{case}")
    finally:
        a.stop()
        b.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "command": "python3 bench/replicate_memory.py --bin target/release/settee",
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
