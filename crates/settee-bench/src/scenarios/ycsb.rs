//! YCSB-style workloads over HTTP, 32 clients, 5 s each (quick: 0.3 s), on
//! 50,000 preloaded records (quick: 1,000) of one 100-byte field, keys
//! chosen zipfian (theta 0.99, scrambled) unless said otherwise:
//! - A: 50% read, 50% update; B: 95% read, 5% update; C: 100% read;
//! - D: 95% read of recent records ("latest" distribution), 5% insert;
//! - E: 95% short range scans (`_all_docs?include_docs=true`, 1–100 rows
//!   from a zipfian start key), 5% insert;
//! - F: 50% read, 50% read-modify-write (GET, then PUT with that rev).
//!
//! CouchDB updates need the current rev: updates use a per-record rev
//! cache; a 409 (another client updated the hot record first) re-reads the
//! rev and retries after a short random pause, and is counted in
//! `conflicts`, not as an error. An update still conflicting after
//! `RETRIES_MAX` tries is given up and counted in `aborted` (contention on
//! a hot record is the workload, not a server failure); it completes no
//! operation. A read of a record whose insert is still in flight (D) is a
//! 404 counted in `misses`. Throughput counts operations.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use hyper::Method;
use rand::Rng;
use serde::Deserialize;

use super::{bulk_body, cleanup, create_db, json_param, seq_id, Ctx, Outcome, ScenarioDef, Scope};
use crate::client::Conn;
use crate::error::BenchError;
use crate::load::{drive, BoxFuture, Limit, Op};
use crate::zipf::{scramble, SplitMix, Zipf, THETA};

const CLIENTS: usize = 32;
const RETRIES_MAX: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    A,
    B,
    C,
    D,
    E,
    F,
}

macro_rules! def {
    ($name:literal, $w:expr, $about:literal, $f:ident) => {
        fn $f(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
            Box::pin(run(ctx, $name, $w))
        }
    };
}
def!("ycsb_a", Workload::A, "", run_a);
def!("ycsb_b", Workload::B, "", run_b);
def!("ycsb_c", Workload::C, "", run_c);
def!("ycsb_d", Workload::D, "", run_d);
def!("ycsb_e", Workload::E, "", run_e);
def!("ycsb_f", Workload::F, "", run_f);

const fn d(name: &'static str, about: &'static str, run: super::RunFn) -> ScenarioDef {
    ScenarioDef {
        name,
        group: "ycsb",
        about,
        scope: Scope::PerServer,
        run,
    }
}

pub const DEFS: [ScenarioDef; 6] = [
    d("ycsb_a", "YCSB A: 50% read, 50% update, zipfian", run_a),
    d("ycsb_b", "YCSB B: 95% read, 5% update, zipfian", run_b),
    d("ycsb_c", "YCSB C: read only, zipfian", run_c),
    d("ycsb_d", "YCSB D: 95% read latest, 5% insert", run_d),
    d(
        "ycsb_e",
        "YCSB E: 95% short _all_docs ranges, 5% insert",
        run_e,
    ),
    d("ycsb_f", "YCSB F: 50% read, 50% read-modify-write", run_f),
];

#[derive(Deserialize)]
struct RevReply {
    #[serde(default)]
    rev: Option<String>,
    #[serde(default, rename = "_rev")]
    doc_rev: Option<String>,
}

struct Ycsb {
    workload: Workload,
    db: String,
    records: u64,
    zipf: Zipf,
    revs: Vec<Mutex<String>>,
    inserted: AtomicU64,
    conflicts: AtomicU64,
    misses: AtomicU64,
    aborted: AtomicU64,
    field: String,
    seed: u64,
}

impl Ycsb {
    fn doc_path(&self, key: u64) -> String {
        format!("/{}/{}", self.db, seq_id(key))
    }

    fn body(&self, rev: Option<&str>) -> Bytes {
        Bytes::from(match rev {
            Some(r) => format!(r#"{{"_rev":"{r}","field0":"{}"}}"#, self.field),
            None => format!(r#"{{"field0":"{}"}}"#, self.field),
        })
    }

    async fn read(&self, conn: &mut Conn, key: u64) -> Result<Option<String>, BenchError> {
        let path = self.doc_path(key);
        let r = conn.get(&path).await?;
        match r.status {
            200 => Ok(r.json::<RevReply>()?.doc_rev),
            404 if self.workload == Workload::D => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
            status => Err(BenchError::Status {
                method: "GET".into(),
                path,
                status,
                body: r.text(),
            }),
        }
    }

    /// PUT with `rev`; on 409 re-read and retry. `cache`: keep revs in `self.revs`.
    /// Whether the update went through (false: aborted after `RETRIES_MAX` conflicts).
    async fn update(&self, conn: &mut Conn, key: u64, cache: bool) -> Result<bool, BenchError> {
        let path = self.doc_path(key);
        let mut rev = if cache {
            self.revs[key as usize]
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        } else {
            self.read(conn, key).await?.unwrap_or_default()
        };
        for _ in 0..RETRIES_MAX {
            let r = conn
                .request(Method::PUT, &path, self.body(Some(&rev)), &[])
                .await?;
            match r.status {
                201 | 202 => {
                    if cache {
                        if let Some(new) = r.json::<RevReply>()?.rev {
                            *self.revs[key as usize]
                                .lock()
                                .unwrap_or_else(|p| p.into_inner()) = new;
                        }
                    }
                    return Ok(true);
                }
                409 => {
                    let n = self.conflicts.fetch_add(1, Ordering::Relaxed);
                    let pause_us = crate::zipf::mix(n ^ key) % 500;
                    tokio::time::sleep(std::time::Duration::from_micros(pause_us)).await;
                    rev = self.read(conn, key).await?.unwrap_or_default();
                }
                status => {
                    return Err(BenchError::Status {
                        method: "PUT".into(),
                        path,
                        status,
                        body: r.text(),
                    })
                }
            }
        }
        self.aborted.fetch_add(1, Ordering::Relaxed);
        Ok(false)
    }

    async fn insert(&self, conn: &mut Conn) -> Result<(), BenchError> {
        let key = self.records + self.inserted.fetch_add(1, Ordering::Relaxed);
        let path = self.doc_path(key);
        conn.expect(Method::PUT, &path, self.body(None), &[201, 202])
            .await
            .map(|_| ())
    }

    async fn scan(&self, conn: &mut Conn, start: u64, len: u64) -> Result<(), BenchError> {
        let path = format!(
            "/{}/_all_docs?include_docs=true&limit={len}&startkey={}",
            self.db,
            json_param(&seq_id(start))
        );
        conn.expect(Method::GET, &path, Bytes::new(), &[200])
            .await
            .map(|_| ())
    }

    async fn op(&self, conn: &mut Conn, worker: usize, i: u64) -> Result<u32, BenchError> {
        let mut rng = SplitMix(self.seed ^ ((worker as u64) << 48) ^ i);
        let roll: u32 = rng.random_range(0..100);
        let zipf_key = |rng: &mut SplitMix| scramble(self.zipf.sample(rng), self.records);
        match self.workload {
            Workload::A | Workload::B => {
                let key = zipf_key(&mut rng);
                let reads = if self.workload == Workload::A { 50 } else { 95 };
                if roll < reads {
                    self.read(conn, key).await?;
                } else if !self.update(conn, key, true).await? {
                    return Ok(0);
                }
            }
            Workload::C => {
                self.read(conn, zipf_key(&mut rng)).await?;
            }
            Workload::D => {
                if roll < 95 {
                    let newest = self.records + self.inserted.load(Ordering::Relaxed) - 1;
                    let key = newest.saturating_sub(self.zipf.sample(&mut rng));
                    self.read(conn, key).await?;
                } else {
                    self.insert(conn).await?;
                }
            }
            Workload::E => {
                if roll < 95 {
                    let len = rng.random_range(1..=100);
                    self.scan(conn, zipf_key(&mut rng), len).await?;
                } else {
                    self.insert(conn).await?;
                }
            }
            Workload::F => {
                let key = zipf_key(&mut rng);
                if roll < 50 {
                    self.read(conn, key).await?;
                } else if !self.update(conn, key, false).await? {
                    return Ok(0);
                }
            }
        }
        Ok(1)
    }
}

impl Op for Ycsb {
    fn run<'a>(
        &'a self,
        conn: &'a mut Conn,
        worker: usize,
        i: u64,
    ) -> BoxFuture<'a, Result<u32, BenchError>> {
        Box::pin(self.op(conn, worker, i))
    }
}

#[derive(Deserialize)]
struct BulkRow {
    id: String,
    rev: Option<String>,
}

async fn run(
    ctx: Arc<Ctx>,
    name: &'static str,
    workload: Workload,
) -> Result<Vec<Outcome>, BenchError> {
    let records = ctx.scale(50_000, 1_000);
    let db = ctx.db_name(name);
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &db).await?;
    let result = async {
        let field = "x".repeat(100);
        let body = format!(r#"{{"field0":"{field}"}}"#);
        let revs: Vec<Mutex<String>> = (0..records).map(|_| Mutex::new(String::new())).collect();
        let path = format!("/{db}/_bulk_docs");
        let mut i = 0;
        while i < records {
            let end = (i + 1000).min(records);
            let r = conn
                .expect(
                    Method::POST,
                    &path,
                    bulk_body((i..end).map(seq_id), &body),
                    &[201, 202],
                )
                .await?;
            let rows: Vec<BulkRow> = r.json()?;
            for row in rows {
                let (Ok(k), Some(rev)) = (row.id.parse::<u64>(), row.rev) else {
                    return Err(BenchError::BadResponse {
                        path: path.clone(),
                        reason: r.text(),
                    });
                };
                if let Some(slot) = revs.get(k as usize) {
                    *slot.lock().unwrap_or_else(|p| p.into_inner()) = rev;
                }
            }
            i = end;
        }
        let op = Arc::new(Ycsb {
            workload,
            db: db.clone(),
            records,
            zipf: Zipf::new(records, THETA)
                .ok_or_else(|| BenchError::Check("zipf parameters".into()))?,
            revs,
            inserted: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            aborted: AtomicU64::new(0),
            field,
            seed: 0x5eed_0000 + workload as u64,
        });
        let limit = Limit::time(ctx.secs(5.0, 0.3));
        let run = drive(&ctx.target, CLIENTS, limit, op.clone(), &ctx.progress).await?;
        Ok(vec![Outcome::from_run(&ctx, name, name, "ops", run)
            .with("clients", CLIENTS)
            .with("records", records)
            .with("conflicts", op.conflicts.load(Ordering::Relaxed))
            .with("misses", op.misses.load(Ordering::Relaxed))
            .with("aborted", op.aborted.load(Ordering::Relaxed))
            .with("inserted", op.inserted.load(Ordering::Relaxed))])
    }
    .await;
    cleanup(&ctx.target, &db).await;
    result
}
