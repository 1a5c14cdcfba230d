//! The workloads, all through settee-db's public API (`Engine`, `Database`,
//! `Reader`), so every engine pays the same document-layer costs: revision
//! trees, postcard records, by-id + by-seq + body keys, group commit.
//!
//! Each workload returns an [`Outcome`]: operations, seconds, and the bytes
//! the process sent to storage meanwhile. Documents and ids are built before
//! the clock starts; opening the store and creating the database are not
//! timed.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::seq::IndexedRandom;
use rand::Rng;
use settee_core::doc::Doc;
use settee_db::{Database, Engine, EngineOptions, GetOptions, IdRange, UpdateOptions};

use crate::stores::EngineKind;

pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What one timed workload did.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub ops: u64,
    pub secs: f64,
    /// Bytes this process caused to be sent to the block device while the
    /// clock ran (`write_bytes` of `/proc/self/io`; includes the engines'
    /// background threads).
    pub written: u64,
}

impl Outcome {
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.secs
    }

    pub fn bytes_per_op(&self) -> f64 {
        self.written as f64 / self.ops.max(1) as f64
    }
}

/// `write_bytes` of `/proc/self/io` (0 where unavailable).
pub fn storage_write_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A running clock and I/O counter.
struct Meter {
    start: Instant,
    written: u64,
}

impl Meter {
    fn start() -> Meter {
        Meter {
            written: storage_write_bytes(),
            start: Instant::now(),
        }
    }

    fn stop(self, ops: u64) -> Outcome {
        let secs = self.start.elapsed().as_secs_f64();
        Outcome {
            ops,
            secs,
            written: storage_write_bytes().saturating_sub(self.written),
        }
    }
}

/// The workload sizes (`--quick` shrinks them).
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Documents of the bulk loads (and of the database read back).
    pub docs: usize,
    /// Documents per `update` call in the bulk loads.
    pub batch: usize,
    /// Point reads in the read scenario.
    pub reads: usize,
    /// How long each durable single-document scenario runs.
    pub durable_for: Duration,
    /// Writer threads of the concurrent durable scenario.
    pub threads: usize,
}

/// An engine with one database, open on a fresh directory.
pub struct Bench {
    engine: Engine,
    pub db: Database,
}

impl Bench {
    pub fn open(kind: EngineKind, dir: &Path) -> BenchResult<Bench> {
        let store = kind.open(dir)?;
        let engine = Engine::with_store(store, EngineOptions::default());
        let db = engine.create_db("bench")?;
        Ok(Bench { engine, db })
    }

    /// Stops the writer and closes the store.
    pub fn close(self) {
        self.engine.shutdown();
    }
}

fn body() -> serde_json::Value {
    serde_json::json!({"foo": "bar"})
}

/// Monotonic ids, as in the "lightning" benchmark: `0000000000`, `0000000001`, …
pub fn monotonic_ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{i:010}")).collect()
}

/// Random 16-hex-character ids (unique with overwhelming probability).
pub fn random_ids(n: usize) -> Vec<String> {
    let mut rng = rand::rng();
    (0..n)
        .map(|_| format!("{:016x}", rng.random::<u64>()))
        .collect()
}

/// Bulk load: `ids` in `update` calls of `batch` documents, each a full
/// (fsynced) commit.
pub fn bulk_load(db: &Database, ids: &[String], batch: usize) -> BenchResult<Outcome> {
    let batches: Vec<Vec<Doc>> = ids
        .chunks(batch)
        .map(|c| {
            c.iter()
                .map(|id| Doc::new(id.clone(), body()))
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<_, _>>()?;
    let meter = Meter::start();
    for docs in batches {
        let results = db.update(docs, UpdateOptions::default())?;
        if let Some(Err(f)) = results.iter().find(|r| r.is_err()) {
            return Err(format!("document refused: {f:?}").into());
        }
    }
    Ok(meter.stop(ids.len() as u64))
}

/// `threads` writers, each putting single documents (each a durable
/// commit; concurrent ones share group commits) for `run_for`.
pub fn durable_puts(db: &Database, threads: usize, run_for: Duration) -> BenchResult<Outcome> {
    let stop = Arc::new(AtomicBool::new(false));
    let meter = Meter::start();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || -> BenchResult<u64> {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    db.put(Doc::new(format!("w{t:03}-{n:010}"), body())?)?;
                    n += 1;
                }
                Ok(n)
            })
        })
        .collect();
    std::thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    let mut total = 0u64;
    for h in handles {
        total += h.join().map_err(|_| "writer thread panicked")??;
    }
    Ok(meter.stop(total))
}

/// `n` point reads of random existing ids, one thread, each through a new
/// snapshot reader (`db.reader()?.get(..)`, as a request handler does).
pub fn point_reads(db: &Database, ids: &[String], n: usize) -> BenchResult<Outcome> {
    let mut rng = rand::rng();
    let picks: Vec<&String> = (0..n).filter_map(|_| ids.choose(&mut rng)).collect();
    let opts = GetOptions::default();
    let meter = Meter::start();
    for id in &picks {
        let doc = db.reader()?.get(id, &opts)?;
        if doc.deleted {
            return Err(format!("{id} read back deleted").into());
        }
    }
    Ok(meter.stop(picks.len() as u64))
}

/// `_all_docs?include_docs=true` over the whole database; fails unless
/// exactly `expected` rows come back.
pub fn scan_all(db: &Database, expected: usize) -> BenchResult<Outcome> {
    let meter = Meter::start();
    let reader = db.reader()?;
    let mut rows = 0usize;
    let mut bytes = 0usize;
    reader.all_docs(&IdRange::default(), true, false, &mut |row| {
        rows += 1;
        bytes += row.doc.map_or(0, |d| d.body.len());
        true
    })?;
    let outcome = meter.stop(rows as u64);
    if rows != expected || bytes == 0 {
        return Err(
            format!("scan saw {rows} rows ({bytes} body bytes), expected {expected}").into(),
        );
    }
    Ok(outcome)
}
