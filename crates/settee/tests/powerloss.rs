//! Power loss, not just a process kill (issue 44): the data directory is on
//! LazyFS (`../shared/reference/lazyfs/mount`), which keeps written bytes
//! in its own cache until they are fsynced. Each round loads the real
//! binary through every write path, SIGKILLs it while writers, compaction
//! and index updates are in flight, drops every unsynced byte
//! (`lazyfs::clear-cache`, as a power cut would) and restarts it on the
//! same directory. Then:
//! - the server starts (no repair), with no panic in its log;
//! - every write acknowledged as durable (full commit, explicit
//!   `X-Couch-Full-Commit: true`, delayed writes followed by
//!   `_ensure_full_commit`, a finished one-shot replication) is there with
//!   its revision — documents, deletions, `new_edits=false` revisions,
//!   attachment bytes (inline, standalone, multipart, a multi-chunk one),
//!   `_local` documents, `_security`, design documents, Mango indexes —
//!   and every acknowledged purge stays purged;
//! - delayed-commit and `batch=ok` writes acknowledged longer ago than their
//!   flush interval (1 s) plus an allowance for the fsync itself survive
//!   (docs/durability.md states the window and the loss measured inside it);
//! - the view index and the Mango index answer exactly the documents there
//!   are (rebuilt or caught up, never a row for a lost document).

mod common;
mod lazyfs_support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Server, ADMIN};
use lazyfs_support::Lazy;
use md5::{Digest, Md5};
use serde_json::{json, Value};

/// How long after its acknowledgement a delayed or batched write must be
/// durable: the flush interval (`delayed_flush_ms`, `batch_flush_ms`:
/// 1 s) plus 0.5 s for the flush's own write and fsync on a loaded
/// 2-core machine.
const WINDOW: Duration = Duration::from_millis(1500);

/// A request that may fail in transport (the server is killed under it):
/// `None` then, never a panic.
fn try_call(
    agent: &ureq::Agent,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Option<(u16, Vec<u8>)> {
    let auth = common::base64_lite::encode(format!("{}:{}", ADMIN.0, ADMIN.1).as_bytes());
    let mut req = agent
        .request(method, &format!("http://127.0.0.1:{port}{path}"))
        .set("Authorization", &format!("Basic {auth}"));
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let sent = match body {
        Some(b) => req.send_bytes(b),
        None => req.call(),
    };
    let resp = match sent {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(_) => return None,
    };
    let status = resp.status();
    let mut out = Vec::new();
    resp.into_reader().read_to_end(&mut out).ok()?;
    Some((status, out))
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

/// What must be true after every power cut.
#[derive(Default)]
struct Ledger {
    /// (db, id) → the revision that must win, live.
    live: BTreeMap<(String, String), String>,
    /// (db, id) → the revision of its deletion, which must win.
    deleted: BTreeMap<(String, String), String>,
    /// Purged documents: must stay unknown.
    purged: BTreeSet<(String, String)>,
    /// (db, doc, attachment) → MD5 of its bytes.
    atts: BTreeMap<(String, String, String), [u8; 16]>,
    /// `_local` documents of `p`: id → body member `v`.
    locals: BTreeMap<String, Value>,
    /// The security object of `p`.
    security: Option<Value>,
    /// Mango indexes of `p` by design document.
    indexes: BTreeSet<String>,
    /// Delayed-commit or batched writes since the last cut: (db, id,
    /// acknowledged at, how).
    timed: Vec<(String, String, Instant, &'static str)>,
    /// Delayed-commit or batched writes that survived a cut: they must
    /// stay.
    survived: BTreeSet<(String, String)>,
    /// Durable acknowledgements received (each document revision,
    /// deletion, purge, `_local` write, `_security` and index creation).
    acked: usize,
    /// Durable acknowledgements found lost after a cut (must stay 0).
    lost: usize,
}

impl Ledger {
    fn put_live(&mut self, db: &str, id: &str, rev: &str) {
        self.acked += 1;
        self.live.insert((db.into(), id.into()), rev.into());
    }
}

/// Pseudo-random bytes (xorshift), so attachment bodies are not compressible.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn md5(bytes: &[u8]) -> [u8; 16] {
    Md5::digest(bytes).into()
}

fn rev_of(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).expect("JSON answer");
    v["rev"]
        .as_str()
        .unwrap_or_else(|| panic!("no rev in {v}"))
        .to_string()
}

/// A request that must answer `want`; its body.
fn must(
    s: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    want: u16,
) -> Vec<u8> {
    let agent = common::agent();
    let (status, out) = try_call(&agent, s.port, method, path, headers, body)
        .unwrap_or_else(|| panic!("{method} {path}: no answer"));
    assert_eq!(
        status,
        want,
        "{method} {path}: {}",
        String::from_utf8_lossy(&out)
    );
    out
}

fn must_json(s: &Server, method: &str, path: &str, body: &Value, want: u16) -> Value {
    let out = must(
        s,
        method,
        path,
        &[JSON],
        Some(body.to_string().as_bytes()),
        want,
    );
    serde_json::from_slice(&out).expect("JSON answer")
}

fn start(data: &Path, log: &Path) -> Server {
    let s = Server::start_in_logged(data, &[], log);
    assert_eq!(s.admin("GET", "/_up", None).status, 200);
    s
}

/// Databases, the view and the Mango index every round checks against.
fn setup(s: &Server, l: &mut Ledger) {
    for db in ["p", "src", "p_rep"] {
        s.create_db(db);
    }
    let ddoc = json!({"views": {
        "by_n": {"map": "function(doc){ if (typeof doc.n === 'number') emit(doc.n, null); }"},
        "count": {"map": "function(doc){ if (typeof doc.n === 'number') emit(null, 1); }",
                  "reduce": "_count"}
    }});
    let v = must_json(s, "PUT", "/p/_design/d", &ddoc, 201);
    l.put_live("p", "_design/d", v["rev"].as_str().unwrap());
    let idx = json!({"index": {"fields": ["n"]}, "ddoc": "idx", "name": "by-n"});
    must_json(s, "POST", "/p/_index", &idx, 200);
    l.indexes.insert("_design/idx".into());
}

/// Every write path once, each acknowledged as durable, recorded.
fn serial_paths(s: &Server, r: usize, l: &mut Ledger) {
    let full = ("X-Couch-Full-Commit", "true");
    // Single PUT (default and explicit full commit), POST, update, DELETE.
    for i in 0..20 {
        let id = format!("r{r}-put-{i}");
        let headers: &[(&str, &str)] = if i % 2 == 0 { &[JSON] } else { &[JSON, full] };
        let body = json!({"n": i, "round": r}).to_string();
        let out = must(
            s,
            "PUT",
            &format!("/p/{id}"),
            headers,
            Some(body.as_bytes()),
            201,
        );
        l.put_live("p", &id, &rev_of(&out));
    }
    for i in 0..10 {
        let v = must_json(s, "POST", "/p", &json!({"n": 100 + i, "via": "post"}), 201);
        l.put_live("p", v["id"].as_str().unwrap(), v["rev"].as_str().unwrap());
    }
    let key = ("p".to_string(), format!("r{r}-put-0"));
    let rev = l.live[&key].clone();
    let v = must_json(
        s,
        "PUT",
        &format!("/p/{}?rev={rev}", key.1),
        &json!({"n": 0, "round": r, "updated": true}),
        201,
    );
    l.live.insert(key, v["rev"].as_str().unwrap().into());
    for i in 0..5 {
        let id = format!("r{r}-del-{i}");
        let v = must_json(s, "PUT", &format!("/p/{id}"), &json!({"n": i}), 201);
        let out = must(
            s,
            "DELETE",
            &format!("/p/{id}?rev={}", v["rev"].as_str().unwrap()),
            &[],
            None,
            200,
        );
        l.deleted.insert(("p".into(), id), rev_of(&out));
        l.acked += 1;
    }
    // _bulk_docs, then new_edits=false with revisions of our own.
    let docs: Vec<Value> = (0..50)
        .map(|i| json!({"_id": format!("r{r}-bulk-{i}"), "n": 200 + i}))
        .collect();
    let v = must_json(s, "POST", "/p/_bulk_docs", &json!({ "docs": docs }), 201);
    for row in v.as_array().unwrap() {
        assert_eq!(row["ok"], json!(true), "{row}");
        l.put_live(
            "p",
            row["id"].as_str().unwrap(),
            row["rev"].as_str().unwrap(),
        );
    }
    let docs: Vec<Value> = (0..20)
        .map(|i| {
            let h = |k: usize| format!("{:032x}", (r * 1000 + i) * 10 + k);
            json!({"_id": format!("r{r}-nef-{i}"), "_rev": format!("3-{}", h(3)), "n": 300 + i,
                   "_revisions": {"start": 3, "ids": [h(3), h(2), h(1)]}})
        })
        .collect();
    must_json(
        s,
        "POST",
        "/p/_bulk_docs",
        &json!({"docs": docs, "new_edits": false}),
        201,
    );
    for d in &docs {
        l.put_live("p", d["_id"].as_str().unwrap(), d["_rev"].as_str().unwrap());
    }
    attachments(s, r, l);
    // _local, _security, design document, Mango index.
    let id = format!("r{r}-local");
    must_json(s, "PUT", &format!("/p/_local/{id}"), &json!({"v": r}), 201);
    l.locals.insert(id, json!(r));
    l.acked += 1;
    let sec = json!({"admins": {"names": [], "roles": []},
                     "members": {"names": [format!("user{r}")], "roles": ["_admin"]}});
    must_json(s, "PUT", "/p/_security", &sec, 200);
    l.security = Some(sec);
    l.acked += 1;
    let ddoc = json!({"views": {"v": {"map": format!("function(doc){{ if (doc.round === {r}) emit(doc._id, null); }}")}}});
    let v = must_json(s, "PUT", &format!("/p/_design/r{r}"), &ddoc, 201);
    l.put_live("p", &format!("_design/r{r}"), v["rev"].as_str().unwrap());
    must(
        s,
        "GET",
        &format!("/p/_design/r{r}/_view/v?limit=1"),
        &[],
        None,
        200,
    );
    let idx = json!({"index": {"fields": ["round"]}, "ddoc": format!("idx-r{r}")});
    must_json(s, "POST", "/p/_index", &idx, 200);
    l.indexes.insert(format!("_design/idx-r{r}"));
    l.acked += 1;
    // _purge.
    let mut purge = serde_json::Map::new();
    for i in 0..3 {
        let id = format!("r{r}-pur-{i}");
        let v = must_json(s, "PUT", &format!("/p/{id}"), &json!({"n": 400 + i}), 201);
        purge.insert(id.clone(), json!([v["rev"]]));
        l.purged.insert(("p".into(), id));
    }
    must_json(s, "POST", "/p/_purge", &Value::Object(purge), 201);
    l.acked += 3;
    // Replication into the server: once it answers, its writes are durable.
    let docs: Vec<Value> = (0..30)
        .map(|i| json!({"_id": format!("r{r}-rep-{i}"), "k": i}))
        .collect();
    let v = must_json(s, "POST", "/src/_bulk_docs", &json!({ "docs": docs }), 201);
    let source = format!("http://{}:{}@127.0.0.1:{}/src", ADMIN.0, ADMIN.1, s.port);
    let rep = must_json(
        s,
        "POST",
        "/_replicate",
        &json!({"source": source, "target": "p_rep"}),
        200,
    );
    assert_eq!(rep["ok"], json!(true), "{rep}");
    for row in v.as_array().unwrap() {
        let (id, rev) = (row["id"].as_str().unwrap(), row["rev"].as_str().unwrap());
        l.put_live("src", id, rev);
        l.put_live("p_rep", id, rev);
    }
    // Delayed commits made durable by _ensure_full_commit.
    let mut pending = Vec::new();
    for i in 0..10 {
        let id = format!("r{r}-ensured-{i}");
        let out = must(
            s,
            "PUT",
            &format!("/p/{id}"),
            &[JSON, ("X-Couch-Full-Commit", "false")],
            Some(json!({"n": 500 + i}).to_string().as_bytes()),
            201,
        );
        pending.push((id, rev_of(&out)));
    }
    must(s, "POST", "/p/_ensure_full_commit", &[JSON], None, 201);
    for (id, rev) in pending {
        l.put_live("p", &id, &rev);
    }
}

fn attachments(s: &Server, r: usize, l: &mut Ledger) {
    use base64::Engine as _;
    let seed = r as u64 * 7919;
    // Inline.
    let bytes = noise(seed + 1, 3000);
    let id = format!("r{r}-att-inline");
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    let doc = json!({"_attachments": {"a.bin": {"content_type": "application/octet-stream", "data": data}}});
    let v = must_json(s, "PUT", &format!("/p/{id}"), &doc, 201);
    l.put_live("p", &id, v["rev"].as_str().unwrap());
    l.atts.insert(("p".into(), id, "a.bin".into()), md5(&bytes));
    // Standalone, and a large one of many chunks.
    for (name, len) in [("s.bin", 100_000), ("big.bin", 3 * 1024 * 1024 + 17)] {
        let bytes = noise(seed + len as u64, len);
        let id = format!("r{r}-att-{name}");
        let out = must(
            s,
            "PUT",
            &format!("/p/{id}/{name}"),
            &[("Content-Type", "application/octet-stream")],
            Some(&bytes),
            201,
        );
        l.put_live("p", &id, &rev_of(&out));
        l.atts.insert(("p".into(), id, name.into()), md5(&bytes));
    }
    // Multipart/related.
    let bytes = noise(seed + 3, 50_000);
    let id = format!("r{r}-att-mp");
    let head = json!({"kind": "multipart", "_attachments": {"m.bin": {
        "follows": true, "content_type": "application/octet-stream", "length": bytes.len()}}});
    let mut body =
        format!("--XYZ\r\nContent-Type: application/json\r\n\r\n{head}\r\n--XYZ\r\n\r\n")
            .into_bytes();
    body.extend_from_slice(&bytes);
    body.extend_from_slice(b"\r\n--XYZ--");
    let out = must(
        s,
        "PUT",
        &format!("/p/{id}"),
        &[("Content-Type", "multipart/related; boundary=\"XYZ\"")],
        Some(&body),
        201,
    );
    l.put_live("p", &id, &rev_of(&out));
    l.atts.insert(("p".into(), id, "m.bin".into()), md5(&bytes));
}

/// The kinds of single-document writer: full commit (by default and by
/// header), delayed commit, `batch=ok`.
const KINDS: [Writer; 4] = [
    ("full", &[JSON], "", 201),
    ("fullhdr", &[JSON, ("X-Couch-Full-Commit", "true")], "", 201),
    (
        "delayed",
        &[JSON, ("X-Couch-Full-Commit", "false")],
        "",
        201,
    ),
    ("batch", &[JSON], "?batch=ok", 202),
];

/// Writers of every durability, compaction and index updates, for
/// `run_for`; then SIGKILL with all of them in flight. Returns the instant
/// of the kill.
/// `only`: the kinds of writer to run (all of them, with uploads,
/// compaction and index updates, when `None`).
fn load_and_kill(
    s: Server,
    r: usize,
    run_for: Duration,
    l: &Arc<Mutex<Ledger>>,
    only: Option<&str>,
) -> Instant {
    let stop = Arc::new(AtomicBool::new(false));
    let port = s.port;
    let mut threads = Vec::new();
    // Three writers of each kind.
    for ((kind, headers, query, want), w) in
        KINDS.into_iter().flat_map(|k| (0..3).map(move |w| (k, w)))
    {
        if only.is_some_and(|o| o != kind) {
            continue;
        }
        let (stop, l) = (stop.clone(), l.clone());
        threads.push(std::thread::spawn(move || {
            let agent = common::agent();
            for k in 0..100_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let id = format!("r{r}-{kind}{w}-{k}");
                let body = json!({"n": 1000 + k, "kind": kind}).to_string();
                let path = format!("/p/{id}{query}");
                let Some((status, out)) =
                    try_call(&agent, port, "PUT", &path, headers, Some(body.as_bytes()))
                else {
                    break;
                };
                let at = Instant::now();
                assert_eq!(status, want, "{path}: {}", String::from_utf8_lossy(&out));
                let mut l = l.lock().unwrap();
                match kind {
                    "full" | "fullhdr" => l.put_live("p", &id, &rev_of(&out)),
                    _ => l.timed.push(("p".into(), id, at, kind)),
                }
            }
        }));
    }
    if only.is_none() {
        // _bulk_docs of 20 at a time.
        let (stop, l) = (stop.clone(), l.clone());
        threads.push(std::thread::spawn(move || {
            let agent = common::agent();
            for k in 0..10_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let docs: Vec<Value> = (0..20)
                    .map(|i| json!({"_id": format!("r{r}-bulkw-{k}-{i}"), "n": 5000 + i}))
                    .collect();
                let body = json!({ "docs": docs }).to_string();
                let Some((status, out)) = try_call(
                    &agent,
                    port,
                    "POST",
                    "/p/_bulk_docs",
                    &[JSON],
                    Some(body.as_bytes()),
                ) else {
                    break;
                };
                assert_eq!(status, 201, "{}", String::from_utf8_lossy(&out));
                let rows: Value = serde_json::from_slice(&out).unwrap();
                let mut l = l.lock().unwrap();
                for row in rows.as_array().unwrap() {
                    l.put_live(
                        "p",
                        row["id"].as_str().unwrap(),
                        row["rev"].as_str().unwrap(),
                    );
                }
            }
        }));
    }
    for u in 0..2 {
        if only.is_some() {
            break;
        }
        // Attachments being uploaded.
        let (stop, l) = (stop.clone(), l.clone());
        threads.push(std::thread::spawn(move || {
            let agent = common::agent();
            for k in 0..10_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let bytes = noise((r * 100_000 + u * 50_000 + k) as u64, 200_000 + k);
                let id = format!("r{r}-upload{u}-{k}");
                let path = format!("/p/{id}/u.bin");
                let ct = [("Content-Type", "application/octet-stream")];
                let Some((status, out)) = try_call(&agent, port, "PUT", &path, &ct, Some(&bytes))
                else {
                    break;
                };
                assert_eq!(status, 201, "{path}: {}", String::from_utf8_lossy(&out));
                let mut l = l.lock().unwrap();
                l.put_live("p", &id, &rev_of(&out));
                l.atts.insert(("p".into(), id, "u.bin".into()), md5(&bytes));
            }
        }));
    }
    if only.is_none() {
        // Compaction and index updates running.
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            let agent = common::agent();
            let find =
                json!({"selector": {"n": {"$gte": 0}}, "limit": 1, "use_index": "idx"}).to_string();
            for _ in 0..10_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let calls: [(&str, &str, Option<&[u8]>); 4] = [
                    ("POST", "/p/_compact", Some(b"")),
                    ("GET", "/p/_design/d/_view/by_n?limit=1", None),
                    ("POST", "/p/_find", Some(find.as_bytes())),
                    ("POST", "/p/_compact/d", Some(b"")),
                ];
                for (method, path, body) in calls {
                    if try_call(&agent, port, method, path, &[JSON], body).is_none() {
                        return;
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }));
    }
    std::thread::sleep(run_for);
    let cut = Instant::now();
    s.kill9();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a load thread panicked");
    }
    cut
}

/// `_all_docs` rows for `ids` of `db`, by id: the row's `value` (or its
/// `error`).
fn rows(s: &Server, db: &str, ids: &[&String]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for page in ids.chunks(500) {
        let v = must_json(
            s,
            "POST",
            &format!("/{db}/_all_docs"),
            &json!({"keys": page}),
            200,
        );
        for row in v["rows"].as_array().unwrap() {
            let key = row["key"].as_str().unwrap().to_string();
            let val = if row["error"].is_string() {
                json!({"error": row["error"]})
            } else {
                row["value"].clone()
            };
            out.insert(key, val);
        }
    }
    out
}

/// A kind of writer: its name, headers, query string and the status that
/// acknowledges its write.
type Writer = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
    u16,
);

/// Checks the ledger against the restarted server; returns how many
/// delayed/batched writes inside the window were lost, of how many.
fn check(s: &Server, l: &mut Ledger, cut: Instant) -> Losses {
    // Every durable acknowledgement not honoured, described.
    let mut lost: Vec<String> = Vec::new();
    let dbs: BTreeSet<&String> = l.live.keys().map(|(db, _)| db).collect();
    for db in dbs {
        let ids: Vec<&String> = l
            .live
            .keys()
            .chain(l.deleted.keys())
            .chain(l.purged.iter())
            .filter(|(d, _)| d == db)
            .map(|(_, id)| id)
            .collect();
        let got = rows(s, db, &ids);
        for ((d, id), rev) in l.live.iter().filter(|((d, _), _)| d == db) {
            let row = &got[id];
            if row["rev"] != json!(rev) || row["deleted"] == json!(true) {
                lost.push(format!("{d}/{id}: acknowledged revision {rev} lost: {row}"));
            }
        }
        for ((d, id), rev) in l.deleted.iter().filter(|((d, _), _)| d == db) {
            let row = &got[id];
            if (&row["rev"], &row["deleted"]) != (&json!(rev), &json!(true)) {
                lost.push(format!("{d}/{id}: acknowledged deletion {rev} lost: {row}"));
            }
        }
        for (d, id) in l.purged.iter().filter(|(d, _)| d == db) {
            if got[id]["error"] != json!("not_found") {
                lost.push(format!("{d}/{id}: purged, came back: {}", got[id]));
            }
        }
    }
    let agent = common::agent();
    for ((db, doc, name), digest) in &l.atts {
        let (status, bytes) = try_call(
            &agent,
            s.port,
            "GET",
            &format!("/{db}/{doc}/{name}"),
            &[],
            None,
        )
        .expect("attachment answer");
        if status != 200 || &md5(&bytes) != digest {
            lost.push(format!(
                "{db}/{doc}/{name}: attachment lost or its bytes differ ({status})"
            ));
        }
    }
    l.lost += lost.len();
    assert!(
        lost.is_empty(),
        "{} durable acknowledgements lost, first ones:\n{}",
        lost.len(),
        lost[..lost.len().min(20)].join("\n")
    );
    for (id, v) in &l.locals {
        let out = must(s, "GET", &format!("/p/_local/{id}"), &[], None, 200);
        let doc: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(&doc["v"], v, "_local/{id}");
    }
    if let Some(sec) = &l.security {
        let out = must(s, "GET", "/p/_security", &[], None, 200);
        assert_eq!(&serde_json::from_slice::<Value>(&out).unwrap(), sec);
    }
    let out = must(s, "GET", "/p/_index", &[], None, 200);
    let idx: Value = serde_json::from_slice(&out).unwrap();
    let have: BTreeSet<&str> = idx["indexes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["ddoc"].as_str())
        .collect();
    for want in &l.indexes {
        assert!(
            have.contains(want.as_str()),
            "Mango index {want} lost: {idx}"
        );
    }
    // Timed writes: those older than the window must be there.
    // Writes that survived an earlier cut must still be there; of this
    // round's, those older than the window must be.
    let timed_ids: Vec<&String> = l
        .timed
        .iter()
        .map(|(_, id, _, _)| id)
        .chain(l.survived.iter().map(|(_, id)| id))
        .collect();
    let got = rows(s, "p", &timed_ids);
    for (_, id) in &l.survived {
        assert!(
            got[id]["rev"].is_string(),
            "{id} survived a cut, then was lost"
        );
    }
    let mut losses = Losses::new();
    for (db, id, at, kind) in std::mem::take(&mut l.timed) {
        let present = got[&id]["rev"].is_string();
        if at + WINDOW <= cut {
            assert!(
                present,
                "{kind} write {id} acknowledged {:?} before the cut was lost",
                cut - at
            );
        } else {
            let e = losses.entry(kind).or_default();
            e.0 += usize::from(!present);
            e.1 += 1;
        }
        if present {
            l.survived.insert((db, id));
        }
    }
    indexes_agree(s);
    losses
}

/// By kind of write (delayed, batch): how many acknowledged inside the
/// window before the cut were lost, of how many.
type Losses = BTreeMap<&'static str, (usize, usize)>;

/// The view and the Mango index answer exactly the documents with a
/// numeric `n`.
fn indexes_agree(s: &Server) {
    let out = must(s, "GET", "/p/_all_docs?include_docs=true", &[], None, 200);
    let all: Value = serde_json::from_slice(&out).unwrap();
    let docs: BTreeSet<String> = all["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["doc"]["n"].is_number())
        .map(|row| row["id"].as_str().unwrap().to_string())
        .collect();
    let out = must(s, "GET", "/p/_design/d/_view/by_n", &[], None, 200);
    let view: Value = serde_json::from_slice(&out).unwrap();
    let in_view: BTreeSet<String> = common::strings_of(&view, "rows", "id")
        .into_iter()
        .collect();
    assert_eq!(
        in_view.len(),
        view["rows"].as_array().unwrap().len(),
        "a document twice in the view"
    );
    assert_eq!(in_view, docs, "view rows differ from the documents");
    let out = must(s, "GET", "/p/_design/d/_view/count", &[], None, 200);
    let count: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(count["rows"][0]["value"], json!(docs.len()), "{count}");
    // One more than the documents, so an extra row in the index shows (a
    // fixed limit cut the answer short once batch writers passed it).
    let find = json!({"selector": {"n": {"$gte": 0}}, "fields": ["_id"],
                      "limit": docs.len() + 1, "use_index": "idx"});
    let found = must_json(s, "POST", "/p/_find", &find, 200);
    let in_index: BTreeSet<String> = common::strings_of(&found, "docs", "_id")
        .into_iter()
        .collect();
    assert_eq!(in_index, docs, "Mango answers differ from the documents");
}

#[test]
fn every_durable_write_survives_a_power_cut() {
    // LazyFS keeps every byte written in its cache (1 GiB by default);
    // long runs need more (`SETTEE_POWERLOSS_CACHE_MB`).
    let cache_mb = std::env::var("SETTEE_POWERLOSS_CACHE_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let lazy = Lazy::mount_with_cache(cache_mb);
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("stderr.log");
    let data = lazy.dir.join("data");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut s = start(&data, &log);
    setup(&s, &mut ledger.lock().unwrap());
    let mut total = Losses::new();
    let rounds: usize = std::env::var("SETTEE_POWERLOSS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mut restarts = Vec::new();
    for round in 0..rounds {
        serial_paths(&s, round, &mut ledger.lock().unwrap());
        let run_for = Duration::from_millis(1500 + 500 * (round % 5) as u64);
        let cut = load_and_kill(s, round, run_for, &ledger, None);
        lazy.clear_cache();
        let t = Instant::now();
        s = start(&data, &log);
        restarts.push(t.elapsed());
        let losses = check(&s, &mut ledger.lock().unwrap(), cut);
        eprintln!(
            "round {round}: restart {:?}; durable acknowledgements so far {}; \
             acknowledged in the last {WINDOW:?} before the cut, lost of all: {losses:?}",
            restarts[round],
            ledger.lock().unwrap().acked
        );
        for (kind, (l, n)) in losses {
            let e = total.entry(kind).or_default();
            e.0 += l;
            e.1 += n;
        }
    }
    restarts.sort();
    // Nearest rank.
    let pct = |p: usize| restarts[(restarts.len() * p).div_ceil(100).max(1) - 1];
    let l = ledger.lock().unwrap();
    eprintln!(
        "power cuts: {rounds}; 16 writers; durable acknowledgements: {}, lost: {}; restart after the cut: \
         p50 {:?}, p99 {:?}, max {:?}; now stored: {} documents, {} deletions, {} purges, {} attachments; \
         delayed/batched that survived: {}; inside the window, lost of all: {total:?}",
        l.acked,
        l.lost,
        pct(50),
        pct(99),
        restarts[restarts.len() - 1],
        l.live.len(),
        l.deleted.len(),
        l.purged.len(),
        l.atts.len(),
        l.survived.len()
    );
    drop(s);
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!log.contains("panicked"), "the server panicked:\n{log}");
}

/// Delayed commits and `batch=ok` alone (no full-commit write to fsync
/// them sooner): each is held to its documented window, and the loss
/// inside it is printed (docs/durability.md quotes it).
#[test]
fn delayed_and_batched_writes_hold_their_window() {
    let lazy = Lazy::mount();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("stderr.log");
    let data = lazy.dir.join("data");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut s = start(&data, &log);
    setup(&s, &mut ledger.lock().unwrap());
    let mut total = Losses::new();
    for (round, kind) in ["delayed", "batch", "delayed", "batch"]
        .into_iter()
        .enumerate()
    {
        let run_for = Duration::from_millis(3000 + 400 * round as u64);
        let cut = load_and_kill(s, 10 + round, run_for, &ledger, Some(kind));
        lazy.clear_cache();
        s = start(&data, &log);
        let losses = check(&s, &mut ledger.lock().unwrap(), cut);
        eprintln!("{kind} alone: acknowledged in the last {WINDOW:?} before the cut, lost of all: {losses:?}");
        for (kind, (l, n)) in losses {
            let e = total.entry(kind).or_default();
            e.0 += l;
            e.1 += n;
        }
    }
    eprintln!("inside the window, lost of all: {total:?}");
    drop(s);
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!log.contains("panicked"), "the server panicked:\n{log}");
}

/// What the writers of [`a_failed_fsync_poisons_the_server`] saw.
#[derive(Default)]
struct Outcome {
    /// When the first error answer arrived (the server is poisoned by then).
    first_error: Option<Instant>,
    /// Every error answer: (status, body).
    errors: Vec<(u16, Vec<u8>)>,
    /// Writes answered with an error: (db, id); none may be stored.
    refused: Vec<(String, String)>,
    /// Writes acknowledged although sent after an error had been answered.
    acked_after: Vec<String>,
    /// Requests that got no answer at all.
    unanswered: usize,
}

/// One writer of the fsync-failure test: `write(k)` sends its `k`th write
/// and returns the answer plus the ids it wrote; `ack` records a success.
/// Stops 20 requests after the first error was seen (by any writer), or
/// after 60 s.
fn write_until_refused(
    out: &Mutex<Outcome>,
    mut write: impl FnMut(usize) -> (Option<(u16, Vec<u8>)>, Vec<String>),
    mut ack: impl FnMut(&[String], u16, &[u8], Instant),
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut after = 0;
    for k in 0..100_000 {
        if after >= 20 || Instant::now() > deadline {
            break;
        }
        let sent_after_error = out.lock().unwrap().first_error.is_some();
        let (answer, ids) = write(k);
        let at = Instant::now();
        if sent_after_error {
            after += 1;
        }
        let mut o = out.lock().unwrap();
        match answer {
            None => o.unanswered += 1,
            Some((status, body)) if status < 300 => {
                if sent_after_error {
                    o.acked_after.push(format!("{ids:?}: {status}"));
                } else {
                    drop(o);
                    ack(&ids, status, &body, at);
                }
            }
            Some((status, body)) => {
                o.first_error.get_or_insert(at);
                o.errors.push((status, body));
                o.refused
                    .extend(ids.into_iter().map(|id| ("p".to_string(), id)));
            }
        }
    }
}

/// A failed fsync under the real binary (issue 44). LazyFS 0.3.0 has no
/// "fail this fsync" fault, but it can kill itself when an fsync begins
/// (`lazyfs::crash::timing=before::op=fsync`): that fsync of the RocksDB
/// write-ahead log fails in the server (the kernel answers it with an
/// error), the bytes it was to make durable vanish with LazyFS's cache,
/// and every later operation on the mount fails. With writers of every
/// durability, `_bulk_docs` and attachment uploads running, the server
/// must then answer every request that needs the store with a CouchDB-style
/// 500 (`storage_error` for the write whose fsync failed, `storage_failed`
/// for everything after: the engine is poisoned, reads included), and
/// acknowledge nothing sent after the first error. After a remount on the
/// same backing directory (a power cut: the unsynced bytes are gone) and a
/// restart, everything acknowledged as durable is there, delayed and
/// batched writes older than their window too, no write answered with an
/// error is stored, and the indexes agree with the documents.
#[test]
fn a_failed_fsync_poisons_the_server() {
    let mut lazy = Lazy::mount();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("stderr.log");
    let data = lazy.dir.join("data");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let s = start(&data, &log);
    setup(&s, &mut ledger.lock().unwrap());
    serial_paths(&s, 0, &mut ledger.lock().unwrap());
    // A document written (durably) before the failure.
    let known = "/p/r0-put-1";

    let out = Arc::new(Mutex::new(Outcome::default()));
    let port = s.port;
    let mut threads = Vec::new();
    for ((kind, headers, query, want), w) in
        KINDS.into_iter().flat_map(|k| (0..2).map(move |w| (k, w)))
    {
        let (out, l) = (out.clone(), ledger.clone());
        threads.push(std::thread::spawn(move || {
            let agent = common::agent();
            write_until_refused(
                &out,
                |k| {
                    let id = format!("f-{kind}{w}-{k}");
                    let body = json!({"n": 1000 + k, "kind": kind}).to_string();
                    let path = format!("/p/{id}{query}");
                    let a = try_call(&agent, port, "PUT", &path, headers, Some(body.as_bytes()));
                    (a, vec![id])
                },
                |ids, status, body, at| {
                    let id = &ids[0];
                    assert_eq!(status, want, "{id}: {}", String::from_utf8_lossy(body));
                    let mut l = l.lock().unwrap();
                    match kind {
                        "full" | "fullhdr" => l.put_live("p", id, &rev_of(body)),
                        _ => l.timed.push(("p".into(), id.clone(), at, kind)),
                    }
                },
            );
        }));
    }
    {
        let (out, l) = (out.clone(), ledger.clone());
        threads.push(std::thread::spawn(move || {
            let agent = common::agent();
            write_until_refused(
                &out,
                |k| {
                    let ids: Vec<String> = (0..20).map(|i| format!("f-bulk-{k}-{i}")).collect();
                    let docs: Vec<Value> =
                        ids.iter().map(|id| json!({"_id": id, "n": 7})).collect();
                    let body = json!({ "docs": docs }).to_string();
                    let a = try_call(
                        &agent,
                        port,
                        "POST",
                        "/p/_bulk_docs",
                        &[JSON],
                        Some(body.as_bytes()),
                    );
                    (a, ids)
                },
                |_, status, body, _| {
                    assert_eq!(status, 201, "{}", String::from_utf8_lossy(body));
                    let rows: Value = serde_json::from_slice(body).unwrap();
                    let mut l = l.lock().unwrap();
                    for row in rows.as_array().unwrap() {
                        assert_eq!(row["ok"], json!(true), "{row}");
                        l.put_live(
                            "p",
                            row["id"].as_str().unwrap(),
                            row["rev"].as_str().unwrap(),
                        );
                    }
                },
            );
        }));
    }
    {
        let (out, l) = (out.clone(), ledger.clone());
        threads.push(std::thread::spawn(move || {
            let agent = common::agent();
            let bytes = |k: usize| noise(900_000 + k as u64, 300_000 + k);
            write_until_refused(
                &out,
                |k| {
                    let id = format!("f-upload-{k}");
                    let ct = [("Content-Type", "application/octet-stream")];
                    let path = format!("/p/{id}/u.bin");
                    let a = try_call(&agent, port, "PUT", &path, &ct, Some(&bytes(k)));
                    (a, vec![id])
                },
                |ids, status, body, _| {
                    assert_eq!(status, 201, "{}", String::from_utf8_lossy(body));
                    let k: usize = ids[0]["f-upload-".len()..].parse().unwrap();
                    let mut l = l.lock().unwrap();
                    l.put_live("p", &ids[0], &rev_of(body));
                    l.atts
                        .insert(("p".into(), ids[0].clone(), "u.bin".into()), md5(&bytes(k)));
                },
            );
        }));
    }
    std::thread::sleep(Duration::from_millis(1500));
    // The next fsync of a write-ahead log file kills the file system.
    lazy.crash_on_fsync(r"store/[0-9]+\.log");
    for t in threads {
        t.join().expect("a writer panicked");
    }
    let o = std::mem::take(&mut *out.lock().unwrap());
    assert!(
        !lazy.alive(),
        "no fsync of the write-ahead log was attempted; errors: {:?}; LazyFS log: {}",
        o.errors
            .iter()
            .take(5)
            .map(|(st, b)| (st, String::from_utf8_lossy(b)))
            .collect::<Vec<_>>(),
        lazy.log_tail()
    );
    let cut = o
        .first_error
        .expect("no request failed after the fsync failed");
    assert!(
        o.acked_after.is_empty(),
        "acknowledged after an error had been answered: {:?}",
        o.acked_after
    );
    // Every error is CouchDB's shape: a 500 naming the storage failure.
    let mut kinds: BTreeMap<(u16, String), (usize, String)> = BTreeMap::new();
    for (status, body) in &o.errors {
        let v: Value = serde_json::from_slice(body)
            .unwrap_or_else(|_| panic!("{status}: not JSON: {}", String::from_utf8_lossy(body)));
        let (error, reason) = (v["error"].as_str(), v["reason"].as_str());
        assert_eq!(*status, 500, "{v}");
        assert!(
            matches!(error, Some("storage_error" | "storage_failed")),
            "{v}"
        );
        assert!(reason.is_some_and(|r| !r.is_empty()), "{v}");
        let e = kinds
            .entry((*status, error.unwrap().to_string()))
            .or_insert((0, reason.unwrap().to_string()));
        e.0 += 1;
    }
    // Reads are refused too, and so is `_ensure_full_commit`.
    let agent = common::agent();
    for (method, path) in [("GET", known), ("POST", "/p/_ensure_full_commit")] {
        let (status, body) =
            try_call(&agent, port, method, path, &[JSON], None).expect("an answer");
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (status, &v["error"]),
            (500, &json!("storage_failed")),
            "{method} {path}: {v}"
        );
    }
    // A load balancer's health check takes the node out.
    let (up_status, up_body) = try_call(&agent, port, "GET", "/_up", &[], None).expect("an answer");
    let up: Value = serde_json::from_slice(&up_body).unwrap();
    assert_eq!(
        (up_status, &up["status"]),
        (503, &json!("storage_failed")),
        "/_up on a poisoned server: {up}"
    );
    eprintln!(
        "fsync failure: {} errors answered, by kind (count, first reason): {kinds:?}; {} unanswered; \
         no acknowledgement after the first error; /_up then: {up_status} {up}",
        o.errors.len(),
        o.unanswered,
    );

    s.kill9();
    lazy.remount();
    let t = Instant::now();
    let s = start(&data, &log);
    let restart = t.elapsed();
    let losses = check(&s, &mut ledger.lock().unwrap(), cut);
    let ids: Vec<&String> = o.refused.iter().map(|(_, id)| id).collect();
    let got = rows(&s, "p", &ids);
    for id in ids {
        assert_eq!(
            got[id]["error"],
            json!("not_found"),
            "{id} was answered with an error but is stored: {}",
            got[id]
        );
    }
    let l = ledger.lock().unwrap();
    eprintln!(
        "after the remount: restart {restart:?}; {} durable acknowledgements, lost {}; {} refused writes, \
         none stored; delayed/batched in the last {WINDOW:?}, lost of all: {losses:?}",
        l.acked,
        l.lost,
        o.refused.len()
    );
    drop(s);
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!log.contains("panicked"), "the server panicked:\n{log}");
}
