# Usage: python3 couchjs_map.py COUCHDB_HOME [DOCS]
# COUCHDB_HOME: an unpacked CouchDB release (../shared/reference/couchdb/start unpacks
# 3.4.3 to /tmp/reference-couchdb-3.4.3-PORT). Compared in docs/adr/0004-javascript-engine.md.
# Drives CouchDB 3.4.3's couchjs (SpiderMonkey 78) over its line protocol, the
# way CouchDB's indexer does: reset, add_fun, then one map_doc per document.
import json, subprocess, sys, time
home = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
p = subprocess.Popen([home + "/bin/couchjs", home + "/share/server/main.js"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=1 << 20)
def cmd(obj):
    p.stdin.write((json.dumps(obj) + "\n").encode()); p.stdin.flush()
    return p.stdout.readline()
cmd(["reset", {"reduce_limit": True}])
cmd(["add_fun", "function (doc) { emit(doc._id, 1); }"])
docs = [json.dumps({"_id": "%010d" % i, "_rev": "1-967a00dff5e02add41819138abb3284d", "type": "post" if i % 3 == 0 else "comment", "n": i, "tags": ["a", "b"], "title": "a small document"}) for i in range(n)]
lines = [('["map_doc",' + d + ']\n').encode() for d in docs]
# Pipelined in windows of 100 so the pipe never blocks, then serial (as CouchDB does: one at a time).
for label, window in [("serial (one command in flight)", 1), ("pipelined (100 in flight)", 100)]:
    start = time.time()
    i = 0
    while i < n:
        chunk = lines[i:i + window]
        p.stdin.write(b"".join(chunk)); p.stdin.flush()
        for _ in chunk:
            out = p.stdout.readline()
        i += window
    el = time.time() - start
    print("couchjs %s: %.0f docs/s (last answer %s)" % (label, n / el, out.strip()[:60]))
p.stdin.close(); p.wait()
