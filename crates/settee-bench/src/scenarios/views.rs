//! Views (`/db/_design/{ddoc}/_view/{view}`). Every scenario first loads
//! 100,000 documents `{"type":T,"n":N}` (quick: 5,000; ten types `a`…`j`,
//! N in 0..1000) with `_bulk_docs`, outside the clock, into databases of
//! its own. Two views, each in its own design document: `map`
//! (`emit(doc.type, doc.n)`) and `sum` (`emit([doc.type, doc.n], doc.n)`
//! with `_sum`). Every timed answer is checked (row count, `total_rows`,
//! the reduced sum), so a fast wrong answer fails the scenario.
//!
//! - `view_build`: rows `view_build_map`, `view_build_sum`: documents
//!   indexed per second, timed from the PUT of the design document until
//!   the first `?limit=1` query (which waits for the index) answers. When
//!   the server listens on loopback here, the peak RSS of its process tree
//!   during the build (sampled every 100 ms; CouchDB's `couchjs` children
//!   included) is reported beside the row.
//! - `view_update`: on a built index (one database per view, so no other
//!   index is catching up meanwhile), 5 rounds (quick: 2) of: change 1,000
//!   documents (quick: 100; type and N change, so rows move), untimed, then
//!   time the `?limit=1` query that brings the index up to date. Rows
//!   `view_update_map`, `view_update_sum`: changed documents per second.
//! - `view_query`: on built indexes (default `update=true`; nothing writes,
//!   so no build is measured), requests per second for 5 s each (quick:
//!   0.4 s) with 1 and 32 clients: `view_query_key_N` (`?key="b"&limit=10`,
//!   the type rotating), `view_query_range_N` (`startkey="b"&endkey="c"
//!   &limit=100`, rotating) and `view_query_group_N` (`group_level=1` on
//!   `sum`: ten rows).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use serde_json::{json, Value};

use super::{cleanup, create_db, json_param, seq_id, Ctx, Outcome, ScenarioDef, Scope};
use crate::client::Conn;
use crate::cpu::{Measure, Measured};
use crate::error::BenchError;
use crate::load::{drive, BoxFuture, Limit, Req, ReqOp, Run};
use crate::rss::{server_pid, tree_rss_kib, PeakRss};
use crate::stats::Sample;
use crate::zipf::mix;

const fn d(name: &'static str, about: &'static str, run: super::RunFn) -> ScenarioDef {
    ScenarioDef {
        name,
        group: "views",
        about,
        scope: Scope::PerServer,
        run,
    }
}

pub const DEFS: [ScenarioDef; 3] = [
    d(
        "view_build",
        "build a map and a _sum view over 100k docs (docs/s, peak RSS)",
        build_boxed,
    ),
    d(
        "view_update",
        "bring built views up to date after 1000 changed docs",
        update_boxed,
    ),
    d(
        "view_query",
        "key, range and group_level=1 queries, 1 and 32 clients",
        query_boxed,
    ),
];

fn build_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(build(ctx))
}

fn update_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(update(ctx))
}

fn query_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(query(ctx))
}

/// Document types; `group_level=1` answers one row per type.
const TYPES: [&str; 10] = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
/// Documents per `_bulk_docs` request while loading.
const LOAD_BATCH: u64 = 1000;

/// Document `i`'s type after `edits` changes.
fn doc_type(i: u64, edits: u64) -> &'static str {
    TYPES[((i + edits) % TYPES.len() as u64) as usize]
}

/// Document `i`'s `n` after `edits` changes.
fn doc_n(i: u64, edits: u64) -> u64 {
    (mix(i) % 1000 + edits * 7) % 1000
}

/// Document `i` after `edits` changes, as JSON (with `_rev` for an edit).
fn doc_json(i: u64, edits: u64, rev: Option<&str>) -> String {
    let rev = rev
        .map(|r| format!(",\"_rev\":\"{r}\""))
        .unwrap_or_default();
    format!(
        "{{\"_id\":\"{}\"{rev},\"type\":\"{}\",\"n\":{}}}",
        seq_id(i),
        doc_type(i, edits),
        doc_n(i, edits)
    )
}

/// The `_sum` of every `n` when the first `edited` documents were changed once.
fn expected_sum(docs: u64, edited: u64) -> u64 {
    (0..docs).map(|i| doc_n(i, u64::from(i < edited))).sum()
}

/// One view, alone in its design document.
#[derive(Debug, Clone, Copy)]
struct View {
    /// Row-name suffix.
    label: &'static str,
    ddoc: &'static str,
    view: &'static str,
    map: &'static str,
    reduce: Option<&'static str>,
}

const MAP: View = View {
    label: "map",
    ddoc: "bench_map",
    view: "by_type",
    map: "function (doc) { if (doc.type) { emit(doc.type, doc.n); } }",
    reduce: None,
};

const SUM: View = View {
    label: "sum",
    ddoc: "bench_sum",
    view: "sum",
    map: "function (doc) { if (doc.type) { emit([doc.type, doc.n], doc.n); } }",
    reduce: Some("_sum"),
};

impl View {
    fn path(&self, db: &str, query: &str) -> String {
        format!("/{db}/_design/{}/_view/{}?{query}", self.ddoc, self.view)
    }

    fn ddoc_body(&self) -> Bytes {
        let mut v = json!({ "map": self.map });
        if let Some(r) = self.reduce {
            v["reduce"] = json!(r);
        }
        Bytes::from(json!({ "language": "javascript", "views": { self.view: v } }).to_string())
    }

    /// Checks the answer to `?limit=1` over `docs` documents summing to `sum`.
    fn check_first(&self, answer: &Value, docs: u64, sum: u64) -> Result<(), String> {
        let rows = answer["rows"].as_array().map_or(0, Vec::len);
        let (what, got, want) = if self.reduce.is_some() {
            (
                "reduced sum",
                answer["rows"][0]["value"].clone(),
                json!(sum),
            )
        } else {
            ("total_rows", answer["total_rows"].clone(), json!(docs))
        };
        if rows != 1 || got.as_f64() != want.as_f64() {
            return Err(format!(
                "{} ?limit=1: {rows} row(s), {what} {got}, want 1 row, {want}",
                self.label
            ));
        }
        Ok(())
    }
}

/// Operations timed one at a time (a build, a catch-up) with untimed work
/// between them: the run's wall and client CPU time are the sum of theirs.
#[derive(Debug, Default)]
pub(super) struct Timed {
    samples: Vec<Sample>,
    measured: Measured,
}

impl Timed {
    pub(super) async fn time<T>(
        &mut self,
        items: u64,
        op: impl Future<Output = Result<T, BenchError>>,
    ) -> Result<T, BenchError> {
        let m = Measure::start();
        let out = op.await?;
        let got = m.finish();
        self.samples.push(Sample {
            at_us: self.measured.wall.as_micros() as u64,
            latency_us: u32::try_from(got.wall.as_micros()).unwrap_or(u32::MAX),
            items: items as u32,
            ok: true,
        });
        self.measured.wall += got.wall;
        self.measured.cpu += got.cpu;
        Ok(out)
    }

    pub(super) fn run(self) -> Run {
        Run {
            samples: self.samples,
            measured: self.measured,
            error_messages: Vec::new(),
        }
    }
}

/// `GET path` answering 200 within `limit`, as JSON.
async fn get_json(conn: &mut Conn, path: &str, limit: Duration) -> Result<Value, BenchError> {
    let r = tokio::time::timeout(limit, conn.expect(Method::GET, path, Bytes::new(), &[200]))
        .await
        .map_err(|_| BenchError::Check(format!("GET {path}: no answer within {limit:?}")))??;
    Ok(r.json()?)
}

/// Posts `docs` (JSON objects) in one `_bulk_docs`; any per-document error fails.
pub(super) async fn post_docs(
    conn: &mut Conn,
    db: &str,
    docs: &[String],
) -> Result<(), BenchError> {
    let path = format!("/{db}/_bulk_docs");
    let body = Bytes::from(format!("{{\"docs\":[{}]}}", docs.join(",")));
    let r = conn.expect(Method::POST, &path, body, &[201, 202]).await?;
    if r.mentions_error() {
        return Err(BenchError::BadResponse {
            path,
            reason: r.text(),
        });
    }
    Ok(())
}

/// Loads documents `0..docs`, unedited.
async fn load(conn: &mut Conn, db: &str, docs: u64) -> Result<(), BenchError> {
    for lo in (0..docs).step_by(LOAD_BATCH as usize) {
        let batch: Vec<String> = (lo..(lo + LOAD_BATCH).min(docs))
            .map(|i| doc_json(i, 0, None))
            .collect();
        post_docs(conn, db, &batch).await?;
    }
    Ok(())
}

/// Changes documents `lo..hi` once (their current revisions from `_all_docs`).
async fn change(conn: &mut Conn, db: &str, lo: u64, hi: u64) -> Result<(), BenchError> {
    let path = format!(
        "/{db}/_all_docs?startkey={}&limit={}",
        json_param(&seq_id(lo)),
        hi - lo
    );
    let page = get_json(conn, &path, Duration::from_secs(60)).await?;
    let edits: Vec<String> = page["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let i = r["id"].as_str()?.parse().ok()?;
            Some(doc_json(i, 1, Some(r["value"]["rev"].as_str()?)))
        })
        .collect();
    if edits.len() as u64 != hi - lo {
        return Err(BenchError::BadResponse {
            path,
            reason: format!("{} of {} revisions", edits.len(), hi - lo),
        });
    }
    post_docs(conn, db, &edits).await
}

/// PUTs `view`'s design document and waits for its `?limit=1` answer,
/// which must count `docs` rows summing to `sum`.
async fn put_and_wait(
    ctx: &Ctx,
    conn: &mut Conn,
    db: &str,
    view: &View,
    docs: u64,
    sum: u64,
) -> Result<(), BenchError> {
    let ddoc = format!("/{db}/_design/{}", view.ddoc);
    conn.expect(Method::PUT, &ddoc, view.ddoc_body(), &[201, 202])
        .await?;
    wait_fresh(ctx, conn, db, view, docs, sum).await
}

/// The `?limit=1` query that brings `view` up to date, checked.
async fn wait_fresh(
    ctx: &Ctx,
    conn: &mut Conn,
    db: &str,
    view: &View,
    docs: u64,
    sum: u64,
) -> Result<(), BenchError> {
    let answer = get_json(conn, &view.path(db, "limit=1"), ctx.secs(900.0, 120.0)).await?;
    view.check_first(&answer, docs, sum)
        .map_err(BenchError::Check)
}

/// Creates a fresh database for `scenario`, loads `docs` documents, runs
/// `body`, and deletes the database whatever happened.
async fn with_db<T>(
    ctx: &Arc<Ctx>,
    scenario: &str,
    docs: u64,
    body: impl AsyncFnOnce(&mut Conn, &str) -> Result<T, BenchError>,
) -> Result<T, BenchError> {
    let db = ctx.db_name(scenario);
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &db).await?;
    let result = async {
        load(&mut conn, &db, docs).await?;
        body(&mut conn, &db).await
    }
    .await;
    cleanup(&ctx.target, &db).await;
    result
}

fn mib(kib: u64) -> u64 {
    (kib + 512) / 1024
}

async fn build(ctx: Arc<Ctx>) -> Result<Vec<Outcome>, BenchError> {
    let docs = ctx.scale(100_000, 5_000);
    let sum = expected_sum(docs, 0);
    let pid = server_pid(&ctx.target);
    with_db(&ctx, "view_build", docs, async |conn, db| {
        let mut out = Vec::new();
        for view in [MAP, SUM] {
            let before = pid.and_then(tree_rss_kib);
            let watch = pid.map(PeakRss::start);
            let mut timed = Timed::default();
            let built = timed
                .time(docs, put_and_wait(&ctx, conn, db, &view, docs, sum))
                .await;
            let peak = watch.and_then(PeakRss::finish);
            built?;
            ctx.progress.tick(docs);
            let name = format!("view_build_{}", view.label);
            let mut row =
                Outcome::from_run(&ctx, "view_build", name, "docs", timed.run()).with("docs", docs);
            if let (Some(before), Some(peak)) = (before, peak) {
                row = row
                    .with("rss_before_mib", mib(before))
                    .with("rss_peak_mib", mib(peak));
            }
            out.push(row);
        }
        Ok(out)
    })
    .await
}

async fn update(ctx: Arc<Ctx>) -> Result<Vec<Outcome>, BenchError> {
    let docs = ctx.scale(100_000, 5_000);
    let (rounds, changed) = (ctx.scale(5, 2), ctx.scale(1000, 100));
    let mut out = Vec::new();
    for view in [MAP, SUM] {
        let row = with_db(&ctx, "view_update", docs, async |conn, db| {
            put_and_wait(&ctx, conn, db, &view, docs, expected_sum(docs, 0)).await?;
            let mut timed = Timed::default();
            for r in 0..rounds {
                let (lo, hi) = (r * changed, (r + 1) * changed);
                change(conn, db, lo, hi).await?;
                let sum = expected_sum(docs, hi);
                timed
                    .time(changed, wait_fresh(&ctx, conn, db, &view, docs, sum))
                    .await?;
                ctx.progress.tick(changed);
            }
            let name = format!("view_update_{}", view.label);
            Ok(
                Outcome::from_run(&ctx, "view_update", name, "docs", timed.run())
                    .with("docs", docs)
                    .with("changed_per_round", changed),
            )
        })
        .await?;
        out.push(row);
    }
    Ok(out)
}

/// The query of kind `kind` for operation `i` (types rotate with `i`),
/// and the rows its answer must hold.
fn query_path(db: &str, kind: &str, i: u64) -> String {
    let t = |k: u64| json_param(TYPES[(k % TYPES.len() as u64) as usize]);
    match kind {
        "key" => MAP.path(db, &format!("key={}&limit=10", t(i))),
        // endkey is the next type, so the first 100 rows all have the start type.
        "range" => {
            let k = i % (TYPES.len() as u64 - 1);
            MAP.path(
                db,
                &format!("startkey={}&endkey={}&limit=100", t(k), t(k + 1)),
            )
        }
        _ => SUM.path(db, "group_level=1"),
    }
}

/// Checks one answer of `kind` (query for operation 0) before the load.
fn check_answer(kind: &str, answer: &Value, sum: u64) -> Result<(), String> {
    let rows = answer["rows"].as_array().cloned().unwrap_or_default();
    let want = match kind {
        "key" => 10,
        "range" => 100,
        _ => TYPES.len(),
    };
    let keys_ok = match kind {
        "group" => rows.iter().zip(TYPES).all(|(r, t)| r["key"] == json!([t])),
        _ => rows.iter().all(|r| r["key"] == TYPES[0]),
    };
    let total: f64 = rows.iter().filter_map(|r| r["value"].as_f64()).sum();
    if rows.len() != want || !keys_ok || (kind == "group" && total != sum as f64) {
        return Err(format!(
            "{kind} query: {} rows (want {want}), keys {}, values summing to {total}",
            rows.len(),
            if keys_ok { "as expected" } else { "wrong" },
        ));
    }
    Ok(())
}

async fn query(ctx: Arc<Ctx>) -> Result<Vec<Outcome>, BenchError> {
    let docs = ctx.scale(100_000, 5_000);
    let sum = expected_sum(docs, 0);
    with_db(&ctx, "view_query", docs, async |conn, db| {
        for view in [MAP, SUM] {
            put_and_wait(&ctx, conn, db, &view, docs, sum).await?;
        }
        let mut out = Vec::new();
        for kind in ["key", "range", "group"] {
            let answer = get_json(conn, &query_path(db, kind, 0), ctx.secs(60.0, 10.0)).await?;
            check_answer(kind, &answer, sum).map_err(BenchError::Check)?;
            for clients in [1usize, 32] {
                let db = db.to_string();
                let op = ReqOp(move |_w, i| {
                    Req::new(Method::GET, query_path(&db, kind, i), Bytes::new(), &[200])
                });
                let limit = Limit::time(ctx.secs(5.0, 0.4));
                let run = drive(&ctx.target, clients, limit, Arc::new(op), &ctx.progress).await?;
                let name = format!("view_query_{kind}_{clients}");
                out.push(
                    Outcome::from_run(&ctx, "view_query", name, "ops", run)
                        .with("clients", clients)
                        .with("docs", docs),
                );
            }
        }
        Ok(out)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_and_sums() {
        let d: Value = serde_json::from_str(&doc_json(3, 0, None)).unwrap();
        assert_eq!(d["_id"], seq_id(3));
        assert_eq!(d["type"], "d");
        assert_eq!(d["n"], doc_n(3, 0));
        let e: Value = serde_json::from_str(&doc_json(3, 1, Some("1-x"))).unwrap();
        assert_eq!(
            (e["_rev"].as_str(), e["type"].as_str()),
            (Some("1-x"), Some("e"))
        );
        assert_ne!(e["n"], d["n"], "an edit moves the row");
        assert_eq!(expected_sum(2, 0), doc_n(0, 0) + doc_n(1, 0));
        assert_eq!(expected_sum(2, 1), doc_n(0, 1) + doc_n(1, 0));
        assert!((0..1000).all(|i| doc_n(i, 0) < 1000 && doc_n(i, 1) < 1000));
    }

    #[test]
    fn design_documents_and_paths() {
        let v: Value = serde_json::from_slice(&SUM.ddoc_body()).unwrap();
        assert_eq!(v["views"]["sum"]["reduce"], "_sum");
        let m: Value = serde_json::from_slice(&MAP.ddoc_body()).unwrap();
        assert!(m["views"]["by_type"].get("reduce").is_none());
        assert_eq!(
            query_path("db", "key", 11),
            "/db/_design/bench_map/_view/by_type?key=%22b%22&limit=10"
        );
        assert_eq!(
            query_path("db", "range", 10),
            "/db/_design/bench_map/_view/by_type?startkey=%22b%22&endkey=%22c%22&limit=100"
        );
        assert_eq!(
            query_path("db", "group", 0),
            "/db/_design/bench_sum/_view/sum?group_level=1"
        );
    }

    #[test]
    fn answers_are_checked() {
        let map = json!({"total_rows": 5, "offset": 0, "rows": [{"key": "a"}]});
        assert!(MAP.check_first(&map, 5, 0).is_ok());
        assert!(MAP.check_first(&map, 6, 0).is_err());
        let sum = json!({"rows": [{"key": null, "value": 42}]});
        assert!(SUM.check_first(&sum, 5, 42).is_ok());
        assert!(SUM.check_first(&sum, 5, 41).is_err());
        assert!(SUM.check_first(&json!({"rows": []}), 5, 42).is_err());
        let key = json!({"rows": vec![json!({"key": "a", "value": 1}); 10]});
        assert!(check_answer("key", &key, 0).is_ok());
        let wrong = json!({"rows": vec![json!({"key": "b", "value": 1}); 10]});
        assert!(check_answer("key", &wrong, 0).is_err());
        let rows: Vec<Value> = TYPES
            .iter()
            .map(|t| json!({"key": [t], "value": 2}))
            .collect();
        assert!(check_answer("group", &json!({ "rows": rows }), 20).is_ok());
        assert!(check_answer("group", &json!({ "rows": rows }), 21).is_err());
    }
}
