//! Sequence assignment and the counts built on it, and purge bookkeeping:
//! one sequence per document per request, the by-seq counts behind
//! `pending` (also for a database written before they existed), the
//! `offset` count of `_all_docs`, and the purge history with its limit.

use std::sync::Arc;

use serde_json::json;
use settee_core::doc::Doc;
use settee_core::rev::Rev;
use settee_db::keys;
use settee_db::records::encode;
use settee_db::{Database, Engine, EngineOptions, UpdateOptions};
use settee_store::mem::MemStore;
use settee_store::{Batch, Keyspace, Store};

fn doc(v: serde_json::Value) -> Doc {
    Doc::from_json(v, || "generated".into()).unwrap()
}

fn replicated() -> UpdateOptions {
    UpdateOptions {
        new_edits: false,
        ..Default::default()
    }
}

fn seqs(db: &Database) -> Vec<(u64, String)> {
    let mut rows = Vec::new();
    db.reader()
        .unwrap()
        .changes(0, false, u64::MAX, &mut |r| {
            rows.push((r.seq, r.id));
            true
        })
        .unwrap();
    rows
}

/// `count_changes_after` against counting the rows.
fn check_counts(db: &Database) {
    let rows = seqs(db);
    let reader = db.reader().unwrap();
    let top = db.update_seq();
    let mut probes: Vec<u64> = vec![0, 1, top, top + 5, top.saturating_sub(1)];
    probes.extend(rows.iter().map(|r| r.0));
    probes.extend(rows.iter().map(|r| r.0.saturating_sub(1)));
    for k in [1, 2, 3] {
        probes.push(k * keys::SEQ_BUCKET);
        probes.push(k * keys::SEQ_BUCKET - 1);
    }
    for since in probes {
        let expected = rows.iter().filter(|r| r.0 > since).count() as u64;
        assert_eq!(
            reader.count_changes_after(since).unwrap(),
            expected,
            "since {since}"
        );
    }
}

#[test]
fn new_edits_false_gives_a_document_one_sequence_per_request() {
    let e = Engine::with_store(Arc::new(MemStore::new()), EngineOptions::default());
    let db = e.create_db("d").unwrap();
    let docs = vec![
        doc(json!({"_id": "a", "_rev": "1-aaaa", "v": 1})),
        doc(json!({"_id": "b", "_rev": "1-cccc", "v": 3})),
        doc(json!({"_id": "a", "_rev": "1-bbbb", "v": 2})),
    ];
    db.update(docs, replicated()).unwrap();
    assert_eq!(seqs(&db), vec![(1, "a".into()), (2, "b".into())]);
    assert_eq!(db.update_seq(), 2);
    let leaves = db
        .reader()
        .unwrap()
        .rev_tree("a")
        .unwrap()
        .unwrap()
        .leaves();
    assert_eq!(leaves.len(), 2);
    // A later request is a new change.
    db.update(
        vec![doc(json!({"_id": "a", "_rev": "1-dddd", "v": 4}))],
        replicated(),
    )
    .unwrap();
    assert_eq!(seqs(&db), vec![(2, "b".into()), (3, "a".into())]);
    // Pushing what is already there changes nothing.
    db.update(
        vec![doc(json!({"_id": "b", "_rev": "1-cccc", "v": 3}))],
        replicated(),
    )
    .unwrap();
    assert_eq!(db.update_seq(), 3);
    check_counts(&db);
}

#[test]
fn counts_of_changes_follow_updates_deletes_and_purges() {
    let e = Engine::with_store(Arc::new(MemStore::new()), EngineOptions::default());
    let db = e.create_db("d").unwrap();
    // More than two buckets of sequences, with updates that leave holes.
    let n = keys::SEQ_BUCKET as usize + 500;
    let docs: Vec<Doc> = (0..n)
        .map(|i| doc(json!({"_id": format!("d{i:06}")})))
        .collect();
    let revs: Vec<Rev> = db
        .update(docs, UpdateOptions::default())
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let updates: Vec<Doc> = (0..n)
        .step_by(3)
        .map(|i| doc(json!({"_id": format!("d{i:06}"), "_rev": revs[i].to_string(), "x": 1})))
        .collect();
    db.update(updates, UpdateOptions::default()).unwrap();
    let more: Vec<Doc> = (0..keys::SEQ_BUCKET as usize)
        .map(|i| doc(json!({"_id": format!("e{i:06}")})))
        .collect();
    db.update(more, UpdateOptions::default()).unwrap();
    db.purge(vec![
        ("d000001".into(), vec![revs[1].clone()]),
        ("nope".into(), vec![revs[1].clone()]),
    ])
    .unwrap();
    check_counts(&db);
    // all_or_nothing that fails leaves the counts alone.
    let bad = vec![
        doc(json!({"_id": "new1"})),
        doc(json!({"_id": "d000002", "_rev": "1-ffff"})),
    ];
    let aon = UpdateOptions {
        all_or_nothing: true,
        ..Default::default()
    };
    assert!(db.update(bad, aon).is_err());
    check_counts(&db);
}

#[test]
fn counts_are_built_for_a_database_written_before_they_existed() {
    let store = Arc::new(MemStore::new());
    let opts = EngineOptions::default();
    let e = Engine::with_store(store.clone(), opts.clone());
    let db = e.create_db("old").unwrap();
    let docs: Vec<Doc> = (0..keys::SEQ_BUCKET + 10)
        .map(|i| doc(json!({"_id": format!("k{i:06}")})))
        .collect();
    db.update(docs, UpdateOptions::default()).unwrap();
    let state = db.reader().unwrap().state().unwrap();
    e.shutdown();
    drop(db);
    drop(e);
    // Make it look as the first layout left it: a state record without
    // the last fields, no counts.
    #[derive(serde::Serialize)]
    struct V1(u64, u64, u64, u64, u64, u64);
    let id = 1;
    let (lo, hi) = keys::seq_count_range(id);
    let mut b = Batch::new();
    b.delete_range(Keyspace::Meta, lo, hi);
    b.put(
        Keyspace::Meta,
        keys::state(id),
        encode(&V1(
            state.update_seq,
            state.doc_count,
            state.doc_del_count,
            state.purge_seq,
            state.external_bytes,
            state.revs_limit,
        )),
    );
    store.write(&b, true).unwrap();
    let e = Engine::with_store(store.clone(), opts);
    let db = e.db("old").unwrap();
    let s = db.reader().unwrap().state().unwrap();
    assert!(!s.seq_index);
    assert_eq!(s.purged_infos_limit, 1000);
    check_counts(&db); // counted row by row
    db.put(doc(
        json!({"_id": "k000003", "_rev": seqs_rev(&db, "k000003")}),
    ))
    .unwrap();
    assert!(db.reader().unwrap().state().unwrap().seq_index);
    check_counts(&db); // from the counts built by the write
}

fn seqs_rev(db: &Database, id: &str) -> String {
    db.reader()
        .unwrap()
        .get(id, &Default::default())
        .unwrap()
        .rev
        .to_string()
}

#[test]
fn live_documents_before_a_key_are_counted_on_either_side() {
    let e = Engine::with_store(Arc::new(MemStore::new()), EngineOptions::default());
    let db = e.create_db("d").unwrap();
    let n = 5000usize;
    let docs: Vec<Doc> = (0..n)
        .map(|i| doc(json!({"_id": format!("{i:05}")})))
        .collect();
    let revs: Vec<Rev> = db
        .update(docs, UpdateOptions::default())
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // Every seventh document deleted.
    let deletes: Vec<Doc> = (0..n)
        .step_by(7)
        .map(|i| {
            doc(json!({"_id": format!("{i:05}"), "_rev": revs[i].to_string(), "_deleted": true}))
        })
        .collect();
    db.update(deletes, UpdateOptions::default()).unwrap();
    let live = |i: usize| !i.is_multiple_of(7);
    let reader = db.reader().unwrap();
    for k in [0usize, 1, 6, 7, 100, 1500, 2500, 3333, 4990, 4999] {
        let key = format!("{k:05}");
        let below = (0..k).filter(|i| live(*i)).count() as u64;
        let above = (k + 1..n).filter(|i| live(*i)).count() as u64;
        assert_eq!(
            reader.live_before(&key, false).unwrap(),
            Some(below),
            "{key}"
        );
        assert_eq!(
            reader.live_before(&key, true).unwrap(),
            Some(above),
            "{key} desc"
        );
        // A key between ids.
        let mid = format!("{k:05}x");
        let above_mid = (k + 1..n).filter(|i| live(*i)).count() as u64;
        let below_mid = (0..=k).filter(|i| live(*i)).count() as u64;
        assert_eq!(reader.live_before(&mid, false).unwrap(), Some(below_mid));
        assert_eq!(reader.live_before(&mid, true).unwrap(), Some(above_mid));
    }
    for cap in [0u64, 1, 5, 100_000] {
        let below = (0..2500).filter(|i| live(*i)).count() as u64;
        let above = (2501..n).filter(|i| live(*i)).count() as u64;
        assert_eq!(
            reader.live_before_at_most("02500", false, cap).unwrap(),
            below.min(cap)
        );
        assert_eq!(
            reader.live_before_at_most("02500", true, cap).unwrap(),
            above.min(cap)
        );
    }
    assert_eq!(reader.live_before("", false).unwrap(), Some(0));
    assert_eq!(reader.live_before("~", true).unwrap(), Some(0));
    let all = (0..n).filter(|i| live(*i)).count() as u64;
    assert_eq!(reader.count_live(None, None).unwrap(), all);
    assert_eq!(
        reader
            .count_live(Some(("00010", true)), Some(("00020", false)))
            .unwrap(),
        (10..20).filter(|i| live(*i)).count() as u64
    );
}

#[test]
fn purge_history_is_kept_to_its_limit_and_survives_reopening() {
    let store = Arc::new(MemStore::new());
    let opts = EngineOptions::default();
    let e = Engine::with_store(store.clone(), opts.clone());
    let db = e.create_db("p").unwrap();
    let r = |s: &str| s.parse::<Rev>().unwrap();
    db.update(
        vec![
            doc(json!({"_id": "a", "_rev": "1-aaaa"})),
            doc(json!({"_id": "a", "_rev": "1-bbbb"})),
            doc(json!({"_id": "b", "_rev": "1-cccc"})),
        ],
        replicated(),
    )
    .unwrap();
    assert_eq!(db.update_seq(), 2);
    // A partial purge: the remaining leaf takes a new sequence, which is
    // the request's (CouchDB adds one only when no document took one).
    let out = db.purge(vec![("a".into(), vec![r("1-bbbb")])]).unwrap();
    assert_eq!(out.purged, vec![("a".to_string(), vec![r("1-bbbb")])]);
    assert_eq!((db.info().unwrap().purge_seq, db.update_seq()), (1, 3));
    assert_eq!(seqs(&db), vec![(2, "b".into()), (3, "a".into())]);
    // Purging nothing still counts.
    db.purge(vec![("zz".into(), vec![r("1-ffff")])]).unwrap();
    assert_eq!((db.info().unwrap().purge_seq, db.update_seq()), (2, 4));
    // An empty request does nothing.
    db.purge(vec![]).unwrap();
    assert_eq!((db.info().unwrap().purge_seq, db.update_seq()), (2, 4));
    let infos = db.reader().unwrap().purged_infos().unwrap();
    assert_eq!(
        infos,
        vec![
            ("a".to_string(), vec![r("1-bbbb")]),
            ("zz".to_string(), vec![r("1-ffff")]),
        ]
    );
    assert_eq!(db.purged_infos_limit(), 1000);
    db.set_purged_infos_limit(3).unwrap();
    assert_eq!(db.update_seq(), 5);
    for id in ["x1", "x2"] {
        db.purge(vec![(id.into(), vec![r("1-eeee")])]).unwrap();
    }
    let ids = |db: &Database| -> Vec<String> {
        db.reader()
            .unwrap()
            .purged_infos()
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    };
    assert_eq!(ids(&db), vec!["x1", "x2", "zz"]);
    db.set_purged_infos_limit(1).unwrap();
    assert_eq!(ids(&db), vec!["x2"]);
    assert!(db.set_purged_infos_limit(0).is_err());
    check_counts(&db);
    e.shutdown();
    drop(db);
    drop(e);
    store.crash();
    let e = Engine::with_store(store, opts);
    let db = e.db("p").unwrap();
    assert_eq!(db.purged_infos_limit(), 1);
    assert_eq!(ids(&db), vec!["x2"]);
    let info = db.info().unwrap();
    assert_eq!((info.purge_seq, info.update_seq), (4, 8));
    check_counts(&db);
}

#[test]
fn setting_revs_limit_counts_as_an_update() {
    let e = Engine::with_store(Arc::new(MemStore::new()), EngineOptions::default());
    let db = e.create_db("r").unwrap();
    db.set_revs_limit(5).unwrap();
    assert_eq!(db.update_seq(), 1);
    assert!(seqs(&db).is_empty());
    assert_eq!(db.reader().unwrap().count_changes_after(0).unwrap(), 0);
}
