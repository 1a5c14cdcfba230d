#!/usr/bin/env python3
"""_changes side by side: the one read path `settee bench` has no scenario for.

    python3 bench/changes_vs.py --url http://admin:admin@127.0.0.1:PORT \
        --vs http://admin:admin@127.0.0.1:16010 [--docs 100000] [--repeat 5] [--json FILE]

Each server gets a fresh database of --docs documents {"foo":"bar"} with
sequential ids (the same preload as `settee bench`: _bulk_docs batches of
1,000, outside the clock), then, interleaved server by server, --repeat times:

  changes_full          GET /db/_changes                     (one response, every row)
  changes_include_docs  GET /db/_changes?include_docs=true
  changes_page_1000     GET /db/_changes?limit=1000&since=S  (paged by last_seq until done)

Throughput is rows per second of wall time from sending the request to the
last byte; the median of the repeats is reported. One keep-alive HTTP/1.1
connection on a raw socket; the clock stops at the last byte and the body
is decoded afterwards (rows counted and checked), so the client's Python
does little on the clock. The databases are deleted at the end.
Bounded: every request has a 120 s socket timeout.
"""

import argparse
import base64
import json
import os
import re
import socket
import statistics
import sys
import time
import urllib.parse


class Conn:
    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.auth = None
        if u.username is not None:
            cred = f"{urllib.parse.unquote(u.username)}:{urllib.parse.unquote(u.password or '')}"
            self.auth = "Basic " + base64.b64encode(cred.encode()).decode()
        self.sock = socket.create_connection((self.host, self.port), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()  # appends are amortised O(1)

    def request(self, method, path, body=b""):
        """(status, raw body as received, chunked?, seconds to the last byte)."""
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}",
                "Accept: application/json", f"Content-Length: {len(body)}"]
        if body:
            head.append("Content-Type: application/json")
        if self.auth:
            head.append(f"Authorization: {self.auth}")
        t0 = time.perf_counter()
        self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        while b"\r\n\r\n" not in self.buf:
            self._recv()
        end = self.buf.index(b"\r\n\r\n")
        hdr = bytes(self.buf[:end])
        del self.buf[:end + 4]
        lines = hdr.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, v in
                   (l.split(":", 1) for l in lines[1:] if ":" in l)}
        if headers.get("transfer-encoding", "").lower() == "chunked":
            # The body ends with the zero-size chunk; rows never contain
            # "\r\n0\r\n\r\n". Only the bytes not yet searched are searched.
            searched = 0
            while True:
                if self.buf.startswith(b"0\r\n\r\n"):  # an empty body
                    n = 5
                    break
                i = self.buf.find(b"\r\n0\r\n\r\n", max(0, searched - 6))
                if i >= 0:
                    n = i + 7
                    break
                searched = len(self.buf)
                self._recv()
            chunked = True
        else:
            n = int(headers.get("content-length", "0"))
            while len(self.buf) < n:
                self._recv()
            chunked = False
        secs = time.perf_counter() - t0
        raw = bytes(self.buf[:n])
        del self.buf[:n]
        return status, raw, chunked, secs

    def _recv(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("server closed the connection")
        self.buf += data

    def json(self, method, path, body=b"", ok=(200, 201, 202)):
        status, raw, chunked, _ = self.request(method, path, body)
        text = dechunk(raw) if chunked else raw
        if status not in ok:
            raise RuntimeError(f"{method} {path}: {status} {text[:300]!r}")
        return json.loads(text) if text else None


def dechunk(raw):
    out, i = [], 0
    while True:
        j = raw.index(b"\r\n", i)
        size = int(raw[i:j].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(raw[j + 2:j + 2 + size])
        i = j + 2 + size + 2


def preload(conn, db, docs):
    for start in range(0, docs, 1000):
        body = {"docs": [{"_id": f"{i:010}", "foo": "bar"}
                         for i in range(start, min(start + 1000, docs))]}
        res = conn.json("POST", f"/{db}/_bulk_docs", json.dumps(body).encode())
        if any("error" in r for r in res):
            raise RuntimeError(f"preload: {res[:3]}")


def one(conn, db, scenario, docs):
    """Rows and seconds of one measurement."""
    if scenario in ("changes_full", "changes_include_docs"):
        q = "?include_docs=true" if scenario == "changes_include_docs" else ""
        status, raw, chunked, secs = conn.request("GET", f"/{db}/_changes{q}")
        assert status == 200, (status, raw[:200])
        res = json.loads(dechunk(raw) if chunked else raw)
        rows = len(res["results"])
        if q:
            assert res["results"][-1]["doc"]["foo"] == "bar"
        return rows, secs
    assert scenario == "changes_page_1000"
    rows, secs, since = 0, 0.0, "0"
    for _ in range(docs // 1000 + 2):  # bounded
        path = f"/{db}/_changes?limit=1000&since={urllib.parse.quote(json.dumps(since) if not isinstance(since, str) else since)}"
        status, raw, chunked, s = conn.request("GET", path)
        assert status == 200, (status, raw[:200])
        secs += s
        res = json.loads(dechunk(raw) if chunked else raw)
        n = len(res["results"])
        rows += n
        since = res["last_seq"]
        if n < 1000:
            break
    return rows, secs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--vs", action="append", default=[])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    urls = [a.url] + a.vs
    tag = f"{os.getpid()}-{int(time.time() * 1000) % 1_000_000}"
    servers = []
    for n, url in enumerate(urls):
        c = Conn(url)
        welcome = c.json("GET", "/")
        name = "settee" if "settee" in json.dumps(welcome).lower() else (
            "couchdb" if "couchdb" in welcome else "server")
        if any(s["name"] == name for s in servers):
            name = f"{name}#{n + 1}"
        db = f"bench-changes-{tag}-{n}"
        c.json("PUT", f"/{db}", ok=(201, 202))
        servers.append({"name": name, "version": welcome.get("version"),
                        "url": urllib.parse.urlsplit(url)._replace(netloc=f"{c.host}:{c.port}").geturl(),
                        "conn": c, "db": db})
    scenarios = ["changes_full", "changes_include_docs", "changes_page_1000"]
    results = {s: {v["name"]: [] for v in servers} for s in scenarios}
    load_before = open("/proc/loadavg").read().split()[:3]
    try:
        for s in servers:
            preload(s["conn"], s["db"], a.docs)
        for scenario in scenarios:
            for _ in range(a.repeat):
                for s in servers:
                    rows, secs = one(s["conn"], s["db"], scenario, a.docs)
                    if rows != a.docs:
                        raise RuntimeError(f"{scenario} on {s['name']}: {rows} rows, expected {a.docs}")
                    results[scenario][s["name"]].append(rows / secs)
    finally:
        for s in servers:
            try:
                s["conn"].json("DELETE", f"/{s['db']}", ok=(200, 202, 404))
            except Exception as e:  # cleanup must not hide the error
                print(f"cleanup {s['name']}: {e}", file=sys.stderr)
    load_after = open("/proc/loadavg").read().split()[:3]
    names = [s["name"] for s in servers]
    print(f"{'row':<22}" + "".join(f"{n + ' rows/s':>20}" for n in names) + f"{'ratio 1st/2nd':>16}")
    report = {"command": re.sub(r"(//[^:/@]+:)[^@/]*@", r"\1***@", " ".join(sys.argv)), "docs": a.docs, "repeat": a.repeat,
              "servers": [{k: s[k] for k in ("name", "version", "url")} for s in servers],
              "loadavg_before": load_before, "loadavg_after": load_after, "rows": []}
    for scenario in scenarios:
        med = [statistics.median(results[scenario][n]) for n in names]
        ratio = med[0] / med[1] if len(med) > 1 else None
        print(f"{scenario:<22}" + "".join(f"{m:>20,.0f}" for m in med) +
              (f"{ratio:>15.2f}x" if ratio else ""))
        report["rows"].append({"name": scenario, "unit": "rows/s",
                               "runs": {n: results[scenario][n] for n in names},
                               "median": dict(zip(names, med)), "ratio": ratio})
    print(f"load average before: {' '.join(load_before)}; after: {' '.join(load_after)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
