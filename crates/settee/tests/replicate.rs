//! `POST /_replicate`, `_scheduler/jobs` and `_active_tasks` through the
//! real server: one-shot replications that copy every leaf revision
//! (conflicts, deletions, design documents, attachments) and nothing else
//! (`_local` documents, `_security`); checkpoints on both ends that the
//! next run resumes from; filters; continuous jobs and their cancellation;
//! a second server as a remote endpoint; and the refusals. CouchDB's exact
//! answers are the conformance goldens (tests/conformance/scenarios/
//! replicate.scn).

mod common;

use std::time::{Duration, Instant};

use common::{Resp, Server, ADMIN};
use serde_json::{json, Value};

fn replicate(s: &Server, body: Value) -> Resp {
    s.admin("POST", "/_replicate", Some(&body.to_string()))
}

fn ok(r: Resp) -> Value {
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

/// A continuous job started: 202, as CouchDB.
fn accepted(r: Resp) -> Value {
    assert_eq!(r.status, 202, "{r:?}");
    r.json()
}

fn bulk(s: &Server, db: &str, body: Value) {
    let r = s.admin(
        "POST",
        &format!("/{db}/_bulk_docs"),
        Some(&body.to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
}

/// Every document with all its leaf revisions, as the server has them.
fn leaves(s: &Server, db: &str) -> Vec<(String, Value)> {
    let all = s
        .admin("GET", &format!("/{db}/_changes?style=all_docs"), None)
        .json();
    let mut out = Vec::new();
    for row in all["results"].as_array().unwrap() {
        let id = row["id"].as_str().unwrap().to_string();
        // (`_design/d` as it is: `_design%2Fd` is redirected.)
        let path = format!("/{db}/{id}?open_revs=all&revs=true");
        let r = s.raw("GET", &path, true, &[("Accept", "application/json")], None);
        assert_eq!(r.status, 200, "{path}: {r:?}");
        let mut docs: Vec<Value> = r.json().as_array().unwrap().clone();
        docs.sort_by_key(|d| d["ok"]["_rev"].as_str().unwrap_or_default().to_string());
        out.push((id, Value::Array(docs)));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "timed out waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Documents of `db` on `s` (0 while it does not exist).
fn doc_count(s: &Server, db: &str) -> u64 {
    let r = s.admin("GET", &format!("/{db}"), None);
    if r.status == 200 {
        r.json()["doc_count"].as_u64().unwrap_or(0)
    } else {
        0
    }
}

/// A `_bulk_docs` body of 500 new documents `d{from}`…
fn five_hundred(from: usize) -> Value {
    json!({"docs": (from..from + 500).map(|i| json!({"_id": format!("d{i:05}")})).collect::<Vec<_>>()})
}

fn seed(s: &Server, db: &str) {
    s.create_db(db);
    bulk(
        s,
        db,
        json!({"docs": [
            {"_id": "a", "v": 1},
            {"_id": "b", "v": 2, "_attachments": {"t.txt": {"content_type": "text/plain", "data": "aGVsbG8="}}},
            {"_id": "_design/d", "filters": {"odd": "function(doc, req) { return doc.v % 2 == Number(req.query.r); }"}},
            {"_id": "_local/l", "x": 1}
        ]}),
    );
    // A conflict and a deleted document.
    bulk(
        s,
        db,
        json!({"new_edits": false, "docs": [
            {"_id": "a", "_rev": "1-ffffffffffffffffffffffffffffffff", "v": 9},
            {"_id": "gone", "_rev": "2-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "_deleted": true,
             "_revisions": {"start": 2, "ids": ["bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]}}
        ]}),
    );
    let r = s.admin(
        "PUT",
        &format!("/{db}/_security"),
        Some(r#"{"members":{"names":["someone"]}}"#),
    );
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn one_shot_copies_every_leaf_and_resumes_from_its_checkpoint() {
    let s = Server::start();
    seed(&s, "src");
    let out = ok(replicate(
        &s,
        json!({"source": "src", "target": "dst", "create_target": true}),
    ));
    assert_eq!(out["ok"], json!(true));
    assert_eq!(out["replication_id_version"], json!(4));
    let h = &out["history"][0];
    assert_eq!(h["session_id"], out["session_id"]);
    assert_eq!(h["docs_written"], json!(5), "{out}");
    assert_eq!(h["doc_write_failures"], json!(0));
    assert_eq!(h["start_last_seq"], json!(0));
    assert_eq!(leaves(&s, "src"), leaves(&s, "dst"));
    // The attachment's bytes, the conflict, the deletion.
    let r = s.admin("GET", "/dst/b/t.txt", None);
    assert_eq!((r.status, r.body.as_str()), (200, "hello"));
    let a = s.admin("GET", "/dst/a?conflicts=true", None).json();
    assert_eq!(a["_conflicts"].as_array().map(Vec::len), Some(1), "{a}");
    assert_eq!(s.admin("GET", "/dst/gone", None).status, 404);
    // Not copied: `_local` documents and the security object.
    assert_eq!(s.admin("GET", "/dst/_local/l", None).status, 404);
    // (the target has its own default one: admin-only).
    let sec = s.admin("GET", "/dst/_security", None).json();
    assert_eq!(sec["members"], json!({"roles": ["_admin"]}), "{sec}");

    // Both ends hold the same checkpoint, named by the replication id.
    let ck = |db: &str| {
        let rows = s
            .admin("GET", &format!("/{db}/_local_docs?include_docs=true"), None)
            .json();
        rows["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] != json!("_local/l"))
            .map(|r| r["doc"].clone())
            .expect("a checkpoint")
    };
    let (src_ck, dst_ck) = (ck("src"), ck("dst"));
    assert_eq!(src_ck["session_id"], out["session_id"]);
    assert_eq!(src_ck["session_id"], dst_ck["session_id"]);
    assert_eq!(src_ck["_id"], dst_ck["_id"]);
    assert_eq!(src_ck["source_last_seq"], out["source_last_seq"]);

    // Nothing new: no_changes, the same session answered.
    let again = ok(replicate(&s, json!({"source": "src", "target": "dst"})));
    assert_eq!(again["no_changes"], json!(true), "{again}");
    assert_eq!(again["session_id"], out["session_id"]);

    // New changes: a new session continuing from the checkpoint.
    bulk(&s, "src", json!({"docs": [{"_id": "c"}, {"_id": "d"}]}));
    let next = ok(replicate(&s, json!({"source": "src", "target": "dst"})));
    let hist = next["history"].as_array().unwrap();
    assert_eq!(hist.len(), 2, "{next}");
    assert_eq!(hist[0]["start_last_seq"], out["source_last_seq"]);
    // Counts go on from the session resumed (5 + 2), as CouchDB's do.
    assert_eq!(hist[0]["docs_written"], json!(7));
    assert_eq!(hist[1]["session_id"], out["session_id"]);
    assert_eq!(leaves(&s, "src"), leaves(&s, "dst"));

    // A replication whose checkpoints disagree starts over (and writes
    // nothing new: the target has every revision).
    let id = dst_ck["_id"].as_str().unwrap().to_string();
    let r = s.admin(
        "DELETE",
        &format!("/dst/{id}?rev={}", ck("dst")["_rev"].as_str().unwrap()),
        None,
    );
    assert_eq!(r.status, 200, "{r:?}");
    let over = ok(replicate(&s, json!({"source": "src", "target": "dst"})));
    assert_eq!(over["history"][0]["start_last_seq"], json!(0), "{over}");
    assert_eq!(over["history"][0]["docs_written"], json!(0));
    assert_eq!(over["history"][0]["missing_found"], json!(0));
    s.stop();
}

#[test]
fn filters_choose_the_documents() {
    let s = Server::start();
    seed(&s, "src");
    let ids = |db: &str| -> Vec<String> {
        let all = s.admin("GET", &format!("/{db}/_all_docs"), None).json();
        all["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    ok(replicate(
        &s,
        json!({"source": "src", "target": "t1", "create_target": true, "doc_ids": ["b", "nope"]}),
    ));
    assert_eq!(ids("t1"), vec!["b"]);
    ok(replicate(
        &s,
        json!({"source": "src", "target": "t2", "create_target": true, "selector": {"v": {"$gt": 1}}}),
    ));
    assert_eq!(ids("t2"), vec!["a", "b"], "a's conflict has v 9");
    ok(replicate(
        &s,
        json!({"source": "src", "target": "t3", "create_target": true, "filter": "d/odd", "query_params": {"r": "0"}}),
    ));
    assert_eq!(ids("t3"), vec!["b"]);
    // Only winning revisions: a arrives without its conflict.
    ok(replicate(
        &s,
        json!({"source": "src", "target": "t4", "create_target": true, "winning_revs_only": true}),
    ));
    let a = s.admin("GET", "/t4/a?conflicts=true", None).json();
    assert!(a.get("_conflicts").is_none(), "{a}");
    // Filtered replications are other replications: other checkpoints.
    let t1 = s.admin("GET", "/src/_local_docs", None).json();
    assert_eq!(t1["rows"].as_array().unwrap().len(), 5, "{t1}");
    // A filter whose design document is missing.
    let r = replicate(
        &s,
        json!({"source": "src", "target": "t5", "create_target": true, "filter": "nope/f"}),
    );
    assert_eq!(
        (r.status, r.error()),
        (404, "not_found".to_string()),
        "{r:?}"
    );
    s.stop();
}

#[test]
fn continuous_jobs_follow_the_source_until_cancelled() {
    let s = Server::start();
    seed(&s, "src");
    let body = json!({"source": "src", "target": "live", "create_target": true, "continuous": true, "checkpoint_interval": 200});
    let started = accepted(replicate(&s, body.clone()));
    let id = started["_local_id"].as_str().unwrap().to_string();
    assert!(id.ends_with("+continuous+create_target"), "{id}");
    // Starting the same job again answers the running one.
    assert_eq!(
        accepted(replicate(&s, body.clone()))["_local_id"],
        json!(id)
    );
    bulk(&s, "src", json!({"docs": [{"_id": "later", "v": 5}]}));
    wait_until("the new document on the target", || {
        s.admin("GET", "/live/later", None).status == 200
    });
    let jobs = s.admin("GET", "/_scheduler/jobs", None).json();
    assert_eq!(jobs["total_rows"], json!(1), "{jobs}");
    assert_eq!(jobs["jobs"][0]["id"], json!(id));
    assert!(jobs["jobs"][0]["source"]
        .as_str()
        .unwrap()
        .ends_with("/src/"));
    assert!(!jobs.to_string().contains(ADMIN.1), "no password in {jobs}");
    let tasks = s.admin("GET", "/_active_tasks", None).json();
    let task = tasks
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == json!("replication"))
        .cloned()
        .expect("a replication task");
    assert_eq!(task["replication_id"], json!(id));
    assert_eq!(task["continuous"], json!(true));
    assert!(task["docs_written"].as_u64().unwrap() >= 6, "{task}");
    // Anonymous requests see no jobs.
    assert_eq!(s.anon("GET", "/_scheduler/jobs", None).status, 401);

    // A checkpoint is written while the job runs (every 200 ms here).
    wait_until("a checkpoint on the target", || {
        let base = id.split('+').next().unwrap();
        s.admin("GET", &format!("/live/_local/{base}"), None).status == 200
    });
    let mut cancel = body.clone();
    cancel["cancel"] = json!(true);
    assert_eq!(ok(replicate(&s, cancel.clone()))["_local_id"], json!(id));
    assert_eq!(
        s.admin("GET", "/_scheduler/jobs", None).json()["total_rows"],
        json!(0)
    );
    let r = replicate(&s, cancel);
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (404, json!("missing"))
    );
    let r = replicate(&s, json!({"replication_id": "0123abc", "cancel": true}));
    assert_eq!(r.status, 404, "{r:?}");
    // A stopped job copies nothing more.
    bulk(&s, "src", json!({"docs": [{"_id": "after-cancel"}]}));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(s.admin("GET", "/live/after-cancel", None).status, 404);
    // Cancel by id (as `_scheduler/jobs` names it).
    let started = accepted(replicate(&s, body));
    let by_id = ok(replicate(
        &s,
        json!({"replication_id": started["_local_id"], "cancel": true}),
    ));
    assert_eq!(by_id["_local_id"], started["_local_id"]);
    s.stop();
}

#[test]
fn between_two_servers_both_ways() {
    let a = Server::start();
    let b = Server::start();
    seed(&a, "here");
    let remote =
        |s: &Server, db: &str| format!("http://{}:{}@127.0.0.1:{}/{db}", ADMIN.0, ADMIN.1, s.port);
    // Push (remote target), then pull back into a third database.
    let out = ok(replicate(
        &a,
        json!({"source": "here", "target": remote(&b, "there"), "create_target": true}),
    ));
    assert_eq!(out["history"][0]["docs_written"], json!(5));
    assert_eq!(leaves(&a, "here"), leaves(&b, "there"));
    ok(replicate(
        &b,
        json!({"source": "there", "target": {"url": format!("http://127.0.0.1:{}/back", a.port), "auth": {"basic": {"username": ADMIN.0, "password": ADMIN.1}}}, "create_target": true}),
    ));
    assert_eq!(leaves(&a, "here"), leaves(&a, "back"));
    // Wrong credentials on the remote end.
    let r = replicate(
        &a,
        json!({"source": "here", "target": format!("http://admin:wrong@127.0.0.1:{}/there", b.port)}),
    );
    assert_eq!(
        (r.status, r.error()),
        (401, "unauthorized".to_string()),
        "{r:?}"
    );
    // A server that is not there.
    let r = replicate(
        &a,
        json!({"source": "here", "target": "http://127.0.0.1:9/x", "retries_per_request": 0}),
    );
    assert_eq!(r.status, 500, "{r:?}");
    a.stop();
    b.stop();
}

#[test]
fn refusals() {
    let s = Server::start();
    s.create_db("src");
    let bad = |body: &str| {
        let r = s.admin("POST", "/_replicate", Some(body));
        assert_eq!(r.status, 400, "{body}: {r:?}");
        r.json()["reason"].as_str().unwrap_or_default().to_string()
    };
    assert_eq!(bad("[]"), "Request body must be a JSON object");
    assert_eq!(bad("{"), "invalid UTF-8 JSON");
    assert!(bad(r#"{"source":"src","target":"t","continuous":"yes"}"#).contains("boolean"));
    assert!(bad(r#"{"source":"src","target":"t","doc_ids":"a"}"#).contains("array"));
    assert!(
        bad(r#"{"source":"src","target":"t","doc_ids":["a"],"selector":{}}"#)
            .contains("mutually exclusive")
    );
    assert!(bad(r#"{"source":"src","target":"t","filter":"x"}"#).contains("ddocname/filtername"));
    assert!(bad(r#"{"source":"ftp://h/x","target":"t"}"#).contains("http"));
    assert!(bad(r#"{"target":"t"}"#).contains("source"));
    // Missing databases.
    let r = replicate(&s, json!({"source": "src", "target": "nope"}));
    assert_eq!(
        (r.status, r.error()),
        (500, "db_not_found".to_string()), // as CouchDB answers it
        "{r:?}"
    );
    let r = replicate(&s, json!({"source": "nope", "target": "src"}));
    assert_eq!(r.status, 500, "{r:?}");
    assert!(
        r.json()["reason"].as_str().unwrap().ends_with("/nope/"),
        "{r:?}"
    );
    // Only POST.
    assert_eq!(s.admin("GET", "/_replicate", None).status, 405);
    // A replication runs with its requester's rights: an anonymous
    // requester cannot read an admin-only database through it.
    let r = s.anon(
        "POST",
        "/_replicate",
        Some(r#"{"source":"src","target":"t9","create_target":true}"#),
    );
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(s.admin("GET", "/t9", None).status, 404);
    s.stop();
}

fn doc(s: &Server, path: &str) -> Value {
    let r = s.admin("GET", path, None);
    assert_eq!(r.status, 200, "{path}: {r:?}");
    r.json()
}

#[test]
fn replicator_database_documents_run_as_jobs() {
    // `b` holds the data; `a` runs the replications from its `_replicator`
    // (and is restarted: `b`'s URLs stay the same).
    let b = Server::start();
    seed(&b, "src");
    let url = |db: &str| format!("http://{}:{}@127.0.0.1:{}/{db}", ADMIN.0, ADMIN.1, b.port);
    let dir = tempfile::tempdir().unwrap();
    let a = Server::start_in(dir.path(), &[]);
    let dbs = a.admin("GET", "/_all_dbs", None).json();
    assert!(
        dbs.as_array().unwrap().contains(&json!("_replicator")),
        "{dbs}"
    );
    assert_eq!(a.anon("GET", "/_replicator", None).status, 401);

    // Local names are refused in documents, as CouchDB 3 refuses them.
    let r = a.admin(
        "PUT",
        "/_replicator/local",
        Some(r#"{"source":"src","target":"x"}"#),
    );
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.json()["reason"], json!("local_endpoints_not_supported"));

    let r = a.admin(
        "PUT",
        "/_replicator/bad",
        Some(r#"{"source":"http://h/a","target":"http://h/b","continuous":"x"}"#),
    );
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(
        r.json()["reason"],
        json!("{throw,{bad_request,<<\"parameter `continuous` must be a boolean\">>}}")
    );
    // In `_bulk_docs`, one invalid document fails the request (as CouchDB).
    let r = a.admin(
        "POST",
        "/_replicator/_bulk_docs",
        Some(r#"{"docs":[{"_id":"ok","source":"http://h/a","target":"http://h/b"},{"_id":"bad","source":"a","target":"b"}]}"#),
    );
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(a.admin("GET", "/_replicator/ok", None).status, 404);

    // A one-shot document: run, then its result written back.
    let put = |id: &str, body: Value| {
        let r = a.admin(
            "PUT",
            &format!("/_replicator/{id}"),
            Some(&body.to_string()),
        );
        assert_eq!(r.status, 201, "{r:?}");
    };
    put(
        "once",
        json!({"source": url("src"), "target": url("once"), "create_target": true}),
    );
    wait_until("the one-shot document completed", || {
        doc(&a, "/_replicator/once")["_replication_state"] == json!("completed")
    });
    let once = doc(&a, "/_replicator/once");
    assert_eq!(once["owner"], json!("admin"));
    assert_eq!(
        once["_replication_stats"]["docs_written"],
        json!(5),
        "{once}"
    );
    assert!(once["_replication_state_time"].is_string());
    assert_eq!(leaves(&b, "src"), leaves(&b, "once"));

    // A continuous document follows the source.
    put(
        "live",
        json!({"source": url("src"), "target": url("live"), "create_target": true, "continuous": true}),
    );
    bulk(&b, "src", json!({"docs": [{"_id": "later"}]}));
    wait_until("the continuous document's copy", || {
        b.admin("GET", "/live/later", None).status == 200
    });
    let st = doc(&a, "/_scheduler/docs/_replicator/live");
    assert_eq!(st["state"], json!("running"), "{st}");
    assert!(!st.to_string().contains(ADMIN.1), "no password in {st}");
    let jobs = doc(&a, "/_scheduler/jobs");
    assert_eq!(jobs["jobs"][0]["doc_id"], json!("live"), "{jobs}");
    assert_eq!(jobs["jobs"][0]["database"], json!("_replicator"));

    // A document whose source is missing keeps retrying.
    put("broken", json!({"source": url("nope"), "target": url("x")}));
    // (The manager follows `_replicator`'s changes: until it has seen the
    // document, the scheduler does not know it — 404.)
    wait_until("the broken document crashing", || {
        let r = a.admin("GET", "/_scheduler/docs/_replicator/broken", None);
        let st = r.json();
        r.status == 200 && st["state"] == json!("crashing") && st["error_count"].as_u64() >= Some(1)
    });
    let all = doc(&a, "/_scheduler/docs");
    assert_eq!(all["total_rows"], json!(3), "{all}");
    assert_eq!(
        a.admin("GET", "/_scheduler/docs/_replicator/nope", None)
            .status,
        404
    );

    // After a restart: the continuous job runs again, the completed one
    // does not.
    let once_rev = once["_rev"].clone();
    a.stop();
    let a = Server::start_in(dir.path(), &[]);
    bulk(&b, "src", json!({"docs": [{"_id": "after-restart"}]}));
    wait_until("the continuous document's copy after a restart", || {
        b.admin("GET", "/live/after-restart", None).status == 200
    });
    assert_eq!(doc(&a, "/_replicator/once")["_rev"], once_rev);
    assert_eq!(
        doc(&a, "/_scheduler/docs/_replicator/once")["state"],
        json!("completed")
    );

    // Deleting a document stops its job.
    let rev = doc(&a, "/_replicator/live")["_rev"]
        .as_str()
        .unwrap()
        .to_string();
    let r = a.admin("DELETE", &format!("/_replicator/live?rev={rev}"), None);
    assert_eq!(r.status, 200, "{r:?}");
    wait_until("the job stopped", || {
        doc(&a, "/_scheduler/jobs")["total_rows"] == json!(0)
    });
    bulk(&b, "src", json!({"docs": [{"_id": "after-delete"}]}));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(b.admin("GET", "/live/after-delete", None).status, 404);
    a.stop();
    b.stop();
}

/// A TCP proxy in front of a server, for fault tests.
struct Proxy {
    port: u16,
    /// Connections cut mid-response.
    cuts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Where it forwards to (a restarted server's new port may be set).
    upstream: std::sync::Arc<std::sync::atomic::AtomicU16>,
    /// While true, requests are swallowed: accepted, read, never answered
    /// (a stalling server).
    stall: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Request bytes swallowed while stalling.
    swallowed: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Response bytes passed back to clients.
    passed: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// A TCP proxy to `upstream` that cuts every `nth` connection after it has
/// passed `budget` bytes back to the client (a network dropping
/// connections mid-response).
fn proxy(upstream: u16, nth: usize, budget: usize) -> Proxy {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = Proxy {
        port: listener.local_addr().unwrap().port(),
        cuts: Arc::new(AtomicUsize::new(0)),
        upstream: Arc::new(std::sync::atomic::AtomicU16::new(upstream)),
        stall: Arc::new(AtomicBool::new(false)),
        swallowed: Arc::new(AtomicUsize::new(0)),
        passed: Arc::new(AtomicUsize::new(0)),
    };
    let (counted, to) = (proxy.cuts.clone(), proxy.upstream.clone());
    let (stall, swallowed) = (proxy.stall.clone(), proxy.swallowed.clone());
    let total = proxy.passed.clone();
    std::thread::spawn(move || {
        for (i, client) in listener.incoming().enumerate() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(("127.0.0.1", to.load(Ordering::Relaxed))) else {
                continue;
            };
            let limit = if i % nth == nth - 1 {
                budget
            } else {
                usize::MAX
            };
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (stall, swallowed) = (stall.clone(), swallowed.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 16384];
                while let Ok(n) = c_in.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if stall.load(Ordering::Relaxed) {
                        swallowed.fetch_add(n, Ordering::Relaxed);
                        continue;
                    }
                    if s_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = s_out.shutdown(Shutdown::Write);
            });
            let (cuts, total) = (counted.clone(), total.clone());
            let (mut s_in, mut c_out) = (server, client);
            std::thread::spawn(move || {
                let mut buf = [0u8; 16384];
                let mut passed = 0usize;
                while let Ok(n) = s_in.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let n = n.min(limit - passed);
                    if c_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    passed += n;
                    total.fetch_add(n, Ordering::Relaxed);
                    if passed >= limit {
                        cuts.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
                let _ = c_out.shutdown(Shutdown::Both);
                let _ = s_in.shutdown(Shutdown::Both);
            });
        }
    });
    proxy
}

#[test]
fn survives_connections_cut_mid_transfer() {
    let a = Server::start();
    let b = Server::start();
    a.create_db("big");
    // Pads that do not compress (responses travel gzipped).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let docs: Vec<Value> = (0..3000)
        .map(|i| {
            let pad: String = (0..20)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    format!("{x:016x}")
                })
                .collect();
            json!({"_id": format!("d{i:05}"), "pad": pad})
        })
        .collect();
    for chunk in docs.chunks(1000) {
        bulk(&a, "big", json!({ "docs": chunk }));
    }
    // Every second connection to the source is cut after 20 kB of its
    // answer (`_bulk_get` pages are larger).
    let p = proxy(a.port, 2, 20_000);
    let (port, cuts) = (p.port, p.cuts);
    let source = format!("http://{}:{}@127.0.0.1:{port}/big", ADMIN.0, ADMIN.1);
    let target = format!("http://{}:{}@127.0.0.1:{}/copy", ADMIN.0, ADMIN.1, b.port);
    let out = ok(replicate(
        &a,
        json!({"source": source, "target": target, "create_target": true, "worker_batch_size": 200, "retries_per_request": 10}),
    ));
    assert_eq!(out["history"][0]["doc_write_failures"], json!(0), "{out}");
    assert_eq!(leaves(&a, "big"), leaves(&b, "copy"));
    assert!(
        cuts.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the proxy cut no connection: the test tested nothing"
    );
    // The checkpoint names the end: a second run has nothing to do.
    let again = ok(replicate(&a, json!({"source": source, "target": target})));
    assert_eq!(again["no_changes"], json!(true), "{again}");
    a.stop();
    b.stop();
}

#[test]
fn continuous_replication_outlives_a_target_restart() {
    let a = Server::start();
    let b_dir = tempfile::tempdir().unwrap();
    let b = Server::start_in(b_dir.path(), &[]);
    a.create_db("src");
    let docs = five_hundred;
    bulk(&a, "src", docs(0));
    // The target is reached through a proxy that follows it to its new port.
    let Proxy { port, upstream, .. } = proxy(b.port, usize::MAX, usize::MAX);
    let target = format!("http://{}:{}@127.0.0.1:{port}/dst", ADMIN.0, ADMIN.1);
    let body = json!({"source": "src", "target": target, "create_target": true, "continuous": true, "checkpoint_interval": 100});
    accepted(replicate(&a, body.clone()));
    let count = |s: &Server| doc_count(s, "dst");
    wait_until("the first 500 on the target", || count(&b) == 500);
    // The target goes away; the source keeps changing.
    b.stop();
    bulk(&a, "src", docs(500));
    std::thread::sleep(Duration::from_millis(300));
    let b = Server::start_in(b_dir.path(), &[]);
    upstream.store(b.port, std::sync::atomic::Ordering::Relaxed);
    wait_until("the job caught up after the restart", || count(&b) == 1000);
    assert_eq!(leaves(&a, "src"), leaves(&b, "dst"));
    let jobs = a.admin("GET", "/_scheduler/jobs", None).json();
    assert_eq!(jobs["total_rows"], json!(1), "{jobs}");
    let mut cancel = body;
    cancel["cancel"] = json!(true);
    ok(replicate(&a, cancel));
    a.stop();
    b.stop();
}

/// A target that stalls (takes requests, answers none) makes the job's
/// requests time out (`connection_timeout`); the job crashes, backs off,
/// and resumes from its checkpoint once the target answers again —
/// nothing lost.
#[test]
fn continuous_replication_outlives_a_stalling_target() {
    let a = Server::start();
    let b = Server::start();
    a.create_db("src");
    let docs = five_hundred;
    bulk(&a, "src", docs(0));
    let p = proxy(b.port, usize::MAX, usize::MAX);
    let target = format!("http://{}:{}@127.0.0.1:{}/dst", ADMIN.0, ADMIN.1, p.port);
    let body = json!({"source": "src", "target": target, "create_target": true, "continuous": true,
        "checkpoint_interval": 100, "connection_timeout": 1000, "retries_per_request": 1});
    accepted(replicate(&a, body.clone()));
    let count = || doc_count(&b, "dst");
    wait_until("the first 500 on the target", || count() == 500);
    p.stall.store(true, std::sync::atomic::Ordering::Relaxed);
    bulk(&a, "src", docs(500));
    wait_until("the job crashed on the stalled target", || {
        let jobs = a.admin("GET", "/_scheduler/jobs", None).json();
        jobs["jobs"][0]["history"]
            .as_array()
            .is_some_and(|h| h.iter().any(|e| e["type"] == "crashed"))
    });
    assert!(p.swallowed.load(std::sync::atomic::Ordering::Relaxed) > 0);
    assert!(
        count() < 1000,
        "the stall let everything through: the test tested nothing"
    );
    p.stall.store(false, std::sync::atomic::Ordering::Relaxed);
    wait_until("the job caught up after the stall", || count() == 1000);
    assert_eq!(leaves(&a, "src"), leaves(&b, "dst"));
    let mut cancel = body;
    cancel["cancel"] = json!(true);
    ok(replicate(&a, cancel));
    a.stop();
    b.stop();
}

/// A revision whose attachments exceed what travels inline is copied by
/// itself, its attachment streamed (multipart) from source to target; an
/// attachment the target already has (an earlier revision) is not sent
/// again (`atts_since` from `_revs_diff`'s `possible_ancestors`).
#[test]
fn large_attachments_are_streamed_and_not_sent_twice() {
    let a = Server::start();
    let b = Server::start();
    a.create_db("src");
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let big: Vec<u8> = (0..3 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let r = a.raw(
        "PUT",
        "/src/doc/big.bin",
        true,
        &[("Content-Type", "application/octet-stream")],
        Some(&big),
    );
    assert_eq!(r.status, 201, "{r:?}");
    bulk(
        &a,
        "src",
        json!({"docs": [{"_id": "small", "_attachments": {"s.txt": {"content_type": "text/plain", "data": "aGVsbG8="}}}, {"_id": "plain"}]}),
    );
    let p = proxy(a.port, usize::MAX, usize::MAX);
    let source = format!("http://{}:{}@127.0.0.1:{}/src", ADMIN.0, ADMIN.1, p.port);
    let target = format!("http://{}:{}@127.0.0.1:{}/dst", ADMIN.0, ADMIN.1, b.port);
    let out = ok(replicate(
        &a,
        json!({"source": source, "target": target, "create_target": true}),
    ));
    assert_eq!(out["history"][0]["docs_written"], json!(3), "{out}");
    assert_eq!(leaves(&a, "src"), leaves(&b, "dst"));
    let att = |s: &Server, id: &str| {
        s.admin(
            "GET",
            &format!("/{}/{id}", if s.port == a.port { "src" } else { "dst" }),
            None,
        )
        .json()["_attachments"]
            .clone()
    };
    assert_eq!(att(&a, "doc"), att(&b, "doc"));
    assert_eq!(att(&b, "doc")["big.bin"]["length"], json!(3 << 20));
    assert_eq!(att(&a, "small"), att(&b, "small"));
    let first = p.passed.swap(0, std::sync::atomic::Ordering::Relaxed);
    assert!(first > 3 << 20, "{first} bytes from the source");
    // A new revision that keeps the attachment: only the document travels.
    let rev = a.admin("GET", "/src/doc", None).json()["_rev"].clone();
    let mut doc = a.admin("GET", "/src/doc", None).json();
    doc["note"] = json!("changed");
    doc["_rev"] = rev;
    let r = a.admin("PUT", "/src/doc", Some(&doc.to_string()));
    assert_eq!(r.status, 201, "{r:?}");
    let out = ok(replicate(&a, json!({"source": source, "target": target})));
    // Counts go on from the checkpoint's: 3 before, 1 now.
    assert_eq!(out["history"][0]["docs_written"], json!(4), "{out}");
    let second = p.passed.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        second < 1 << 20,
        "{second} bytes from the source for a changed field"
    );
    assert_eq!(leaves(&a, "src"), leaves(&b, "dst"));
    assert_eq!(
        b.admin("GET", "/dst/doc", None).json()["note"],
        json!("changed")
    );
    assert_eq!(att(&a, "doc"), att(&b, "doc"));
    // The attachment's bytes arrived intact (their digest, as each server
    // computed it from the bytes it stored).
    let r = b.raw("HEAD", "/dst/doc/big.bin", true, &[], None);
    assert_eq!(r.status, 200);
    let digest = r
        .header("Content-MD5")
        .or(r.header("ETag"))
        .map(str::to_string);
    assert!(digest.is_some(), "{r:?}");
    let src = a.raw("HEAD", "/src/doc/big.bin", true, &[], None);
    assert_eq!(
        digest,
        src.header("Content-MD5")
            .or(src.header("ETag"))
            .map(str::to_string)
    );
    a.stop();
    b.stop();
}

/// Revision histories arrive whole and the target stems them to its own
/// `_revs_limit`, as CouchDB's; the leaf is the same.
#[test]
fn histories_are_stemmed_by_the_targets_revs_limit() {
    let s = Server::start();
    s.create_db("src");
    let ids: Vec<String> = (0..40).map(|i| format!("{:032x}", 0xabc0 + i)).collect();
    let rev = format!("40-{}", ids[0]);
    bulk(
        &s,
        "src",
        json!({"new_edits": false, "docs": [{"_id": "long", "_rev": rev, "v": 1,
            "_revisions": {"start": 40, "ids": ids}}]}),
    );
    s.create_db("dst");
    let r = s.admin("PUT", "/dst/_revs_limit", Some("5"));
    assert_eq!(r.status, 200, "{r:?}");
    ok(replicate(&s, json!({"source": "src", "target": "dst"})));
    let d = s.admin("GET", "/dst/long?revs=true", None).json();
    assert_eq!(d["_rev"], json!(rev), "{d}");
    assert_eq!(
        d["_revisions"]["ids"].as_array().map(Vec::len),
        Some(5),
        "{d}"
    );
    let full = s.admin("GET", "/src/long?revs=true", None).json();
    assert_eq!(full["_revisions"]["ids"].as_array().map(Vec::len), Some(40));
    s.stop();
}

#[test]
fn replicator_documents_beyond_max_jobs_wait_their_turn() {
    let b = Server::start();
    b.create_db("src");
    bulk(&b, "src", json!({"docs": [{"_id": "x"}]}));
    let url = |db: &str| format!("http://{}:{}@127.0.0.1:{}/{db}", ADMIN.0, ADMIN.1, b.port);
    let a = Server::start();
    let r = a.admin(
        "PUT",
        "/_node/_local/_config/replicator/max_jobs",
        Some("\"1\""),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let r = a.admin(
        "PUT",
        "/_node/_local/_config/replicator/max_jobs",
        Some("\"many\""),
    );
    assert_eq!(r.status, 400, "{r:?}");
    for (id, t) in [("j1", "t1"), ("j2", "t2")] {
        let body = json!({"source": url("src"), "target": url(t), "create_target": true, "continuous": true});
        let r = a.admin(
            "PUT",
            &format!("/_replicator/{id}"),
            Some(&body.to_string()),
        );
        assert_eq!(r.status, 201, "{r:?}");
    }
    let states = || -> Vec<(String, String)> {
        let all = a.admin("GET", "/_scheduler/docs", None).json();
        all["docs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["doc_id"].as_str().unwrap().to_string(),
                    d["state"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    wait_until("one running, one pending", || {
        let mut s: Vec<String> = states().into_iter().map(|(_, st)| st).collect();
        s.sort();
        s == ["pending", "running"]
    });
    // `_scheduler/jobs` lists the waiting job too (history `added`), as
    // CouchDB.
    let jobs = a.admin("GET", "/_scheduler/jobs", None).json();
    assert_eq!(jobs["total_rows"], json!(2), "{jobs}");
    let running = states()
        .into_iter()
        .find(|(_, st)| st == "running")
        .unwrap()
        .0;
    let rev = a
        .admin("GET", &format!("/_replicator/{running}"), None)
        .json()["_rev"]
        .clone();
    let r = a.admin(
        "DELETE",
        &format!("/_replicator/{running}?rev={}", rev.as_str().unwrap()),
        None,
    );
    assert_eq!(r.status, 200, "{r:?}");
    wait_until("the pending document runs", || {
        states()
            .iter()
            .any(|(id, st)| *id != running && st == "running")
    });
    a.stop();
    b.stop();
}

/// With more continuous jobs than `max_jobs`, rotation (`interval`,
/// `max_churn`) stops the longest-running ones and starts the waiting
/// ones, so every job makes progress; a lowered `max_jobs` stops the
/// excess.
#[test]
fn rotation_lets_every_job_progress() {
    let b = Server::start();
    b.create_db("src");
    bulk(&b, "src", json!({"docs": [{"_id": "x"}]}));
    let url = |db: &str| format!("http://{}:{}@127.0.0.1:{}/{db}", ADMIN.0, ADMIN.1, b.port);
    let a = Server::start();
    for (key, v) in [("max_jobs", "1"), ("max_churn", "1"), ("interval", "300")] {
        let path = format!("/_node/_local/_config/replicator/{key}");
        let r = a.admin("PUT", &path, Some(&format!("\"{v}\"")));
        assert_eq!(r.status, 200, "{r:?}");
    }
    let targets = ["t1", "t2", "t3"];
    for t in targets {
        let body = json!({"source": url("src"), "target": url(t), "create_target": true, "continuous": true});
        let r = a.admin("PUT", &format!("/_replicator/{t}"), Some(&body.to_string()));
        assert_eq!(r.status, 201, "{r:?}");
    }
    // A `_replicate` job beyond max_jobs waits too (202 at once).
    let r = a.admin(
        "POST",
        "/_replicate",
        Some(&json!({"source": url("src"), "target": url("t4"), "create_target": true, "continuous": true}).to_string()),
    );
    assert_eq!(r.status, 202, "{r:?}");
    let has = |t: &str, id: &str| b.admin("GET", &format!("/{t}/{id}"), None).status == 200;
    wait_until("every job ran in turn", || {
        ["t1", "t2", "t3", "t4"].iter().all(|t| has(t, "x"))
    });
    // They keep taking turns: a later document reaches every target.
    bulk(&b, "src", json!({"docs": [{"_id": "y"}]}));
    wait_until("every job ran again", || {
        ["t1", "t2", "t3", "t4"].iter().all(|t| has(t, "y"))
    });
    let jobs = a.admin("GET", "/_scheduler/jobs", None).json();
    assert_eq!(jobs["total_rows"], json!(4), "{jobs}");
    let stopped = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| {
            j["history"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h["type"] == "stopped")
        })
        .count();
    assert!(stopped >= 2, "{jobs}");
    // Never more than max_jobs running at once.
    for _ in 0..20 {
        let tasks = a.admin("GET", "/_active_tasks", None).json();
        assert!(tasks.as_array().unwrap().len() <= 1, "{tasks}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A raised max_jobs starts the waiting jobs at once; lowered again,
    // the excess stops at the next rotation.
    let r = a.admin(
        "PUT",
        "/_node/_local/_config/replicator/max_jobs",
        Some("\"4\""),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let running = || -> usize {
        let docs = a.admin("GET", "/_scheduler/docs", None).json();
        docs["docs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["state"] == "running")
            .count()
    };
    wait_until("all three documents running", || running() == 3);
    let r = a.admin(
        "PUT",
        "/_node/_local/_config/replicator/max_jobs",
        Some("\"2\""),
    );
    assert_eq!(r.status, 200, "{r:?}");
    wait_until("at most two running", || {
        a.admin("GET", "/_active_tasks", None)
            .json()
            .as_array()
            .unwrap()
            .len()
            <= 2
    });
    a.stop();
    b.stop();
}

#[test]
fn since_seq_and_use_checkpoints() {
    let s = Server::start();
    s.create_db("src");
    bulk(
        &s,
        "src",
        json!({"docs": [{"_id": "early1"}, {"_id": "early2"}]}),
    );
    let seq = s.admin("GET", "/src", None).json()["update_seq"].clone();
    bulk(&s, "src", json!({"docs": [{"_id": "late"}]}));
    // since_seq: only the changes after it.
    let out = ok(replicate(
        &s,
        json!({"source": "src", "target": "t1", "create_target": true, "since_seq": seq}),
    ));
    assert_eq!(out["history"][0]["docs_written"], json!(1), "{out}");
    assert_eq!(s.admin("GET", "/t1/late", None).status, 200);
    assert_eq!(s.admin("GET", "/t1/early1", None).status, 404);
    // use_checkpoints: false writes no checkpoint on either end.
    let out = ok(replicate(
        &s,
        json!({"source": "src", "target": "t2", "create_target": true, "use_checkpoints": false}),
    ));
    assert_eq!(out["history"][0]["docs_written"], json!(3), "{out}");
    let locals = s.admin("GET", "/t2/_local_docs", None).json();
    assert_eq!(locals["rows"], json!([]), "{locals}");
    // create_target_params reach the target's creation.
    let r = replicate(
        &s,
        json!({"source": "src", "target": "t3", "create_target": true, "create_target_params": {"partitioned": true}}),
    );
    // The target is created partitioned; the source's ids have no
    // partition, so the target refuses them and the replication says so.
    assert_ne!(r.status, 200, "{r:?}");
    assert!(r.body.contains("illegal_docid"), "{r:?}");
    let t3 = s.admin("GET", "/t3", None).json();
    assert_eq!(t3["props"], json!({"partitioned": true}), "{t3}");
    assert_eq!(t3["doc_count"], json!(0), "{t3}");
    ok(replicate(
        &s,
        json!({"source": "src", "target": "t4", "create_target": true, "create_target_params": {"q": 1}}),
    ));
    assert_eq!(s.admin("GET", "/t4", None).status, 200);
    s.stop();
}

#[test]
fn other_replicator_databases_run_their_documents() {
    let s = Server::start();
    seed(&s, "src");
    let url = |db: &str| format!("http://{}:{}@127.0.0.1:{}/{db}", ADMIN.0, ADMIN.1, s.port);
    s.create_db("team%2F_replicator");
    let r = s.admin(
        "PUT",
        "/team%2F_replicator/local",
        Some(r#"{"source":"src","target":"x"}"#),
    );
    assert_eq!(r.status, 403, "{r:?}");
    let body = json!({"source": url("src"), "target": url("teamcopy"), "create_target": true});
    let r = s.admin("PUT", "/team%2F_replicator/once", Some(&body.to_string()));
    assert_eq!(r.status, 201, "{r:?}");
    wait_until("the team's document completed", || {
        s.admin("GET", "/team%2F_replicator/once", None).json()["_replication_state"]
            == json!("completed")
    });
    assert_eq!(leaves(&s, "src"), leaves(&s, "teamcopy"));
    for path in [
        "/_scheduler/docs/team%2F_replicator/once",
        "/_scheduler/docs/team/_replicator/once",
    ] {
        let d = doc(&s, path);
        assert_eq!(
            (d["database"].clone(), d["state"].clone()),
            (json!("team/_replicator"), json!("completed")),
            "{path}: {d}"
        );
    }
    let list = doc(&s, "/_scheduler/docs/team%2F_replicator");
    assert_eq!(list["total_rows"], json!(1), "{list}");
    assert_eq!(
        doc(&s, "/_scheduler/docs/_replicator")["total_rows"],
        json!(0)
    );
    assert_eq!(s.admin("GET", "/_scheduler/docs/nope", None).status, 404);
    // Deleting the database stops what its documents run.
    s.admin("DELETE", "/team%2F_replicator", None);
    wait_until("the team's documents forgotten", || {
        doc(&s, "/_scheduler/docs")["total_rows"] == json!(0)
    });
    s.stop();
}

/// A proxy to `upstream` that answers every `nth` connection's first
/// request itself with `status` (a server shedding load) and closes it;
/// the others are passed through. Returns its port and how many it refused.
fn refusing_proxy(
    upstream: u16,
    nth: usize,
    status: u16,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::sync::atomic::Ordering;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let refused = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = refused.clone();
    std::thread::spawn(move || {
        for (i, client) in listener.incoming().enumerate() {
            let Ok(mut client) = client else { continue };
            if i % nth == nth - 1 {
                let counted = counted.clone();
                std::thread::spawn(move || {
                    // Read the request head, answer, close.
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match client.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let body = r#"{"error":"unavailable","reason":"try again"}"#;
                    let _ = write!(
                        client,
                        "HTTP/1.1 {status} Busy\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    counted.fetch_add(1, Ordering::Relaxed);
                    let _ = client.shutdown(Shutdown::Both);
                });
                continue;
            }
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c_in, &mut s_out);
                let _ = s_out.shutdown(Shutdown::Write);
            });
            let (mut s_in, mut c_out) = (server, client);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s_in, &mut c_out);
                let _ = c_out.shutdown(Shutdown::Both);
            });
        }
    });
    (port, refused)
}

#[test]
fn retries_servers_that_answer_503_or_429() {
    let a = Server::start();
    let b = Server::start();
    a.create_db("src");
    let docs: Vec<Value> = (0..1500)
        .map(|i| json!({"_id": format!("d{i:05}")}))
        .collect();
    bulk(&a, "src", json!({ "docs": docs }));
    for (status, target) in [(503, "t503"), (429, "t429")] {
        // Every second connection to the target is refused.
        let (port, refused) = refusing_proxy(b.port, 2, status);
        let target_url = format!("http://{}:{}@127.0.0.1:{port}/{target}", ADMIN.0, ADMIN.1);
        let out = ok(replicate(
            &a,
            json!({"source": "src", "target": target_url, "create_target": true, "worker_batch_size": 100, "retries_per_request": 10}),
        ));
        assert_eq!(out["history"][0]["doc_write_failures"], json!(0), "{out}");
        assert_eq!(leaves(&a, "src"), leaves(&b, target));
        assert!(
            refused.load(std::sync::atomic::Ordering::Relaxed) > 0,
            "{status}: the proxy refused nothing: the test tested nothing"
        );
    }
    a.stop();
    b.stop();
}
