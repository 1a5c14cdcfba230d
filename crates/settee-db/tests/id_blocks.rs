//! The live counts per block of ids behind `_all_docs`' `offset`: exact
//! after random inserts, deletions, recreations and purges across many
//! groups and block cuts, after appends in id order, after a restart, for
//! a database written before the blocks existed, and with every block's
//! count written beside the documents it counts.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use settee_core::doc::Doc;
use settee_core::rev::Rev;
use settee_db::{keys, Database, Engine, EngineOptions, UpdateOptions};
use settee_store::mem::MemStore;
use settee_store::{Batch, Keyspace, Store};

fn doc(v: serde_json::Value) -> Doc {
    Doc::from_json(v, || "generated".into()).unwrap()
}

/// The model: id → (current rev, live).
type Model = BTreeMap<String, (Rev, bool)>;

/// `live_before` against the model at ids, between ids and at both ends.
fn check(db: &Database, model: &Model, rng: &mut StdRng) {
    let reader = db.reader().unwrap();
    let live: Vec<&String> = model.iter().filter(|(_, v)| v.1).map(|(k, _)| k).collect();
    let mut probes: Vec<String> = vec![String::new(), "~".into(), "k".into()];
    for _ in 0..60 {
        let k = format!("k{:06}", rng.random_range(0..40_000u32));
        probes.push(format!("{k}x"));
        probes.push(k);
    }
    for p in probes {
        let below = live.partition_point(|id| id.as_str() < p.as_str()) as u64;
        let upto = live.partition_point(|id| id.as_str() <= p.as_str()) as u64;
        assert_eq!(reader.live_before(&p, false).unwrap(), Some(below), "{p}");
        assert_eq!(
            reader.live_before(&p, true).unwrap(),
            Some(live.len() as u64 - upto),
            "{p} descending"
        );
    }
}

/// Random groups of new documents, updates, deletions and recreations.
fn churn(db: &Database, model: &mut Model, rng: &mut StdRng, docs: usize) {
    let mut batch = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..docs {
        let id = format!("k{:06}", rng.random_range(0..40_000u32));
        if !seen.insert(id.clone()) {
            continue;
        }
        let mut body = json!({"_id": id, "n": rng.random::<u32>()});
        if let Some((rev, live)) = model.get(&id) {
            body["_rev"] = json!(rev.to_string());
            if *live && rng.random_bool(0.5) {
                body["_deleted"] = json!(true);
            }
        }
        batch.push(doc(body));
    }
    write(db, model, batch);
}

/// Writes `docs` in one update call and records them in the model.
fn write(db: &Database, model: &mut Model, docs: Vec<Doc>) {
    let ids: Vec<(String, bool)> = docs.iter().map(|d| (d.id.clone(), d.deleted)).collect();
    let results = db.update(docs, UpdateOptions::default()).unwrap();
    for ((id, deleted), r) in ids.into_iter().zip(results) {
        model.insert(id, (r.unwrap(), !deleted));
    }
}

#[test]
fn offsets_stay_exact_through_churn_cuts_purges_and_restarts() {
    let store = Arc::new(MemStore::new());
    let opts = EngineOptions::default();
    let e = Engine::with_store(store.clone(), opts.clone());
    let db = e.create_db("d").unwrap();
    let mut rng = StdRng::seed_from_u64(17);
    let mut model = Model::new();
    // One big group first (one block cut into many), then smaller ones.
    churn(&db, &mut model, &mut rng, 20_000);
    check(&db, &model, &mut rng);
    for round in 0..30 {
        churn(&db, &mut model, &mut rng, 1 + round * 97);
        if round % 5 == 0 {
            check(&db, &model, &mut rng);
        }
    }
    // Purge a range of documents: blocks empty and go.
    let doomed: Vec<(String, Vec<Rev>)> = model
        .range("k010000".to_string().."k020000".to_string())
        .map(|(id, (rev, _))| (id.clone(), vec![rev.clone()]))
        .collect();
    db.purge(doomed.clone()).unwrap();
    for (id, _) in doomed {
        model.remove(&id);
    }
    check(&db, &model, &mut rng);
    assert_blocks_match(store.as_ref(), 1);
    e.shutdown();
    drop(db);
    drop(e);
    // A new engine reads the blocks back and keeps them.
    let e = Engine::with_store(store.clone(), opts);
    let db = e.db("d").unwrap();
    check(&db, &model, &mut rng);
    churn(&db, &mut model, &mut rng, 3000);
    check(&db, &model, &mut rng);
    assert_blocks_match(store.as_ref(), 1);
}

/// Documents appended in id order, as bulk loads write them (with some
/// deleted), 1,000 per group, then 22,000 in one: each full block is
/// followed by a new one started at the next appended id, never cut.
#[test]
fn offsets_stay_exact_through_appends_in_id_order() {
    let store = Arc::new(MemStore::new());
    let e = Engine::with_store(store.clone(), EngineOptions::default());
    let db = e.create_db("d").unwrap();
    let mut rng = StdRng::seed_from_u64(29);
    let mut model = Model::new();
    for group in 0..36u32 {
        let docs: Vec<Doc> = (0..1000u32)
            .map(|i| {
                let n = group * 1000 + i;
                doc(json!({"_id": format!("k{n:06}"), "_deleted": n % 7 == 3}))
            })
            .collect();
        write(&db, &mut model, docs);
        if group % 6 == 5 {
            check(&db, &model, &mut rng);
        }
    }
    // One group far past a block's size, in order after the rest.
    let docs: Vec<Doc> = (36_000..58_000u32)
        .map(|n| doc(json!({"_id": format!("k{n:06}"), "_deleted": n % 5 == 0})))
        .collect();
    write(&db, &mut model, docs);
    // Appends started a new block at every 1,024th record (`BLOCK`) (no cut, which
    // would leave chunks of other sizes at the ends).
    let blocks = stored_blocks(store.as_ref(), 1);
    assert_eq!(blocks.len(), 58_000 / 1024 + 1);
    for (i, (b, (records, _))) in blocks.iter().enumerate() {
        let expect = if i + 1 == blocks.len() {
            58_000 % 1024
        } else {
            1024
        };
        assert_eq!(
            *records,
            expect,
            "block {i} at {:?}",
            String::from_utf8_lossy(b)
        );
    }
    // Purging the last documents forgets the last block's last id: later
    // appends land in it until it is cut, in the next group.
    let doomed: Vec<(String, Vec<Rev>)> = (57_990..58_000u32)
        .map(|n| {
            let id = format!("k{n:06}");
            let rev = model[&id].0.clone();
            (id, vec![rev])
        })
        .collect();
    db.purge(doomed.clone()).unwrap();
    for (id, _) in doomed {
        model.remove(&id);
    }
    for group in 0..9u32 {
        let docs: Vec<Doc> = (0..1000u32)
            .map(|i| doc(json!({"_id": format!("k{:06}", 60_000 + group * 1000 + i)})))
            .collect();
        write(&db, &mut model, docs);
    }
    churn(&db, &mut model, &mut rng, 10);
    check(&db, &model, &mut rng);
    assert_blocks_match(store.as_ref(), 1);
}

#[test]
fn blocks_are_built_for_a_database_written_before_they_existed() {
    let store = Arc::new(MemStore::new());
    let opts = EngineOptions::default();
    let e = Engine::with_store(store.clone(), opts.clone());
    let db = e.create_db("old").unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    let mut model = Model::new();
    churn(&db, &mut model, &mut rng, 12_000);
    e.shutdown();
    drop(db);
    drop(e);
    let (lo, hi) = keys::id_block_range(1);
    let mut b = Batch::new();
    b.delete_range(Keyspace::Meta, lo, hi);
    store.write(&b, true).unwrap();
    let e = Engine::with_store(store.clone(), opts);
    let db = e.db("old").unwrap();
    check(&db, &model, &mut rng); // the old count, by scanning
    churn(&db, &mut model, &mut rng, 10);
    check(&db, &model, &mut rng); // from the blocks the write built
    assert_blocks_match(store.as_ref(), 1);
}

/// The stored blocks of `db`: boundary, (records, live).
fn stored_blocks(store: &MemStore, db: u64) -> Vec<(Vec<u8>, (u64, u64))> {
    let (lo, hi) = keys::id_block_range(db);
    let mut blocks = Vec::new();
    store
        .snapshot()
        .scan(Keyspace::Meta, &lo, &hi, false, &mut |k, v| {
            let counts = settee_db::records::decode(v, "id block").unwrap();
            blocks.push((keys::id_block_boundary(k).to_vec(), counts));
            true
        })
        .unwrap();
    blocks
}

/// Every stored block's counts are those of the records in its range, and
/// the first block starts at the empty id.
fn assert_blocks_match(store: &MemStore, db: u64) {
    let snap = store.snapshot();
    let blocks = stored_blocks(store, db);
    assert!(blocks.len() > 2, "the blocks were cut");
    assert!(
        blocks[0].0.is_empty(),
        "the first block starts at the empty id"
    );
    for (i, (b, v)) in blocks.iter().enumerate() {
        let from = [&db.to_be_bytes()[..], b].concat();
        let to = match blocks.get(i + 1) {
            Some((next, _)) => [&db.to_be_bytes()[..], next].concat(),
            None => keys::db_range(db).1,
        };
        let (mut records, mut live) = (0u64, 0u64);
        snap.scan(Keyspace::Docs, &from, &to, false, &mut |_, v| {
            records += 1;
            live += u64::from(
                settee_db::records::DocRecordHead::decode(v)
                    .unwrap()
                    .is_live(),
            );
            true
        })
        .unwrap();
        assert_eq!(
            *v,
            (records, live),
            "block {:?}",
            String::from_utf8_lossy(b)
        );
        assert!(
            records <= 2 * 1024 + 4096,
            "block {i} holds {records} records"
        );
    }
}
