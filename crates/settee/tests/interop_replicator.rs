//! Continuous two-way replication between Settee and other servers, until
//! both hold the same documents and revisions (conflicts, deletions and
//! histories included):
//! - with pouchdb-server 4.2.0 (tests/peers, pinned by package-lock.json)
//!   as source and as target of Settee's replicator;
//! - with the reference CouchDB 3.4.3 (../shared/reference/couchdb): Settee's
//!   replicator pushes, CouchDB's own replicator pulls back into Settee.
//!   It runs when the reference CouchDB is present (as in CI).

mod common;
mod tools_support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tools_support::*;

const CONVERGE_MAX: Duration = Duration::from_secs(90);

/// Waits until `a` and `b` hold the same documents (as snapshots).
fn converge(ha: &Http, a: &str, hb: &Http, b: &str) {
    let t = Instant::now();
    loop {
        let (sa, sb) = (snapshot(ha, a), snapshot(hb, b));
        if sa == sb {
            return;
        }
        if t.elapsed() > CONVERGE_MAX {
            assert_same(&sa, &sb, false);
            panic!("snapshots differ but assert_same found nothing");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Edits on one side while replications run: a new document, an update,
/// and a conflict made against the other side's revision.
fn edit(h: &Http, db: &str, tag: &str) {
    h.ok(
        "PUT",
        &format!("/{db}/new-{tag}"),
        Some(&json!({"from": tag})),
    );
    let d = h.ok("GET", &format!("/{db}/doc-00001"), None);
    let mut d2 = d.clone();
    d2[format!("edited-{tag}")] = json!(true);
    let r = h.req("PUT", &format!("/{db}/doc-00001"), Some(&d2));
    assert!(r.status == 201 || r.status == 409, "{r:?}");
    // A revision id of the side's own (hex), on the `2-b…` branch.
    let digit = match tag {
        "pouch" => "1",
        "couch" => "2",
        _ => "3",
    };
    let rev = format!("3-{}", digit.repeat(32));
    h.ok(
        "POST",
        &format!("/{db}/_bulk_docs"),
        Some(&json!({"new_edits": false, "docs": [
            {"_id": "conf", "_rev": rev, "side": tag,
             "_revisions": {"start": 3, "ids": [&rev[2..], "b".repeat(32), "a".repeat(32)]}}
        ]})),
    );
}

/// Bytes of [`big_attachment`]'s attachment: more than travels inline.
const BIG: usize = 1_500_000;

/// A document `big-{tag}` with a [`BIG`]-byte attachment that does not
/// compress.
fn big_attachment(h: &Http, db: &str, tag: &str) {
    use base64::Engine;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ tag.len() as u64;
    let bytes: Vec<u8> = (0..BIG)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
    h.ok(
        "PUT",
        &format!("/{db}/big-{tag}"),
        Some(&json!({"_attachments": {"big.bin": {"content_type": "application/octet-stream", "data": data}}})),
    );
}

fn settee_replicate(h: &Http, body: Value) -> Value {
    let r = h.req("POST", "/_replicate", Some(&body));
    assert!(r.status == 200 || r.status == 202, "{r:?}");
    r.json()
}

#[test]
fn two_way_continuous_with_pouchdb_server() {
    let settee = common::Server::start();
    let pouch = start_pouchdb();
    let hs = Http::settee(&settee);
    let hp = Http::anonymous(format!("http://127.0.0.1:{}", pouch.port));
    let pouch_url = |db: &str| format!("http://127.0.0.1:{}/{db}", pouch.port);
    build_fixture(&hs, "two", 300);
    hp.ok("PUT", "/two", None);
    let push = json!({"source": "two", "target": pouch_url("two"), "continuous": true});
    let pull = json!({"source": pouch_url("two"), "target": "two", "continuous": true});
    settee_replicate(&hs, push.clone());
    settee_replicate(&hs, pull.clone());
    converge(&hs, "two", &hp, "two");
    assert_fixture_shape(&snapshot(&hp, "two"));
    edit(&hp, "two", "pouch");
    edit(&hs, "two", "settee");
    converge(&hs, "two", &hp, "two");
    // `conf`: the fixture's `2-c…` and each side's `3-…` on `2-b…`.
    let conf = &snapshot(&hs, "two")["conf"];
    assert_eq!(conf.leaves.len(), 3, "{conf:?}");
    // Attachments too large to travel inline, streamed both ways.
    big_attachment(&hs, "two", "settee");
    big_attachment(&hp, "two", "pouch");
    converge(&hs, "two", &hp, "two");
    for tag in ["settee", "pouch"] {
        let path = format!("/two/big-{tag}");
        let (s, p) = (hs.ok("GET", &path, None), hp.ok("GET", &path, None));
        for k in ["digest", "length", "content_type"] {
            assert_eq!(
                s["_attachments"]["big.bin"][k], p["_attachments"]["big.bin"][k],
                "{tag} {k}"
            );
        }
        assert_eq!(s["_attachments"]["big.bin"]["length"], json!(BIG));
    }
    for mut body in [push, pull] {
        body["cancel"] = json!(true);
        settee_replicate(&hs, body);
    }
}

/// The reference CouchDB, started on a free port and stopped on drop.
struct CouchDb {
    pid: u32,
    url: String,
    home: PathBuf,
}

impl Drop for CouchDb {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.pid.to_string()).status();
        std::thread::sleep(Duration::from_millis(500));
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

fn start_couchdb() -> Option<CouchDb> {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/couchdb/start");
    if !script.exists() {
        eprintln!(
            "{} is not here: the CouchDB interop test has nothing to run against",
            script.display()
        );
        return None;
    }
    let port = free_port();
    let out = Command::new(&script)
        .args(["--port", &port.to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run the reference CouchDB's start script");
    assert!(out.status.success(), "start failed: {out:?}");
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let (url, pid) = line.split_once(' ').expect("URL PID");
    let couch = CouchDb {
        pid: pid.trim().parse().expect("pid"),
        url: url.to_string(),
        home: PathBuf::from(format!("/tmp/reference-couchdb-3.4.3-{port}")),
    };
    wait_up(
        &format!("{}/_up", couch.url),
        "CouchDB",
        Duration::from_secs(120),
    );
    Some(couch)
}

#[test]
fn two_way_continuous_with_couchdb() {
    let Some(couch) = start_couchdb() else { return };
    let settee = common::Server::start();
    let hs = Http::settee(&settee);
    let base = couch.url.clone();
    let (cred, rest) = base
        .strip_prefix("http://")
        .and_then(|r| r.split_once('@'))
        .expect("http://user:pass@host:port");
    let (user, pass) = cred.split_once(':').expect("user:pass");
    let hc = Http::with_basic(format!("http://{rest}"), user, pass);
    build_fixture(&hs, "two", 300);
    hc.ok("PUT", "/two", None);
    let settee_url = format!(
        "http://{}:{}@127.0.0.1:{}/two",
        common::ADMIN.0,
        common::ADMIN.1,
        settee.port
    );
    // Settee's replicator pushes; CouchDB's own replicator pulls.
    let push = json!({"source": "two", "target": format!("{base}/two"), "continuous": true});
    settee_replicate(&hs, push.clone());
    let pull = json!({"source": "two", "target": settee_url, "continuous": true});
    let r = hc.req("POST", "/_replicate", Some(&pull));
    assert!(r.status == 200 || r.status == 202, "{r:?}");
    converge(&hs, "two", &hc, "two");
    assert_fixture_shape(&snapshot(&hc, "two"));
    edit(&hc, "two", "couch");
    edit(&hs, "two", "settee");
    converge(&hs, "two", &hc, "two");
    let conf = &snapshot(&hc, "two")["conf"];
    assert_eq!(conf.leaves.len(), 3, "{conf:?}");
    // Attachments too large to travel inline are streamed (multipart) by
    // Settee's replicator and by CouchDB's, both ways.
    big_attachment(&hs, "two", "settee");
    big_attachment(&hc, "two", "couch");
    converge(&hs, "two", &hc, "two");
    for tag in ["settee", "couch"] {
        let path = format!("/two/big-{tag}");
        let (s, c) = (hs.ok("GET", &path, None), hc.ok("GET", &path, None));
        assert_eq!(s["_attachments"], c["_attachments"], "{tag}");
        assert_eq!(s["_attachments"]["big.bin"]["length"], json!(BIG));
    }
    // The same replication again, one-shot, on both: nothing left to do.
    let once = settee_replicate(
        &hs,
        json!({"source": "two", "target": format!("{base}/two")}),
    );
    assert_eq!(once["ok"], json!(true), "{once}");
    let mut cancel = pull;
    cancel["cancel"] = json!(true);
    let _ = hc.req("POST", "/_replicate", Some(&cancel));
    let mut cancel = push;
    cancel["cancel"] = json!(true);
    settee_replicate(&hs, cancel);
}
