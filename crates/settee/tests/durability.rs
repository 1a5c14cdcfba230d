//! Durability through HTTP: graceful shutdown flushes batch-mode and
//! delayed writes; a SIGKILL never loses a 201-acknowledged full-commit
//! write (≥ 10 rounds of concurrent writers killed mid-flight).

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Server, ADMIN};
use serde_json::{json, Value};

#[test]
fn sigterm_flushes_batch_and_delayed_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(tmp.path(), &[]);
    s.create_db("flush");
    s.admin(
        "PUT",
        "/_node/_local/_config/couchdb/delayed_commits",
        Some("\"true\""),
    );
    for i in 0..50 {
        assert_eq!(
            s.admin("PUT", &format!("/flush/b{i}?batch=ok"), Some("{}"))
                .status,
            202
        );
    }
    assert_eq!(s.admin("PUT", "/flush/delayed", Some("{}")).status, 201);
    assert!(s.stop().success(), "clean exit on SIGTERM");
    let s = Server::start_in(tmp.path(), &[]);
    let info = s.admin("GET", "/flush", None).json();
    assert_eq!(info["doc_count"], 51, "{info}");
}

/// SIGTERM while the background view updater has work: the process stops
/// that thread and closes the store before it exits. RocksDB's own log
/// says so ("Shutdown complete" is written by its close); a store left
/// open at exit, its background threads still running, can abort the
/// process (most likely the SIGABRT CI saw after a soak).
#[test]
fn sigterm_closes_the_store_even_with_background_view_updates() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(tmp.path(), &[]);
    s.create_db("v");
    let ddoc = json!({"views": {"n": {"map": "function(doc){ emit(doc.n, null); }"}}});
    assert_eq!(
        s.admin("PUT", "/v/_design/d", Some(&ddoc.to_string()))
            .status,
        201
    );
    // A query puts the index in use; the writes after it give the
    // background updater work.
    assert_eq!(s.admin("GET", "/v/_design/d/_view/n", None).status, 200);
    for round in 0..5 {
        let docs: Vec<Value> = (0..500).map(|i| json!({"n": round * 500 + i})).collect();
        let body = json!({ "docs": docs }).to_string();
        assert_eq!(s.admin("POST", "/v/_bulk_docs", Some(&body)).status, 201);
    }
    std::thread::sleep(Duration::from_millis(1100));
    assert!(s.stop().success(), "clean exit on SIGTERM");
    let log = std::fs::read_to_string(tmp.path().join("store").join("LOG")).expect("RocksDB LOG");
    assert!(
        log.lines().any(|l| l.ends_with("Shutdown complete")),
        "the store was not closed before the process exited"
    );
    let s = Server::start_in(tmp.path(), &[]);
    let v = s.admin("GET", "/v/_design/d/_view/n?limit=0", None).json();
    assert_eq!(v["total_rows"], 2500, "{v}");
}

/// Reads which of `ids` exist, in pages.
fn existing(s: &Server, db: &str, ids: &[String]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for page in ids.chunks(500) {
        let v = s
            .admin(
                "POST",
                &format!("/{db}/_all_docs"),
                Some(&json!({"keys": page}).to_string()),
            )
            .json();
        for row in v["rows"].as_array().unwrap() {
            if row["value"]["rev"].is_string() && row["value"]["deleted"] != Value::Bool(true) {
                found.insert(row["id"].as_str().unwrap().to_string());
            }
        }
    }
    found
}

#[test]
fn sigkill_never_loses_acknowledged_writes() {
    const ROUNDS: usize = 10;
    const WRITERS: usize = 8;
    let tmp = tempfile::tempdir().unwrap();
    let acked: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    for round in 0..ROUNDS {
        let s = Server::start_in(tmp.path(), &[]);
        if round == 0 {
            s.create_db("crash");
        }
        // Everything acknowledged in earlier rounds survived the kill.
        let before: Vec<String> = acked.lock().unwrap().clone();
        let found = existing(&s, "crash", &before);
        let lost: Vec<&String> = before.iter().filter(|id| !found.contains(*id)).collect();
        assert!(
            lost.is_empty(),
            "round {round}: {} acknowledged writes lost, e.g. {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        );

        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for w in 0..WRITERS {
            let (stop, acked, port) = (stop.clone(), acked.clone(), s.port);
            threads.push(std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(10)).build();
                let auth = format!("Basic {}", common::base64_lite::encode(format!("{}:{}", ADMIN.0, ADMIN.1).as_bytes()));
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) && n < 100_000 {
                    n += 1;
                    let id = format!("r{round}-w{w}-{n}");
                    let url = format!("http://127.0.0.1:{port}/crash/{id}");
                    let r = if n % 5 == 0 {
                        // Some writes through _bulk_docs, two docs at a time.
                        let url = format!("http://127.0.0.1:{port}/crash/_bulk_docs");
                        let body = json!({"docs": [{"_id": format!("{id}-a")}, {"_id": format!("{id}-b")}]}).to_string();
                        agent
                            .post(&url)
                            .set("Authorization", &auth)
                            .set("Content-Type", "application/json")
                            .set("X-Couch-Full-Commit", "true")
                            .send_string(&body)
                    } else {
                        agent.put(&url).set("Authorization", &auth).set("X-Couch-Full-Commit", "true").send_string("{\"v\":1}")
                    };
                    match r {
                        Ok(resp) if resp.status() == 201 => {
                            let mut acked = acked.lock().unwrap();
                            if n % 5 == 0 {
                                acked.push(format!("{id}-a"));
                                acked.push(format!("{id}-b"));
                            } else {
                                acked.push(id);
                            }
                        }
                        // The server died mid-request: not acknowledged.
                        _ => break,
                    }
                }
            }));
        }
        // Let writes flow, then kill without warning.
        let t = Instant::now();
        let start_count = acked.lock().unwrap().len();
        while acked.lock().unwrap().len() < start_count + 200
            && t.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(50 + (round as u64 * 37) % 200));
        s.kill9();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        assert!(
            acked.lock().unwrap().len() > start_count,
            "round {round}: no write was acknowledged"
        );
    }
    let s = Server::start_in(tmp.path(), &[]);
    let all: Vec<String> = acked.lock().unwrap().clone();
    let found = existing(&s, "crash", &all);
    assert_eq!(
        found.len(),
        all.iter().collect::<BTreeSet<_>>().len(),
        "acknowledged writes lost after the last kill"
    );
}
