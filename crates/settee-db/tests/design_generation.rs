//! `Database::design_generation`: it moves when a design document is
//! written or purged (by any write path), before the write is answered,
//! and not otherwise. (One test in a file of its own: generations are
//! striped process-wide by database id, and every engine numbers its
//! databases from the same start, so a test writing design documents in
//! parallel would move them.)

use std::sync::Arc;

use serde_json::json;
use settee_core::doc::{Body, Doc};
use settee_core::rev::Rev;
use settee_db::{Database, Durability, Engine, EngineOptions, UpdateOptions};
use settee_store::mem::MemStore;

fn doc(v: serde_json::Value) -> Doc {
    Doc::from_json(v, || "generated".into()).unwrap()
}

fn engine() -> Engine {
    Engine::with_store(Arc::new(MemStore::new()), EngineOptions::default())
}

fn update(db: &Database, docs: Vec<Doc>, new_edits: bool, durability: Durability) {
    let opts = UpdateOptions {
        new_edits,
        all_or_nothing: false,
        durability: Some(durability),
    };
    for r in db.update(docs, opts).unwrap() {
        r.unwrap();
    }
}

#[test]
fn design_generation_moves_with_design_documents_only() {
    let engine = engine();
    let db = engine.create_db("gens").unwrap();
    let mut seen = vec![db.design_generation()];
    let mut moved = |db: &Database, what: &str| {
        let g = db.design_generation();
        assert!(!seen.contains(&g), "{what}: generation {g} seen before");
        seen.push(g);
    };

    // Other writes leave it alone.
    let g = db.design_generation();
    db.put(doc(json!({"_id": "a", "v": 1}))).unwrap();
    db.put_local("_local/x", None, Some(Body::empty()), None)
        .unwrap()
        .unwrap();
    db.set_revs_limit(10).unwrap();
    db.ensure_full_commit().unwrap();
    assert_eq!(db.design_generation(), g);

    // A design document written: moved by the time the write returns.
    let rev = db.put(doc(json!({"_id": "_design/x", "v": 1}))).unwrap();
    moved(&db, "put");

    // A refused design-document write (a conflict) writes nothing.
    let g = db.design_generation();
    let r = db.update(
        vec![doc(json!({"_id": "_design/x", "v": 2}))],
        UpdateOptions::default(),
    );
    assert!(r.unwrap()[0].is_err());
    assert_eq!(db.design_generation(), g);

    // Deleted.
    let deleted = db
        .put(Doc {
            id: "_design/x".into(),
            rev: Some(rev),
            deleted: true,
            revisions: None,
            body: Body::empty(),
            atts: None,
        })
        .unwrap();
    moved(&db, "delete");

    // Replicated (new_edits=false).
    update(
        &db,
        vec![doc(json!({"_id": "_design/r", "_rev": "1-abc"}))],
        false,
        Durability::Delayed,
    );
    moved(&db, "new_edits=false");

    // Batch mode: moved once the buffer is applied.
    update(
        &db,
        vec![doc(json!({"_id": "_design/b"}))],
        true,
        Durability::Batch,
    );
    db.ensure_full_commit().unwrap();
    moved(&db, "batch");

    // Purged.
    let outcome = db
        .purge(vec![("_design/x".into(), vec![deleted.clone()])])
        .unwrap();
    assert_eq!(outcome.purged[0].1, vec![deleted]);
    moved(&db, "purge");

    // A purge that removes nothing does not count.
    let g = db.design_generation();
    db.purge(vec![("_design/x".into(), vec![Rev::new(9, "f00")])])
        .unwrap();
    assert_eq!(db.design_generation(), g);

    // A database created again under the same name is told apart by its
    // creation time, whatever its generation.
    let db = engine.create_db("again").unwrap();
    db.put(doc(json!({"_id": "_design/v"}))).unwrap();
    let (g, created) = (db.design_generation(), db.created_us());
    engine.delete_db("again").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let db = engine.create_db("again").unwrap();
    assert!(db.design_generation() != g || db.created_us() != created);
    assert_ne!(db.created_us(), created);
}
