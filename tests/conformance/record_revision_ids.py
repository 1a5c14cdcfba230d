#!/usr/bin/env python3
"""Records the revision ids the reference CouchDB gives a generated corpus
of edits (crates/settee/tests/revision_ids.rs checks Settee against them).

    python3 tests/conformance/record_revision_ids.py http://admin:admin@127.0.0.1:15984 \
        > tests/conformance/revision_ids.json

Each case: PUT a new document (body text sent as is), PUT an update of it,
DELETE it; for attachment cases a standalone attachment PUT in between.
Bodies are generated from a fixed seed: numbers (small, 32-bit edges,
64-bit, doubles, exponents, negative zero as a double; the integer `-0`
is a listed difference), strings (escapes, unicode,
astral planes), nesting, empty containers, key orders, inline attachments
(of types stored uncompressed: a compressed one's digest, and
so the revision, depends on the gzip implementation's bytes; see
tests/conformance/DIFFERENCES.md). Facts only: the texts sent and the revs answered.
"""
import base64, json, random, sys, urllib.parse, urllib.request

url = urllib.parse.urlsplit(sys.argv[1])
BASE = f"{url.scheme}://{url.hostname}:{url.port}"
AUTH = "Basic " + base64.b64encode(f"{url.username}:{url.password}".encode()).decode()

def call(method, path, body=None, ctype="application/json"):
    req = urllib.request.Request(BASE + path, data=body, method=method,
                                 headers={"Authorization": AUTH, "Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

rng = random.Random(20261207)
NUMS = ["0", "1", "-1", "255", "256", "2147483647", "2147483648", "-2147483648", "-2147483649",
        "9007199254740993", "18446744073709551615", "1.0", "0.1", "-0.0", "1e2", "1E-7", "3.141592653589793",
        "6.02e23", "-1.5e-300", "123.456"]
STRS = ['""', '"a"', '"\\u00e9t\\u00e9"', '"\\ud83d\\ude00"', '"tab\\tnew\\nline\\\\q\\""', '"\\u0000x"',
        '"日本語"', '"a/b"', '"\\/"', '"' + "x" * 300 + '"']
def value(depth):
    k = rng.randrange(8 if depth < 3 else 5)
    if k == 0: return rng.choice(NUMS)
    if k == 1: return rng.choice(STRS)
    if k == 2: return rng.choice(["true", "false", "null"])
    if k == 3: return rng.choice(NUMS + STRS)
    if k == 4: return rng.choice(["[]", "{}"])
    if k == 5: return "[" + ",".join(value(depth + 1) for _ in range(rng.randrange(4))) + "]"
    return obj(depth + 1)
def key():
    return json.dumps(rng.choice(["a", "b", "z", "k1", "k2", "é", "ключ", "key with space", "n" + str(rng.randrange(100))]))
def obj(depth):
    keys = []
    for _ in range(rng.randrange(5)):
        k = key()
        if k not in keys: keys.append(k)
    return "{" + ",".join(f"{k}:{value(depth)}" for k in keys) + "}"

cases = []
db = "/revision-ids-golden"
call("DELETE", db); call("PUT", db)
for i in range(150):
    doc_id = f"d{i:03}"
    first = obj(0) if i % 10 else "{}"
    second = obj(0)
    atts = None
    if i % 7 == 3:
        atts = {"z.bin": ("image/png", b"\x89PNG" + bytes(rng.randrange(256) for _ in range(20))),
                "a.dat": ("application/octet-stream", ("hello " * rng.randrange(1, 20)).encode())}
        inner = ",".join(f'{json.dumps(n)}:{{"content_type":"{t}","data":"{base64.b64encode(d).decode()}"}}' for n, (t, d) in atts.items())
        first = first[:-1] + ("," if first != "{}" else "") + f'"_attachments":{{{inner}}}' + "}"
    s, r = call("PUT", f"{db}/{doc_id}", first.encode())
    if s != 201:
        continue
    case = {"id": doc_id, "create": first, "rev1": r["rev"]}
    rev = r["rev"]
    if atts:
        s, r = call("PUT", f"{db}/{doc_id}/m.bin?rev={rev}", b"\x00\x01\x02", "application/octet-stream")
        case["att_put"] = {"name": "m.bin", "content_type": "application/octet-stream", "data_b64": base64.b64encode(b"\x00\x01\x02").decode(), "rev": r["rev"]}
        rev = r["rev"]
        s, doc = call("GET", f"{db}/{doc_id}")
        upd = dict(json.loads(second))
        upd["_attachments"] = doc["_attachments"]
        upd["_rev"] = rev
        second_text = json.dumps(upd, ensure_ascii=False, separators=(",", ":"))
    else:
        second_text = second[:-1] + ("," if second != "{}" else "") + f'"_rev":"{rev}"' + "}"
    s, r = call("PUT", f"{db}/{doc_id}", second_text.encode())
    if s != 201:
        continue
    case["update"] = second_text
    case["rev2"] = r["rev"]
    s, r = call("DELETE", f"{db}/{doc_id}?rev={r['rev']}")
    case["rev3"] = r["rev"]
    cases.append(case)
call("DELETE", db)
json.dump({"recorded_from": "Apache CouchDB 3.4.3 (../shared/reference/couchdb)", "cases": cases}, sys.stdout, indent=1, ensure_ascii=False)
print()
