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

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Server, ADMIN};
use md5::{Digest, Md5};
use serde_json::{json, Value};

/// How long after its acknowledgement a delayed or batched write must be
/// durable: the flush interval (`delayed_flush_ms`, `batch_flush_ms`:
/// 1 s) plus 0.5 s for the flush's own write and fsync on a loaded
/// 2-core machine.
const WINDOW: Duration = Duration::from_millis(1500);

/// A LazyFS mount, unmounted (and its process stopped) on drop.
struct Lazy {
    dir: PathBuf,
    fifo: PathBuf,
    log: PathBuf,
    pid: String,
    _tmp: tempfile::TempDir,
}

impl Lazy {
    fn mount() -> Lazy {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/lazyfs/mount");
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("m");
        // One mount at a time: on a fresh machine the first builds LazyFS
        // in a shared directory, and two builds there at once break each
        // other (seen on a fresh machine: "stdlib.h: No such file").
        static MOUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let guard = MOUNTING.lock().unwrap_or_else(|e| e.into_inner());
        let out = Command::new(&script)
            .arg(&dir)
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
        drop(guard);
        assert!(
            out.status.success(),
            "LazyFS did not mount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let parts: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(parts.len(), 3, "mount printed {line:?}");
        Lazy {
            dir: PathBuf::from(parts[0]),
            fifo: PathBuf::from(parts[1]),
            log: PathBuf::from(format!("{}.log", parts[0])),
            pid: parts[2].to_string(),
            _tmp: tmp,
        }
    }

    fn cleared(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .matches("cache is cleared")
            .count()
    }

    /// The power cut: every byte not yet fsynced is gone.
    fn clear_cache(&self) {
        let before = self.cleared();
        std::fs::write(&self.fifo, "lazyfs::clear-cache\n").expect("write the fault fifo");
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.cleared() == before {
            assert!(Instant::now() < deadline, "LazyFS did not clear its cache");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Lazy {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.dir)
            .status();
        let _ = Command::new("kill").arg(&self.pid).status();
    }
}

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
}

impl Ledger {
    fn put_live(&mut self, db: &str, id: &str, rev: &str) {
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
    let sec = json!({"admins": {"names": [], "roles": []},
                     "members": {"names": [format!("user{r}")], "roles": ["_admin"]}});
    must_json(s, "PUT", "/p/_security", &sec, 200);
    l.security = Some(sec);
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
    // _purge.
    let mut purge = serde_json::Map::new();
    for i in 0..3 {
        let id = format!("r{r}-pur-{i}");
        let v = must_json(s, "PUT", &format!("/p/{id}"), &json!({"n": 400 + i}), 201);
        purge.insert(id.clone(), json!([v["rev"]]));
        l.purged.insert(("p".into(), id));
    }
    must_json(s, "POST", "/p/_purge", &Value::Object(purge), 201);
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
    let kinds: [Writer; 4] = [
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
    // Three writers of each kind.
    for ((kind, headers, query, want), w) in
        kinds.into_iter().flat_map(|k| (0..3).map(move |w| (k, w)))
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
            assert_eq!(
                row["rev"],
                json!(rev),
                "{d}/{id}: acknowledged revision lost: {row}"
            );
            assert_ne!(row["deleted"], json!(true), "{d}/{id}: {row}");
        }
        for ((d, id), rev) in l.deleted.iter().filter(|((d, _), _)| d == db) {
            let row = &got[id];
            assert_eq!(
                (&row["rev"], &row["deleted"]),
                (&json!(rev), &json!(true)),
                "{d}/{id}: acknowledged deletion lost: {row}"
            );
        }
        for (d, id) in l.purged.iter().filter(|(d, _)| d == db) {
            assert_eq!(got[id]["error"], json!("not_found"), "{d}/{id} came back");
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
        assert_eq!(status, 200, "{db}/{doc}/{name}");
        assert_eq!(&md5(&bytes), digest, "{db}/{doc}/{name}: bytes differ");
    }
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
    let find = json!({"selector": {"n": {"$gte": 0}}, "fields": ["_id"], "limit": 1_000_000,
                      "use_index": "idx"});
    let found = must_json(s, "POST", "/p/_find", &find, 200);
    let in_index: BTreeSet<String> = common::strings_of(&found, "docs", "_id")
        .into_iter()
        .collect();
    assert_eq!(in_index, docs, "Mango answers differ from the documents");
}

#[test]
fn every_durable_write_survives_a_power_cut() {
    let lazy = Lazy::mount();
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
        eprintln!("round {round}: acknowledged in the last {WINDOW:?} before the cut, lost of all: {losses:?}");
        for (kind, (l, n)) in losses {
            let e = total.entry(kind).or_default();
            e.0 += l;
            e.1 += n;
        }
    }
    restarts.sort();
    eprintln!(
        "restart after a cut: median {:?}, max {:?}",
        restarts[restarts.len() / 2],
        restarts[restarts.len() - 1]
    );
    let l = ledger.lock().unwrap();
    eprintln!(
        "power cuts: {rounds}; 16 writers; durable writes checked: {} documents, {} deletions, {} purges, \
         {} attachments; delayed/batched that survived: {}; inside the window, lost of all: {total:?}",
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
