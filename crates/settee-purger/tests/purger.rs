//! The purger against a real engine (RocksDB in a temporary directory),
//! with holds the test controls: tombstones go once older than the TTL,
//! never before; live conflicts, live documents and documents written
//! again stay; a hold keeps deletions it has not read; the purge history
//! an index relies on is not outrun.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use settee_core::doc::Doc;
use settee_db::{Database, Engine, EngineOptions, GetOptions, UpdateOptions};
use settee_purger::{Hold, Holds, Purger, Settings, Ttl};

/// Holds at `seq` (u64::MAX: none) with index purge sequence `purge`
/// (u64::MAX: no index).
#[derive(Default)]
struct TestHolds {
    seq: AtomicU64,
    purge: AtomicU64,
}

impl TestHolds {
    fn none() -> Arc<TestHolds> {
        Arc::new(TestHolds {
            seq: AtomicU64::new(u64::MAX),
            purge: AtomicU64::new(u64::MAX),
        })
    }
}

impl Holds for TestHolds {
    fn hold(&self, _db: &Database) -> Hold {
        let seq = self.seq.load(Ordering::SeqCst);
        let purge = self.purge.load(Ordering::SeqCst);
        Hold {
            seq: (seq != u64::MAX).then_some(seq),
            purge_seq: (purge != u64::MAX).then_some(purge),
            by: Some("test".into()),
        }
    }
}

fn fast(ttl: Option<Ttl>) -> Settings {
    Settings {
        default_ttl: ttl,
        interval: Duration::from_millis(50),
        ..Settings::default()
    }
}

fn put(db: &Database, id: &str, rev: Option<&str>, deleted: bool) -> String {
    let mut body = json!({"_id": id, "v": 1});
    if let Some(r) = rev {
        body["_rev"] = json!(r);
    }
    if deleted {
        body["_deleted"] = json!(true);
    }
    db.put(Doc::from_json(body, String::new).unwrap())
        .unwrap()
        .to_string()
}

fn exists(db: &Database, id: &str) -> bool {
    db.reader().unwrap().rev_tree(id).unwrap().is_some()
}

/// Waits (bounded) until `cond` holds.
fn eventually(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < limit, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn engine() -> (tempfile::TempDir, Engine) {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
    (dir, engine)
}

#[test]
fn tombstones_go_after_the_ttl_and_not_before() {
    let (_dir, engine) = engine();
    let db = engine.create_db("churn").unwrap();
    db.set_auto_purge(r#"{"deleted_document_ttl":"2_sec"}"#)
        .unwrap();
    let r = put(&db, "gone", None, false);
    put(&db, "gone", Some(&r), true);
    put(&db, "kept", None, false);
    // A deleted document with a live conflict stays.
    let c = put(&db, "conflicted", None, false);
    put(&db, "conflicted", Some(&c), true);
    db.update(
        vec![Doc::from_json(
            json!({"_id": "conflicted", "_rev": "1-0123456789abcdef0123456789abcdef", "x": 1}),
            String::new,
        )
        .unwrap()],
        UpdateOptions {
            new_edits: false,
            ..UpdateOptions::default()
        },
    )
    .unwrap();
    let deleted_at = Instant::now();
    let purger = Purger::start(engine.clone(), TestHolds::none(), fast(None)).unwrap();
    // Well inside the TTL: nothing purged yet (passes run every 50 ms).
    std::thread::sleep(Duration::from_millis(600));
    assert!(exists(&db, "gone"), "purged before its TTL");
    eventually("the tombstone purged", Duration::from_secs(15), || {
        !exists(&db, "gone")
    });
    assert!(
        deleted_at.elapsed() >= Duration::from_secs(2),
        "purged early"
    );
    assert!(exists(&db, "kept"));
    assert!(exists(&db, "conflicted"));
    let doc = db
        .reader()
        .unwrap()
        .get("conflicted", &GetOptions::default())
        .unwrap();
    assert!(!doc.deleted, "the live conflict wins");
    assert_eq!(purger.stats().docs_purged.load(Ordering::Relaxed), 1);
    let info = db.info().unwrap();
    assert_eq!(info.doc_del_count, 0);
    assert_eq!(info.doc_count, 2);
    assert_eq!(info.purge_seq, 1);
}

#[test]
fn the_server_default_applies_and_infinity_opts_out() {
    let (_dir, engine) = engine();
    let a = engine.create_db("a").unwrap();
    let b = engine.create_db("b").unwrap();
    b.set_auto_purge(r#"{"deleted_document_ttl":"infinity"}"#)
        .unwrap();
    for db in [&a, &b] {
        let r = put(db, "x", None, false);
        put(db, "x", Some(&r), true);
    }
    let purger = Purger::start(engine.clone(), TestHolds::none(), fast(None)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(exists(&a, "x"), "no TTL anywhere yet");
    // A negative default: every deletion is due at once.
    purger.set_settings(fast(Some(Ttl::Secs(-60))));
    eventually("a's tombstone purged", Duration::from_secs(10), || {
        !exists(&a, "x")
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(exists(&b, "x"), "infinity keeps b's");
}

#[test]
fn a_hold_keeps_what_it_has_not_read() {
    let (_dir, engine) = engine();
    let db = engine.create_db("held").unwrap();
    let r = put(&db, "early", None, false);
    put(&db, "early", Some(&r), true);
    let read_up_to = db.update_seq();
    let r = put(&db, "late", None, false);
    put(&db, "late", Some(&r), true);
    let holds = TestHolds::none();
    holds.seq.store(read_up_to, Ordering::SeqCst);
    let _purger = Purger::start(
        engine.clone(),
        Arc::clone(&holds) as Arc<dyn Holds>,
        fast(Some(Ttl::Secs(-60))),
    )
    .unwrap();
    eventually(
        "the deletion the reader saw purged",
        Duration::from_secs(10),
        || !exists(&db, "early"),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        exists(&db, "late"),
        "purged a deletion the reader has not read"
    );
    holds.seq.store(u64::MAX, Ordering::SeqCst);
    eventually("the rest purged once read", Duration::from_secs(10), || {
        !exists(&db, "late")
    });
}

#[test]
fn a_document_written_again_keeps_its_new_revision() {
    let (_dir, engine) = engine();
    let db = engine.create_db("again").unwrap();
    let holds = TestHolds::none();
    let r = put(&db, "d", None, false);
    let d = put(&db, "d", Some(&r), true);
    // Written again on top of its tombstone before the purger runs.
    let live = put(&db, "d", Some(&d), false);
    let _purger = Purger::start(engine.clone(), holds, fast(Some(Ttl::Secs(-60)))).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let doc = db
        .reader()
        .unwrap()
        .get("d", &GetOptions::default())
        .unwrap();
    assert_eq!(doc.rev.to_string(), live);
}

#[test]
fn an_index_purge_history_is_not_outrun() {
    let (_dir, engine) = engine();
    let db = engine.create_db("history").unwrap();
    db.set_purged_infos_limit(100).unwrap();
    let docs: Vec<Doc> = (0..300)
        .map(|i| {
            Doc::from_json(
                json!({"_id": format!("d{i:04}"), "_deleted": true}),
                String::new,
            )
            .unwrap()
        })
        .collect();
    db.update(docs, UpdateOptions::default()).unwrap();
    let holds = TestHolds::none();
    // An index that has read everything but applied no purge yet.
    holds.purge.store(0, Ordering::SeqCst);
    let _purger = Purger::start(
        engine.clone(),
        Arc::clone(&holds) as Arc<dyn Holds>,
        fast(Some(Ttl::Secs(-60))),
    )
    .unwrap();
    eventually("half the history used", Duration::from_secs(10), || {
        db.seqs().1 == 50
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(db.seqs().1, 50, "outran the index's purge history");
    // The index catches up: the purger goes on.
    holds.purge.store(50, Ordering::SeqCst);
    eventually("the next half", Duration::from_secs(10), || {
        db.seqs().1 == 100
    });
    holds.purge.store(u64::MAX, Ordering::SeqCst);
    eventually("all purged", Duration::from_secs(10), || {
        db.info().unwrap().doc_del_count == 0
    });
}
