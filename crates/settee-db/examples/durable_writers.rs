//! Single-document full-commit writes from N concurrent writers (default
//! 1 and 32): the group-commit benchmark. Prints durable docs/s for each N.
//!
//! `cargo run --release -p settee-db --example durable_writers [-- SECONDS N...]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use settee_core::doc::Doc;
use settee_db::{Engine, EngineOptions};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let secs = args.first().copied().unwrap_or(3);
    let writer_counts: Vec<u64> = if args.len() > 1 {
        args[1..].to_vec()
    } else {
        vec![1, 32]
    };
    for writers in writer_counts {
        let dir = tempfile::tempdir().expect("temp dir");
        let engine = Engine::open(dir.path(), EngineOptions::default()).expect("open engine");
        let db = engine.create_db("writers").expect("create db");
        let done = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + Duration::from_secs(secs);
        let started = Instant::now();
        let threads: Vec<_> = (0..writers)
            .map(|w| {
                let (db, done) = (db.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut i = 0u64;
                    while Instant::now() < deadline {
                        let doc = Doc::new(format!("w{w:04}-{i:08}"), json!({"foo": "bar"}))
                            .expect("valid doc");
                        db.put(doc).expect("durable put");
                        i += 1;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("writer thread");
        }
        let elapsed = started.elapsed().as_secs_f64();
        let n = done.load(Ordering::Relaxed);
        println!("durable single-doc writes, {writers} writers: {n} docs in {elapsed:.2} s = {:.0} docs/s", n as f64 / elapsed);
    }
}
