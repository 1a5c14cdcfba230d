//! After Hovercraft's `lightning()`: insert 100,000 documents in batches of
//! 1,000 through the embedded API (no HTTP, no JSON round trip), one batch
//! after another, every document with the same body, and print docs/s.
//!
//! By default each batch is a full commit (fsynced before the next batch is
//! sent). `--delayed` uses delayed commit instead, which is what Hovercraft's
//! `save_bulk` got from CouchDB (`couch_db:update_docs/2` without the
//! `full_commit` option).
//!
//! `cargo run --release -p settee-db --example lightning [-- DOCS BATCH] [--delayed]`

use std::time::Instant;

use serde_json::json;
use settee_core::doc::{Body, Doc};
use settee_db::{Durability, Engine, EngineOptions, UpdateOptions};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let delayed = std::env::args().any(|a| a == "--delayed");
    let (durability, mode) = if delayed {
        (Durability::Delayed, "delayed commit")
    } else {
        (Durability::Full, "full commit per batch")
    };
    let opts = UpdateOptions {
        durability: Some(durability),
        ..UpdateOptions::default()
    };
    let docs_total = args.first().copied().unwrap_or(100_000);
    let batch_docs = args.get(1).copied().unwrap_or(1_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let engine = Engine::open(dir.path(), EngineOptions::default()).expect("open engine");
    let db = engine.create_db("lightning").expect("create db");
    // As in Hovercraft's lightning(), every document has the same body.
    let body = Body::from_value(json!({"foo": "bar"})).expect("valid body");
    let started = Instant::now();
    let mut n = 0;
    while n < docs_total {
        let batch: Vec<Doc> = (n..(n + batch_docs).min(docs_total))
            .map(|i| Doc::with_body(format!("{i:010}"), body.clone()).expect("valid doc"))
            .collect();
        n += batch.len();
        let results = db.update(batch, opts).expect("update");
        assert!(results.iter().all(Result::is_ok), "every insert succeeds");
    }
    let secs = started.elapsed().as_secs_f64();
    let info = db.info().expect("info");
    assert_eq!(info.doc_count as usize, docs_total);
    println!(
        "lightning: {docs_total} docs in batches of {batch_docs}: {:.3} s, {:.0} docs/s ({mode})",
        secs,
        docs_total as f64 / secs
    );
}
