//! The scenario table. Each scenario is one small module exposing one or
//! more [`ScenarioDef`]s; [`all`] lists them in run order. Adding a scenario
//! is one file plus one line in [`all`].
//!
//! Contract of a scenario: it creates its own fresh databases (unique names
//! from [`Ctx::db_name`]), deletes them afterwards, measures only its load
//! phase (setup and preloading are outside the clock), and returns one
//! [`Outcome`] (a result row) per thing it measured. `--quick` shrinks
//! every count and duration through [`Ctx::scale`]/[`Ctx::secs`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use serde::Serialize;

use crate::client::{Conn, Target};
use crate::error::BenchError;
use crate::load::{BoxFuture, Run};
use crate::progress::Progress;
use crate::stats::Summary;

pub mod all_docs_paging;
pub mod attachments;
pub mod batch_ok;
pub mod benchbulk;
pub mod bulk_docs;
pub mod concurrent_writers;
pub mod copy;
pub mod copy_tools;
pub mod fault_tolerance;
pub mod fsync_floor;
pub mod ids;
pub mod lightning;
pub mod mango;
pub mod random_reads;
pub mod replicate;
pub mod single_doc;
pub mod spike;
pub mod views;
pub mod ycsb;

/// Whether a scenario runs against every server or once per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Scope {
    PerServer,
    /// Not about a URL: the embedded engine, or a server the bench starts.
    Once,
}

pub type RunFn = fn(Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>>;

/// One entry of the scenario table.
#[derive(Clone, Copy)]
pub struct ScenarioDef {
    pub name: &'static str,
    /// chapter, concurrency, copy, views, mango, attachments, ycsb,
    /// embedded, fault.
    pub group: &'static str,
    pub about: &'static str,
    pub scope: Scope,
    pub run: RunFn,
}

impl std::fmt::Debug for ScenarioDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Every scenario, in run order.
pub fn all() -> Vec<ScenarioDef> {
    let mut v = vec![fsync_floor::DEF];
    v.extend(bulk_docs::DEFS);
    v.push(benchbulk::DEF);
    v.extend(single_doc::DEFS);
    v.push(batch_ok::DEF);
    v.push(ids::DEF);
    v.extend(concurrent_writers::DEFS);
    v.push(random_reads::DEF);
    v.push(spike::DEF);
    v.push(all_docs_paging::DEF);
    v.extend(views::DEFS);
    v.extend(mango::DEFS);
    v.extend(attachments::DEFS);
    v.push(copy::DEF);
    v.push(copy_tools::DEF);
    v.extend(replicate::DEFS);
    v.extend(ycsb::DEFS);
    v.push(lightning::DEF);
    v.push(fault_tolerance::DEF);
    v
}

/// Picks scenarios by name or group (`all` or empty = everything), in table order.
pub fn select(names: &[String]) -> Result<Vec<ScenarioDef>, BenchError> {
    let table = all();
    if names.is_empty() || names.iter().any(|n| n == "all") {
        return Ok(table);
    }
    for n in names {
        if !table.iter().any(|d| d.name == n || d.group == n) {
            return Err(BenchError::UnknownScenario(n.clone()));
        }
    }
    // A scenario's own name wins over a group of the same name (`copy`).
    let picks = |d: &ScenarioDef, n: &String| {
        n == d.name || (n == d.group && !table.iter().any(|t| t.name == n))
    };
    Ok(table
        .iter()
        .filter(|d| names.iter().any(|n| picks(d, n)))
        .copied()
        .collect())
}

/// What a scenario gets.
#[derive(Debug)]
pub struct Ctx {
    pub target: Arc<Target>,
    /// Display name of the server.
    pub server: String,
    pub quick: bool,
    pub progress: Progress,
    /// The settee binary to start for fault tolerance (`--spawn-settee`).
    pub settee_bin: Option<PathBuf>,
    /// Distinguishes this run's databases from any other's.
    pub run_tag: String,
    pub db_counter: AtomicU64,
    /// Where `fsync_floor` measures the disk (the data directory's disk).
    pub fsync_dir: PathBuf,
}

impl Ctx {
    /// `full`, or a quick-run value.
    pub fn scale(&self, full: u64, quick: u64) -> u64 {
        if self.quick {
            quick
        } else {
            full
        }
    }

    pub fn secs(&self, full: f64, quick: f64) -> Duration {
        Duration::from_secs_f64(if self.quick { quick } else { full })
    }

    /// A fresh, unique, valid database name for `scenario`.
    pub fn db_name(&self, scenario: &str) -> String {
        let n = self.db_counter.fetch_add(1, Ordering::Relaxed);
        format!("bench-{}-{}-{n}", scenario.replace('_', "-"), self.run_tag)
    }

    pub async fn conn(&self) -> Result<Conn, BenchError> {
        Conn::connect(&self.target).await
    }
}

/// One result row.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// Row name, e.g. `bulk_doc_1000`, `random_reads_32`.
    pub name: String,
    /// Scenario that produced it.
    pub scenario: String,
    pub server: String,
    /// What throughput counts: `docs` or `ops`.
    pub unit: &'static str,
    /// Whether failed requests are part of the experiment (spike, faults).
    pub errors_expected: bool,
    pub summary: Summary,
    pub error_messages: Vec<String>,
    /// Scenario-specific figures (file size, lost writes, timeline, …).
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Outcome {
    pub fn from_run(
        ctx: &Ctx,
        scenario: &str,
        name: impl Into<String>,
        unit: &'static str,
        run: Run,
    ) -> Outcome {
        Outcome {
            name: name.into(),
            scenario: scenario.to_string(),
            server: ctx.server.clone(),
            unit,
            errors_expected: false,
            summary: Summary::of(&run.samples, run.measured),
            error_messages: run.error_messages,
            extra: serde_json::Map::new(),
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Outcome {
        self.extra.insert(key.to_string(), value.into());
        self
    }
}

/// The document body every scenario writes unless it says otherwise.
pub const FOO_BAR: &str = r#"{"foo":"bar"}"#;

/// Sequential document ids: zero-padded, so they sort as they are made.
pub fn seq_id(i: u64) -> String {
    format!("{i:010}")
}

/// Random 32-hex ids (like CouchDB's `random` uuids), deterministic per `i`.
pub fn random_id(i: u64) -> String {
    let (a, b) = (crate::zipf::mix(i), crate::zipf::mix(i ^ 0xdead_beef_cafe));
    format!("{a:016x}{b:016x}")
}

/// `body` (a JSON object) with `"_id"` first.
pub fn with_id(id: &str, body: &str) -> String {
    let rest = body.trim_start().strip_prefix('{').unwrap_or("}");
    if rest.trim_start().starts_with('}') {
        format!("{{\"_id\":\"{id}\"}}")
    } else {
        format!("{{\"_id\":\"{id}\",{rest}")
    }
}

/// A `_bulk_docs` body for `ids`, every document `body`.
/// An op that POSTs pre-encoded `_bulk_docs` bodies of `batch` documents
/// each — `batches` of them, ids `id(0)`, `id(1)`, … — to `path`, request
/// `i` sending batch `i` (201 or 202 expected, the answer checked).
pub fn bulk_post_op(
    path: String,
    batches: u64,
    batch: u64,
    id: impl Fn(u64) -> String,
) -> crate::load::ReqOp<impl Fn(usize, u64) -> crate::load::Req + Send + Sync + 'static> {
    let bodies: Arc<Vec<Bytes>> = Arc::new(
        (0..batches)
            .map(|b| bulk_body((b * batch..(b + 1) * batch).map(&id), FOO_BAR))
            .collect(),
    );
    crate::load::ReqOp(move |_w, i| crate::load::Req {
        items: batch as u32,
        check_body: true,
        ..crate::load::Req::new(
            hyper::Method::POST,
            path.clone(),
            bodies[i as usize].clone(),
            &[201, 202],
        )
    })
}

pub fn bulk_body<I: IntoIterator<Item = String>>(ids: I, body: &str) -> Bytes {
    let mut s = String::from("{\"docs\":[");
    for (n, id) in ids.into_iter().enumerate() {
        if n > 0 {
            s.push(',');
        }
        s.push_str(&with_id(&id, body));
    }
    s.push_str("]}");
    Bytes::from(s)
}

/// `s` as a JSON string, percent-encoded for a query parameter.
pub fn json_param(s: &str) -> String {
    let json = serde_json::to_string(s).unwrap_or_default();
    percent_encoding::utf8_percent_encode(&json, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Creates `db` fresh (deleting a leftover of the same name).
pub async fn create_db(conn: &mut Conn, db: &str) -> Result<(), BenchError> {
    let r = conn
        .request(Method::PUT, &format!("/{db}"), Bytes::new(), &[])
        .await?;
    match r.status {
        201 | 202 => Ok(()),
        412 => {
            delete_db(conn, db).await?;
            conn.expect(Method::PUT, &format!("/{db}"), Bytes::new(), &[201, 202])
                .await
                .map(|_| ())
        }
        status => Err(BenchError::Status {
            method: "PUT".into(),
            path: format!("/{db}"),
            status,
            body: r.text(),
        }),
    }
}

pub async fn delete_db(conn: &mut Conn, db: &str) -> Result<(), BenchError> {
    conn.expect(
        Method::DELETE,
        &format!("/{db}"),
        Bytes::new(),
        &[200, 202, 404],
    )
    .await
    .map(|_| ())
}

/// Deletes `db` on a fresh connection, ignoring failures (cleanup after an
/// error must not hide the error).
pub async fn cleanup(target: &Arc<Target>, db: &str) {
    if let Ok(mut c) = Conn::connect(target).await {
        let _ = delete_db(&mut c, db).await;
    }
}

/// `GET /db` as JSON.
pub async fn db_info(conn: &mut Conn, db: &str) -> Result<serde_json::Value, BenchError> {
    let r = conn
        .expect(Method::GET, &format!("/{db}"), Bytes::new(), &[200])
        .await?;
    Ok(r.json()?)
}

/// Inserts `n` documents (ids from `id`, body `body`) in batches of 1,000,
/// outside any measurement; fails on any per-document error.
pub async fn preload(
    conn: &mut Conn,
    db: &str,
    n: u64,
    id: fn(u64) -> String,
    body: &str,
) -> Result<(), BenchError> {
    let path = format!("/{db}/_bulk_docs");
    let mut i = 0;
    while i < n {
        let end = (i + 1000).min(n);
        let r = conn
            .expect(
                Method::POST,
                &path,
                bulk_body((i..end).map(id), body),
                &[201, 202],
            )
            .await?;
        if r.mentions_error() {
            return Err(BenchError::BadResponse {
                path,
                reason: r.text(),
            });
        }
        i = end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_and_ids() {
        assert_eq!(with_id("a", FOO_BAR), r#"{"_id":"a","foo":"bar"}"#);
        assert_eq!(with_id("a", "{}"), r#"{"_id":"a"}"#);
        let b = bulk_body(["1".to_string(), "2".to_string()], FOO_BAR);
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["docs"][1]["_id"], "2");
        assert_eq!(v["docs"][1]["foo"], "bar");
        assert!(seq_id(9) < seq_id(10));
        assert_eq!(random_id(3).len(), 32);
        assert_ne!(random_id(3), random_id(4));
        assert_eq!(json_param("0001"), "%220001%22");
    }

    #[test]
    fn selection_by_name_and_group() {
        let names: Vec<_> = all().iter().map(|d| d.name).collect();
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "scenario names are unique");
        assert_eq!(select(&[]).unwrap().len(), names.len());
        let ycsb = select(&["ycsb".to_string()]).unwrap();
        assert_eq!(ycsb.len(), 6);
        let one = select(&["benchbulk".to_string()]).unwrap();
        assert_eq!(one.len(), 1);
        let att = select(&["attachments".to_string()]).unwrap();
        assert_eq!(
            att.iter().map(|d| d.name).collect::<Vec<_>>(),
            ["att_small", "att_large"]
        );
        let copy = select(&["copy".to_string()]).unwrap();
        assert_eq!(copy.iter().map(|d| d.name).collect::<Vec<_>>(), ["copy"]);
        assert!(select(&["nope".to_string()]).is_err());
    }
}
