//! Automatic purge of deleted documents (issue 41) through the real
//! server: `GET/PUT /{db}/_auto_purge` as CouchDB's development branch
//! answers it, tombstones purged once older than the TTL and not before,
//! views and Mango indexes consistent with what is left, a continuous
//! replication from the database seeing every deletion, the purge going
//! on after a SIGKILL in the middle of it, `_active_tasks` and `_stats`.

mod common;

use std::time::{Duration, Instant};

use common::{Resp, Server, ADMIN};
use serde_json::{json, Value};

/// Passes every 100 ms instead of every minute.
fn fast(s: &Server) {
    set_config(s, "check_interval_ms", "100");
}

fn set_config(s: &Server, key: &str, value: &str) {
    let r = s.admin(
        "PUT",
        &format!("/_node/_local/_config/couch_auto_purge_plugin/{key}"),
        Some(&json!(value).to_string()),
    );
    assert_eq!(r.status, 200, "{r:?}");
}

fn ttl(s: &Server, db: &str, ttl: &str) {
    let r = s.admin(
        "PUT",
        &format!("/{db}/_auto_purge"),
        Some(&json!({"deleted_document_ttl": ttl}).to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.json(), json!({"ok": true}));
}

fn bulk(s: &Server, db: &str, docs: Value) -> Vec<Value> {
    let r = s.admin(
        "POST",
        &format!("/{db}/_bulk_docs"),
        Some(&json!({ "docs": docs }).to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
    r.json().as_array().unwrap().clone()
}

/// Creates `n` documents `{prefix}{i}` and deletes those with `i % 3 !=
/// 0`; returns the ids kept.
fn churn(s: &Server, db: &str, prefix: &str, n: usize) -> Vec<String> {
    let docs: Vec<Value> = (0..n)
        .map(|i| json!({"_id": format!("{prefix}{i:05}"), "v": i}))
        .collect();
    let made = bulk(s, db, Value::Array(docs));
    let dels: Vec<Value> = made
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0)
        .map(|(_, r)| json!({"_id": r["id"], "_rev": r["rev"], "_deleted": true}))
        .collect();
    for chunk in dels.chunks(1000) {
        bulk(s, db, Value::Array(chunk.to_vec()));
    }
    (0..n)
        .filter(|i| i % 3 == 0)
        .map(|i| format!("{prefix}{i:05}"))
        .collect()
}

fn info(s: &Server, db: &str) -> Value {
    let r = s.admin("GET", &format!("/{db}"), None);
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

fn eventually(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < limit, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The ids `_changes` lists (deleted or not).
fn change_ids(s: &Server, db: &str) -> Vec<String> {
    let r = s.admin("GET", &format!("/{db}/_changes"), None);
    assert_eq!(r.status, 200, "{r:?}");
    let mut ids: Vec<String> = r.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .filter(|id| !id.starts_with("_design/"))
        .collect();
    ids.sort();
    ids
}

fn error(r: &Resp) -> (u16, String, String) {
    let v = r.json();
    (
        r.status,
        v["error"].as_str().unwrap_or_default().to_string(),
        v["reason"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn settings_are_answered_as_couchdb_answers_them() {
    let s = Server::start();
    s.create_db("settings");
    let r = s.admin("GET", "/settings/_auto_purge", None);
    assert_eq!((r.status, r.json()), (200, json!({})));
    ttl(&s, "settings", "3_days");
    let r = s.admin("GET", "/settings/_auto_purge", None);
    assert_eq!(r.json(), json!({"deleted_document_ttl": "3_days"}));
    ttl(&s, "settings", "infinity");
    // A PUT replaces the object; `{}` leaves the server's default.
    let r = s.admin("PUT", "/settings/_auto_purge", Some("{}"));
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(
        s.admin("GET", "/settings/_auto_purge", None).json(),
        json!({})
    );
    let bad_ttl = (
        400,
        "bad_request".to_string(),
        "deleted_document_ttl must be a valid string".to_string(),
    );
    for body in [
        json!({"deleted_document_ttl": 5}),
        json!({"deleted_document_ttl": null}),
        json!({"deleted_document_ttl": "5"}),
        json!({"deleted_document_ttl": "0_sec"}),
        json!({"deleted_document_ttl": "-1_day"}),
        json!({"deleted_document_ttl": "1_fortnight"}),
        json!({"deleted_document_ttl": ["1_day"]}),
    ] {
        let r = s.admin("PUT", "/settings/_auto_purge", Some(&body.to_string()));
        assert_eq!(error(&r), bad_ttl, "{body}");
    }
    let r = s.admin("PUT", "/settings/_auto_purge", Some(r#"{"ttl":"1_day"}"#));
    assert_eq!(
        error(&r),
        (
            400,
            "bad_request".into(),
            "invalid auto purge property".into()
        )
    );
    let r = s.admin("PUT", "/settings/_auto_purge", Some("[]"));
    assert_eq!(
        error(&r),
        (
            400,
            "bad_request".into(),
            "Request body must be a JSON object".into()
        )
    );
    let r = s.admin("PUT", "/settings/_auto_purge", Some("{"));
    assert_eq!(r.status, 400, "{r:?}");
    // Nothing refused was stored.
    assert_eq!(
        s.admin("GET", "/settings/_auto_purge", None).json(),
        json!({})
    );
    let r = s.admin("POST", "/settings/_auto_purge", Some("{}"));
    assert_eq!(r.status, 405, "{r:?}");
    assert_eq!(r.header("allow"), Some("GET,PUT,HEAD"));
    let r = s.admin("GET", "/nosuchdb/_auto_purge", None);
    assert_eq!(r.status, 404, "{r:?}");
    let r = s.anon("PUT", "/settings/_auto_purge", Some("{}"));
    assert_eq!(r.status, 401, "{r:?}");
    // The setting does not move the database's sequence.
    let before = info(&s, "settings")["update_seq"].clone();
    ttl(&s, "settings", "1_hour");
    assert_eq!(info(&s, "settings")["update_seq"], before);
    // A database created again starts without one.
    assert_eq!(s.admin("DELETE", "/settings", None).status, 200);
    s.create_db("settings");
    assert_eq!(
        s.admin("GET", "/settings/_auto_purge", None).json(),
        json!({})
    );
}

#[test]
fn tombstones_go_after_the_ttl_and_indexes_agree_with_what_is_left() {
    let s = Server::start();
    fast(&s);
    s.create_db("queue");
    let r = s.admin(
        "PUT",
        "/queue/_design/d",
        Some(r#"{"views":{"v":{"map":"function(doc){emit(doc.v, null)}","reduce":"_count"}}}"#),
    );
    assert_eq!(r.status, 201, "{r:?}");
    let r = s.admin(
        "POST",
        "/queue/_index",
        Some(r#"{"index":{"fields":["v"]},"name":"by-v","ddoc":"m"}"#),
    );
    assert_eq!(r.status, 200, "{r:?}");
    // Both indexes built before the deletions.
    let _ = s.admin("GET", "/queue/_design/d/_view/v", None);
    let kept = churn(&s, "queue", "q", 300);
    let deleted_at = Instant::now();
    ttl(&s, "queue", "2_sec");
    assert_eq!(info(&s, "queue")["doc_del_count"], 200);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        info(&s, "queue")["doc_del_count"],
        200,
        "purged before the TTL"
    );
    eventually("every tombstone purged", Duration::from_secs(30), || {
        info(&s, "queue")["doc_del_count"] == 0
    });
    assert!(deleted_at.elapsed() >= Duration::from_secs(2));
    let i = info(&s, "queue");
    assert_eq!(i["doc_count"], kept.len() as u64 + 2, "{i}");
    assert_eq!(change_ids(&s, "queue"), kept);
    // The view: exactly the documents left, reduced and not.
    let v = s
        .admin("GET", "/queue/_design/d/_view/v?reduce=false", None)
        .json();
    let ids: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, kept.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(v["total_rows"], kept.len());
    let v = s.admin("GET", "/queue/_design/d/_view/v", None).json();
    assert_eq!(v["rows"][0]["value"], kept.len());
    // Mango over its json index: the same.
    let r = s.admin(
        "POST",
        "/queue/_find",
        Some(r#"{"selector":{"v":{"$gte":0}},"use_index":"m","limit":1000,"fields":["_id"]}"#),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let found: Vec<String> = r.json()["docs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(found, kept);
    // Counted in _stats.
    let stats = s.admin("GET", "/_node/_local/_stats", None).json();
    assert_eq!(stats["couchdb"]["auto_purge"]["docs_purged"]["value"], 200);
}

#[test]
fn a_ttl_set_later_or_changed_takes_effect_without_a_restart() {
    let s = Server::start();
    fast(&s);
    s.create_db("later");
    churn(&s, "later", "l", 30);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        info(&s, "later")["doc_del_count"],
        20,
        "no TTL: nothing purged"
    );
    // The server's default, negative: every deletion due at once.
    set_config(&s, "deleted_document_ttl", "-1_sec");
    eventually(
        "purged by the server default",
        Duration::from_secs(20),
        || info(&s, "later")["doc_del_count"] == 0,
    );
    // A database's `infinity` opts out of the default.
    s.create_db("kept");
    ttl(&s, "kept", "infinity");
    churn(&s, "kept", "k", 30);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(info(&s, "kept")["doc_del_count"], 20);
}

#[test]
fn a_continuous_replication_sees_every_deletion_before_it_is_purged() {
    let s = Server::start();
    fast(&s);
    s.create_db("src");
    s.create_db("dst");
    let r = s.admin(
        "POST",
        "/_replicate",
        Some(&json!({"source": "src", "target": "dst", "continuous": true, "checkpoint_interval": 500}).to_string()),
    );
    assert_eq!(r.status, 202, "{r:?}");
    ttl(&s, "src", "1_sec");
    let mut kept = Vec::new();
    for round in 0..5 {
        kept.extend(churn(&s, "src", &format!("r{round}-"), 120));
        std::thread::sleep(Duration::from_millis(300));
    }
    eventually(
        "the source's tombstones purged",
        Duration::from_secs(60),
        || info(&s, "src")["doc_del_count"] == 0,
    );
    eventually(
        "the target has every deletion",
        Duration::from_secs(60),
        || {
            let i = info(&s, "dst");
            i["doc_del_count"] == 400 && i["doc_count"] == kept.len() as u64
        },
    );
    kept.sort();
    assert_eq!(change_ids(&s, "src"), kept);
}

#[test]
fn the_purge_goes_on_after_a_kill_in_the_middle() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_in(tmp.path(), &[]);
    s.create_db("big");
    let kept = churn(&s, "big", "b", 6000);
    // Slow: 50 documents per request, 1,000 a second.
    set_config(&s, "max_batch_size", "50");
    set_config(&s, "max_docs_per_sec", "1000");
    fast(&s);
    ttl(&s, "big", "1_sec");
    eventually("the purge under way", Duration::from_secs(30), || {
        let tasks = s.admin("GET", "/_active_tasks", None).json();
        let i = info(&s, "big");
        let running = tasks
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["type"] == "auto_purge" && t["database"] == "big");
        running && i["doc_del_count"].as_u64().unwrap() < 3900
    });
    s.kill9();
    let s = Server::start_in(tmp.path(), &[]);
    let left = info(&s, "big")["doc_del_count"].as_u64().unwrap();
    assert!(
        left > 0,
        "all purged before the kill: the test proves nothing"
    );
    eventually(
        "the rest purged after the restart",
        Duration::from_secs(60),
        || info(&s, "big")["doc_del_count"] == 0,
    );
    let i = info(&s, "big");
    assert_eq!(i["doc_count"], kept.len());
    assert_eq!(change_ids(&s, "big"), kept);
    let all = s.admin("GET", "/big/_all_docs", None).json();
    assert_eq!(all["total_rows"], kept.len());
}

#[test]
fn a_replication_that_has_not_read_the_deletions_holds_them_back() {
    let s = Server::start();
    fast(&s);
    s.create_db("held");
    ttl(&s, "held", "1_sec");
    // A continuous job (a _replicator document: the source by URL, with
    // credentials) whose target cannot be reached never checkpoints.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = format!(
        "http://127.0.0.1:{}/nowhere",
        dead.local_addr().unwrap().port()
    );
    drop(dead);
    let source = format!("http://{}:{}@127.0.0.1:{}/held", ADMIN.0, ADMIN.1, s.port);
    let r = s.admin("PUT", "/_replicator", None);
    assert!(r.status == 201 || r.status == 412, "{r:?}");
    let job = json!({"source": source, "target": target, "continuous": true});
    let r = s.admin("PUT", "/_replicator/stuck", Some(&job.to_string()));
    assert_eq!(r.status, 201, "{r:?}");
    let rev = r.json()["rev"].as_str().unwrap().to_string();
    churn(&s, "held", "h", 30);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        info(&s, "held")["doc_del_count"],
        20,
        "purged deletions a replication from this database has not read"
    );
    let stats = s.admin("GET", "/_node/_local/_stats", None).json();
    assert!(
        stats["couchdb"]["auto_purge"]["held"]["value"]
            .as_u64()
            .unwrap()
            > 0
    );
    let r = s.admin("DELETE", &format!("/_replicator/stuck?rev={rev}"), None);
    assert_eq!(r.status, 200, "{r:?}");
    eventually(
        "purged once the job is gone",
        Duration::from_secs(20),
        || info(&s, "held")["doc_del_count"] == 0,
    );
}
