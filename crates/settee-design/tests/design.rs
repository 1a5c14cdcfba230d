//! settee-design over a real engine (in memory) and real JavaScript:
//! validators found and cached by design generation, what
//! `validate_doc_update` is given and how its refusals come back, and
//! changes filters judging rows.

use std::future::Future;
use std::sync::Arc;

use serde_json::{json, Value};
use settee_core::doc::{Body, Doc};
use settee_db::{ChangeRow, Database, Engine, EngineOptions, UpdateOptions};
use settee_design::{Design, DesignConfig, DesignError, WriteCtx};
use settee_js::{JsConfig, JsEngine, JsError, ValidateError};
use settee_store::mem::MemStore;

fn setup() -> (Engine, Database, Design) {
    let engine = Engine::with_store(Arc::new(MemStore::new()), EngineOptions::default());
    let db = engine.create_db("vdb").unwrap();
    let js = JsEngine::new(JsConfig {
        workers: 2,
        ..JsConfig::default()
    })
    .unwrap();
    let design = Design::new(Arc::new(js), DesignConfig::default());
    (engine, db, design)
}

fn block<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

fn doc(v: Value) -> Doc {
    Doc::from_json(v, || "generated".into()).unwrap()
}

fn put(db: &Database, v: Value) -> String {
    db.put(doc(v)).unwrap().to_string()
}

fn admin() -> WriteCtx {
    WriteCtx {
        name: Some("admin".into()),
        roles: vec!["_admin".into()],
        security: json!({"members": {"roles": ["_admin"]}, "admins": {"roles": ["_admin"]}}),
    }
}

/// Validates `v` as a write of `db`: Ok, or the refusal.
fn check(design: &Design, db: &Database, v: Value, new_edits: bool) -> Result<(), DesignError> {
    let Some(validators) = design.validators(db).unwrap() else {
        return Ok(());
    };
    block(validators.validate(db, &doc(v), new_edits, &admin()))
}

/// The message of a `forbidden` refusal.
fn forbidden(r: Result<(), DesignError>) -> String {
    match r {
        Err(DesignError::Refused(ValidateError::Forbidden(m))) => {
            m.as_str().map_or_else(|| m.to_string(), str::to_string)
        }
        other => panic!("expected forbidden, got {other:?}"),
    }
}

/// A validate function that refuses documents with `dump`, showing its
/// arguments.
const DUMP: &str = "function(newDoc, oldDoc, userCtx, secObj) { if (newDoc.dump) throw({forbidden: JSON.stringify({newDoc: newDoc, oldDoc: oldDoc, userCtx: userCtx, secObj: secObj})}); }";

#[test]
fn no_validate_function_no_validators() {
    let (_engine, db, design) = setup();
    assert!(design.validators(&db).unwrap().is_none());
    put(
        &db,
        json!({"_id": "_design/views", "views": {"v": {"map": "function(d){}"}}}),
    );
    assert!(design.validators(&db).unwrap().is_none());
    put(
        &db,
        json!({"_id": "_design/v", "validate_doc_update": DUMP}),
    );
    assert_eq!(design.validators(&db).unwrap().unwrap().len(), 1);
}

#[test]
fn a_design_document_change_is_seen_by_the_next_write() {
    let (_engine, db, design) = setup();
    assert!(check(&design, &db, json!({"_id": "a", "x": 1}), true).is_ok());
    let rev = put(
        &db,
        json!({"_id": "_design/v", "validate_doc_update": "function(n){ if (n.x) throw({forbidden: 'one'}); }"}),
    );
    assert_eq!(
        forbidden(check(&design, &db, json!({"_id": "a", "x": 1}), true)),
        "one"
    );
    let rev = put(
        &db,
        json!({"_id": "_design/v", "_rev": rev, "validate_doc_update": "function(n){ if (n.x) throw({forbidden: 'two'}); }"}),
    );
    assert_eq!(
        forbidden(check(&design, &db, json!({"_id": "a", "x": 1}), true)),
        "two"
    );
    db.put(Doc {
        id: "_design/v".into(),
        rev: Some(rev.parse().unwrap()),
        deleted: true,
        revisions: None,
        body: Body::empty(),
        atts: None,
    })
    .unwrap();
    assert!(design.validators(&db).unwrap().is_none());
    assert!(check(&design, &db, json!({"_id": "a", "x": 1}), true).is_ok());
}

#[test]
fn a_database_created_again_is_not_served_from_the_cache() {
    let (engine, db, design) = setup();
    put(
        &db,
        json!({"_id": "_design/v", "validate_doc_update": DUMP}),
    );
    assert!(design.validators(&db).unwrap().is_some());
    engine.delete_db("vdb").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let db = engine.create_db("vdb").unwrap();
    assert!(design.validators(&db).unwrap().is_none());
}

#[test]
fn new_and_old_documents_are_what_couchdb_gives() {
    let (_engine, db, design) = setup();
    put(
        &db,
        json!({"_id": "_design/v", "validate_doc_update": DUMP}),
    );
    // A new document.
    let m: Value = serde_json::from_str(&forbidden(check(
        &design,
        &db,
        json!({"_id": "d1", "dump": true, "x": 1}),
        true,
    )))
    .unwrap();
    assert_eq!(
        m,
        json!({
            "newDoc": {"_id": "d1", "dump": true, "x": 1},
            "oldDoc": null,
            "userCtx": {"db": "vdb", "name": "admin", "roles": ["_admin"]},
            "secObj": {"members": {"roles": ["_admin"]}, "admins": {"roles": ["_admin"]}},
        })
    );
    // An edit: oldDoc is the revision edited, with its path.
    let r1 = put(&db, json!({"_id": "d2", "x": 1}));
    let m: Value = serde_json::from_str(&forbidden(check(
        &design,
        &db,
        json!({"_id": "d2", "_rev": r1, "dump": true, "x": 2}),
        true,
    )))
    .unwrap();
    let hash = r1.split_once('-').unwrap().1;
    assert_eq!(
        m["newDoc"],
        json!({"_id": "d2", "_rev": r1, "dump": true, "x": 2, "_revisions": {"start": 1, "ids": [hash]}})
    );
    assert_eq!(
        m["oldDoc"],
        json!({"_id": "d2", "_rev": r1, "x": 1, "_revisions": {"start": 1, "ids": [hash]}})
    );
}

#[test]
fn deletions_and_tombstones() {
    let (_engine, db, design) = setup();
    put(
        &db,
        json!({"_id": "_design/v", "validate_doc_update": "function(n, o){ throw({forbidden: JSON.stringify([n, o])}); }"}),
    );
    // The engine writes whatever it is given: only callers validate.
    let r1 = put(&db, json!({"_id": "d", "v": 1}));
    let deletion = Doc {
        id: "d".into(),
        rev: Some(r1.parse().unwrap()),
        deleted: true,
        revisions: None,
        body: Body::empty(),
        atts: None,
    };
    let v = design.validators(&db).unwrap().unwrap();
    let m = forbidden(block(v.validate(&db, &deletion, true, &admin())));
    let m: Value = serde_json::from_str(&m).unwrap();
    let h1 = r1.split_once('-').unwrap().1;
    assert_eq!(
        m[0],
        json!({"_id": "d", "_rev": r1, "_deleted": true, "_revisions": {"start": 1, "ids": [h1]}})
    );
    assert_eq!(m[1]["v"], 1);
    // The tombstone as oldDoc of an edit naming it.
    let r2 = db.put(deletion).unwrap().to_string();
    let h2 = r2.split_once('-').unwrap().1;
    let m: Value = serde_json::from_str(&forbidden(check(
        &design,
        &db,
        json!({"_id": "d", "_rev": r2, "w": 1}),
        true,
    )))
    .unwrap();
    assert_eq!(
        m[1],
        json!({"_id": "d", "_rev": r2, "_deleted": true, "_revisions": {"start": 2, "ids": [h2, h1]}})
    );
    // A recreation without a revision: oldDoc null.
    let m: Value = serde_json::from_str(&forbidden(check(
        &design,
        &db,
        json!({"_id": "d", "w": 1}),
        true,
    )))
    .unwrap();
    assert_eq!(m[1], Value::Null);
}

#[test]
fn conflicts_design_and_local_documents_are_not_validated() {
    let (_engine, db, design) = setup();
    put(
        &db,
        json!({"_id": "_design/v", "validate_doc_update": "function(){ throw({forbidden: 'no'}); }"}),
    );
    put(&db, json!({"_id": "live", "v": 1}));
    // No revision for a live document; a revision that is not a leaf; a
    // revision of a document that does not exist: conflicts.
    for v in [
        json!({"_id": "live"}),
        json!({"_id": "live", "_rev": "1-000"}),
        json!({"_id": "nope", "_rev": "1-000"}),
        json!({"_id": "_design/other", "validate_doc_update": "x"}),
        json!({"_id": "_local/l"}),
    ] {
        assert!(check(&design, &db, v.clone(), true).is_ok(), "{v}");
    }
    assert_eq!(
        forbidden(check(&design, &db, json!({"_id": "new"}), true)),
        "no"
    );
}

#[test]
fn replicated_revisions_see_their_nearest_stored_ancestor() {
    let (_engine, db, design) = setup();
    let opts = UpdateOptions {
        new_edits: false,
        ..UpdateOptions::default()
    };
    db.update(
        vec![doc(json!({"_id": "g", "_rev": "1-abc", "a": 1}))],
        opts,
    )
    .unwrap();
    put(
        &db,
        json!({"_id": "_design/v", "validate_doc_update": DUMP}),
    );
    let m: Value = serde_json::from_str(&forbidden(check(
        &design,
        &db,
        json!({"_id": "g", "_rev": "3-ccc", "_revisions": {"start": 3, "ids": ["ccc", "bbb", "abc"]}, "dump": 1}),
        false,
    )))
    .unwrap();
    assert_eq!(
        m["oldDoc"],
        json!({"_id": "g", "_rev": "1-abc", "a": 1, "_revisions": {"start": 1, "ids": ["abc"]}})
    );
    assert_eq!(
        m["newDoc"]["_revisions"]["ids"],
        json!(["ccc", "bbb", "abc"])
    );
    // A revision the database has is not validated again.
    assert!(check(
        &design,
        &db,
        json!({"_id": "g", "_rev": "1-abc", "dump": 1}),
        false
    )
    .is_ok());
    // No stored ancestor: null.
    let m: Value = serde_json::from_str(&forbidden(check(
        &design,
        &db,
        json!({"_id": "g", "_rev": "2-zzz", "_revisions": {"start": 2, "ids": ["zzz", "yyy"]}, "dump": 1}),
        false,
    )))
    .unwrap();
    assert_eq!(m["oldDoc"], Value::Null);
}

#[test]
fn every_function_runs_in_id_order_and_refusals_keep_their_kind() {
    let (_engine, db, design) = setup();
    put(
        &db,
        json!({"_id": "_design/b", "validate_doc_update": "function(n){ if (n.x) throw({forbidden: 'b'}); if (n.k == 'unauth') throw({unauthorized: 'who?'}); if (n.k == 'str') throw 'a string'; if (n.k == 'err') throw new TypeError('bad type'); }"}),
    );
    put(
        &db,
        json!({"_id": "_design/a", "validate_doc_update": "function(n){ if (n.x) throw({forbidden: 'a'}); }"}),
    );
    put(
        &db,
        json!({"_id": "_design/c", "validate_doc_update": "function(n){ if (n.y) throw({forbidden: 'c'}); }"}),
    );
    assert_eq!(design.validators(&db).unwrap().unwrap().len(), 3);
    assert_eq!(
        forbidden(check(&design, &db, json!({"_id": "d", "x": 1}), true)),
        "a"
    );
    assert_eq!(
        forbidden(check(&design, &db, json!({"_id": "d", "y": 1}), true)),
        "c"
    );
    match check(&design, &db, json!({"_id": "d", "k": "unauth"}), true) {
        Err(DesignError::Refused(ValidateError::Unauthorized(m))) => assert_eq!(m, "who?"),
        other => panic!("{other:?}"),
    }
    match check(&design, &db, json!({"_id": "d", "k": "str"}), true) {
        Err(DesignError::Refused(ValidateError::Unknown(m))) => assert_eq!(m, "a string"),
        other => panic!("{other:?}"),
    }
    match check(&design, &db, json!({"_id": "d", "k": "err"}), true) {
        Err(DesignError::Refused(ValidateError::Js(e))) => assert_eq!(e.couch_error(), "TypeError"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn broken_functions_refuse_every_write() {
    let (_engine, db, design) = setup();
    put(
        &db,
        json!({"_id": "_design/v", "validate_doc_update": "function(n){ if( }"}),
    );
    match check(&design, &db, json!({"_id": "d"}), true) {
        Err(DesignError::Refused(ValidateError::Js(e @ JsError::Compilation { .. }))) => {
            assert_eq!(e.couch_error(), "compilation_error")
        }
        other => panic!("{other:?}"),
    }
    let (_engine, db, design) = setup();
    put(&db, json!({"_id": "_design/v", "validate_doc_update": ""}));
    match check(&design, &db, json!({"_id": "d"}), true) {
        Err(DesignError::Refused(ValidateError::Js(e @ JsError::NotFound { .. }))) => assert_eq!(
            e.couch_reason(),
            "missing validate_doc_update function validate_doc_update on design doc _design/v"
        ),
        other => panic!("{other:?}"),
    }
    let (_engine, db, design) = setup();
    put(
        &db,
        json!({"_id": "_design/v", "language": "erlang", "validate_doc_update": "fun(_) -> ok end."}),
    );
    match check(&design, &db, json!({"_id": "d"}), true) {
        Err(DesignError::Refused(ValidateError::Js(JsError::UnsupportedLanguage { .. }))) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn validate_all_answers_in_order() {
    let (_engine, db, design) = setup();
    put(
        &db,
        json!({"_id": "_design/v", "validate_doc_update": "function(n){ if (n.bad) throw({forbidden: 'bad ' + n._id}); }"}),
    );
    let docs: Vec<Doc> = (0..50)
        .map(|i| doc(json!({"_id": format!("d{i:02}"), "bad": i % 3 == 0})))
        .collect();
    let v = design.validators(&db).unwrap().unwrap();
    let results = block(v.validate_all(&db, &docs, true, &admin())).unwrap();
    assert_eq!(results.len(), 50);
    for (i, r) in results.into_iter().enumerate() {
        if i % 3 == 0 {
            assert_eq!(forbidden(r), format!("bad d{i:02}"));
        } else {
            assert!(r.is_ok());
        }
    }
}

fn rows(db: &Database) -> Vec<ChangeRow> {
    let mut rows = Vec::new();
    db.reader()
        .unwrap()
        .changes(0, false, u64::MAX, &mut |r| {
            rows.push(r);
            true
        })
        .unwrap();
    rows
}

#[test]
fn filters_judge_winners_or_every_leaf() {
    let (_engine, db, design) = setup();
    for n in 1..=4 {
        put(&db, json!({"_id": format!("d{n}"), "n": n}));
    }
    let opts = UpdateOptions {
        new_edits: false,
        ..UpdateOptions::default()
    };
    // A conflict whose winner (1-bbb) is odd and whose loser is even.
    db.update(
        vec![
            doc(json!({"_id": "c", "_rev": "1-aaa", "n": 2})),
            doc(json!({"_id": "c", "_rev": "1-bbb", "n": 1})),
        ],
        opts,
    )
    .unwrap();
    put(
        &db,
        json!({"_id": "_design/f", "filters": {
            "even": "function(doc, req){ return doc.n % 2 == 0; }",
            "q": "function(doc, req){ return doc.n == Number(req.query.n); }",
            "boom": "function(doc){ if (doc.n == 3) throw new Error('boom'); return true; }"
        }, "views": {"odd": {"map": "function(doc){ if (doc.n % 2 == 1) emit(doc.n, null); }"}}}),
    );
    let rows: Vec<ChangeRow> = rows(&db)
        .into_iter()
        .filter(|r| !r.id.starts_with("_design/"))
        .collect();
    let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["d1", "d2", "d3", "d4", "c"]);
    let reader = db.reader().unwrap();
    let even = design
        .changes_filter(&reader, "f", "even", json!({}))
        .unwrap();
    let winners = even.judge(&reader, &rows, false).unwrap();
    assert_eq!(
        winners,
        vec![
            vec![false],
            vec![true],
            vec![false],
            vec![true],
            vec![false]
        ]
    );
    let leaves = even.judge(&reader, &rows, true).unwrap();
    assert_eq!(leaves[4], vec![false, true]);
    let q = design
        .changes_filter(&reader, "f", "q", json!({"query": {"n": "3"}}))
        .unwrap();
    let verdicts = q.judge(&reader, &rows, false).unwrap();
    assert_eq!(verdicts.iter().filter(|v| v[0]).count(), 1);
    assert!(verdicts[2][0]);
    let odd = design.view_filter(&reader, "f", "odd").unwrap();
    let verdicts = odd.judge(&reader, &rows, false).unwrap();
    assert_eq!(
        verdicts,
        vec![vec![true], vec![false], vec![true], vec![false], vec![true]]
    );
    let boom = design
        .changes_filter(&reader, "f", "boom", json!({}))
        .unwrap();
    match boom.judge(&reader, &rows, false) {
        Err(DesignError::Filter(e)) => assert_eq!(e.couch_error(), "Error"),
        other => panic!("{other:?}"),
    }
    // Nothing to judge: nothing run.
    assert_eq!(
        boom.judge(&reader, &[], false).unwrap(),
        Vec::<Vec<bool>>::new()
    );
}

#[test]
fn filters_are_checked_as_couchdb_checks_them() {
    let (_engine, db, design) = setup();
    let rev = put(
        &db,
        json!({"_id": "_design/f", "filters": {"syn": "function(doc){ if( }"}, "views": {}}),
    );
    put(&db, json!({"_id": "d", "n": 1}));
    let reader = db.reader().unwrap();
    let not_found = |r: Result<settee_design::ChangesFilter, DesignError>| match r {
        Err(DesignError::Db(settee_db::Error::NotFound(m))) => m.to_string(),
        Err(DesignError::Missing(m)) => m,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        not_found(design.changes_filter(&reader, "nope", "x", json!({}))),
        "missing"
    );
    assert_eq!(
        not_found(design.changes_filter(&reader, "f", "x", json!({}))),
        "missing json key: x"
    );
    assert_eq!(
        not_found(design.view_filter(&reader, "f", "x")),
        "missing json key: x"
    );
    // A function that does not compile fails when it first judges.
    let syn = design
        .changes_filter(&reader, "f", "syn", json!({}))
        .unwrap();
    let rows: Vec<ChangeRow> = rows(&db).into_iter().filter(|r| r.id == "d").collect();
    match syn.judge(&reader, &rows, false) {
        Err(DesignError::Filter(e)) => assert_eq!(e.couch_error(), "compilation_error"),
        other => panic!("{other:?}"),
    }
    drop(reader);
    db.put(Doc {
        id: "_design/f".into(),
        rev: Some(rev.parse().unwrap()),
        deleted: true,
        revisions: None,
        body: Body::empty(),
        atts: None,
    })
    .unwrap();
    let reader = db.reader().unwrap();
    assert_eq!(
        not_found(design.changes_filter(&reader, "f", "syn", json!({}))),
        "deleted"
    );
}

#[test]
fn large_batches_are_judged_in_several_calls() {
    let (_engine, db, design) = setup();
    put(
        &db,
        json!({"_id": "_design/f", "filters": {"even": "function(doc){ return doc.n % 2 == 0; }"}}),
    );
    // 12 documents of 300 KB: more than one call's worth (1 MiB).
    let filler = "x".repeat(300_000);
    for n in 0..12 {
        put(
            &db,
            json!({"_id": format!("d{n:02}"), "n": n, "filler": filler}),
        );
    }
    let rows: Vec<ChangeRow> = rows(&db)
        .into_iter()
        .filter(|r| !r.id.starts_with("_design/"))
        .collect();
    let reader = db.reader().unwrap();
    let even = design
        .changes_filter(&reader, "f", "even", json!({}))
        .unwrap();
    let verdicts = even.judge(&reader, &rows, false).unwrap();
    let expected: Vec<Vec<bool>> = (0..12).map(|n| vec![n % 2 == 0]).collect();
    assert_eq!(verdicts, expected);
}

#[test]
fn a_function_that_runs_out_of_time_is_not_run_for_every_document() {
    let engine = Engine::with_store(Arc::new(MemStore::new()), EngineOptions::default());
    let db = engine.create_db("slow").unwrap();
    let js = JsEngine::new(JsConfig {
        workers: 1,
        timeout: std::time::Duration::from_millis(100),
        ..JsConfig::default()
    })
    .unwrap();
    let design = Design::new(Arc::new(js), DesignConfig::default());
    put(
        &db,
        json!({"_id": "_design/v", "validate_doc_update": "function(){ while (true) {} }"}),
    );
    let docs: Vec<Doc> = (0..40)
        .map(|i| doc(json!({"_id": format!("d{i}")})))
        .collect();
    let v = design.validators(&db).unwrap().unwrap();
    let started = std::time::Instant::now();
    let results = block(v.validate_all(&db, &docs, true, &admin())).unwrap();
    // 40 timeouts would take 4 s on one worker.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    for r in results {
        match r {
            Err(DesignError::Refused(ValidateError::Js(e @ JsError::Timeout { .. }))) => {
                assert_eq!(e.couch_error(), "os_process_error")
            }
            other => panic!("{other:?}"),
        }
    }
}
