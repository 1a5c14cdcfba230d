//! Replication by the server's own replicator (`POST /_replicate` with
//! local database names, as CouchDB 3.4 and Settee both accept them):
//! - `replicate_100k`: a one-shot replication of 100,000 documents
//!   (quick: 5,000) into a new database, timed from the request to its
//!   answer (the replication is done when `_replicate` answers);
//! - `replicate_catchup`: a continuous replication that has caught up; then
//!   10,000 new documents (quick: 1,000) are written to the source in
//!   `_bulk_docs` batches of 1,000, timed from the first write until the
//!   target holds them all (the writes are inside the measurement, for
//!   both servers).
//!
//! Throughput is documents replicated per second. The target's document
//! count is checked; the continuous job is cancelled afterwards.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;

use super::{
    cleanup, create_db, db_info, preload, seq_id, Ctx, Outcome, ScenarioDef, Scope, FOO_BAR,
};
use crate::cpu::Measure;
use crate::error::BenchError;
use crate::load::{send, timed, BoxFuture, ErrorLog, Req, Run};

pub const DEFS: [ScenarioDef; 2] = [
    ScenarioDef {
        name: "replicate_100k",
        group: "replication",
        about: "one-shot POST /_replicate of 100k docs into a new db (the server's own replicator)",
        scope: Scope::PerServer,
        run: run_once_boxed,
    },
    ScenarioDef {
        name: "replicate_catchup",
        group: "replication",
        about: "continuous replication catching up with 10k docs written to its source",
        scope: Scope::PerServer,
        run: run_catchup_boxed,
    },
];

/// How long a replication may take before the run fails.
const WAIT_MAX: Duration = Duration::from_secs(1800);

fn run_once_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run_once(ctx))
}

fn run_catchup_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run_catchup(ctx))
}

fn body(src: &str, dst: &str, continuous: bool, cancel: bool) -> Bytes {
    Bytes::from(
        serde_json::json!({
            "source": src,
            "target": dst,
            "create_target": true,
            "continuous": continuous,
            "cancel": cancel,
        })
        .to_string(),
    )
}

async fn doc_count(ctx: &Ctx, db: &str) -> Result<u64, BenchError> {
    let mut conn = ctx.conn().await?;
    match db_info(&mut conn, db).await {
        Ok(info) => Ok(info["doc_count"].as_u64().unwrap_or(0)),
        // Not created yet by the replicator.
        Err(BenchError::Status { status: 404, .. }) => Ok(0),
        Err(e) => Err(e),
    }
}

/// Polls the target until it holds `n` documents.
async fn wait_for(ctx: &Ctx, db: &str, n: u64) -> Result<(), BenchError> {
    let t0 = Instant::now();
    loop {
        let have = doc_count(ctx, db).await?;
        if have >= n {
            return Ok(());
        }
        if t0.elapsed() > WAIT_MAX {
            return Err(BenchError::Check(format!(
                "replication: the target holds {have} of {n} documents after {} s",
                WAIT_MAX.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn run_once(ctx: Arc<Ctx>) -> Result<Vec<Outcome>, BenchError> {
    let docs = ctx.scale(100_000, 5_000);
    let (src, dst) = (ctx.db_name("rep-src"), ctx.db_name("rep-dst"));
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &src).await?;
    let result = async {
        preload(&mut conn, &src, docs, seq_id, FOO_BAR).await?;
        let errors = ErrorLog::default();
        let measure = Measure::start();
        let req = Req {
            items: u32::try_from(docs).unwrap_or(u32::MAX),
            check_body: true,
            ..Req::new(
                Method::POST,
                "/_replicate".into(),
                body(&src, &dst, false, false),
                &[200],
            )
        };
        let sample = timed(measure.started(), &errors, send(&mut conn, req)).await;
        ctx.progress.tick(u64::from(sample.items));
        let run = Run {
            samples: vec![sample],
            measured: measure.finish(),
            error_messages: errors.take(),
        };
        let copied = doc_count(&ctx, &dst).await?;
        if copied != docs {
            return Err(BenchError::Check(format!(
                "replicate_100k: the target holds {copied} of {docs} documents"
            )));
        }
        Ok(vec![Outcome::from_run(
            &ctx,
            "replicate_100k",
            "replicate_100k",
            "docs",
            run,
        )
        .with("docs", docs)])
    }
    .await;
    cleanup(&ctx.target, &src).await;
    cleanup(&ctx.target, &dst).await;
    result
}

/// Ids of the documents written while the replication runs.
fn new_id(i: u64) -> String {
    format!("new-{i:010}")
}

async fn run_catchup(ctx: Arc<Ctx>) -> Result<Vec<Outcome>, BenchError> {
    let base = ctx.scale(1_000, 200);
    let docs = ctx.scale(10_000, 1_000);
    let (src, dst) = (ctx.db_name("catchup-src"), ctx.db_name("catchup-dst"));
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &src).await?;
    let result = async {
        preload(&mut conn, &src, base, seq_id, FOO_BAR).await?;
        conn.expect(
            Method::POST,
            "/_replicate",
            body(&src, &dst, true, false),
            &[200, 202],
        )
        .await?;
        let ran = async {
            wait_for(&ctx, &dst, base).await?;
            let errors = ErrorLog::default();
            let measure = Measure::start();
            let mut writer = ctx.conn().await?;
            let (src2, dst2, ctx2) = (src.clone(), dst.clone(), ctx.clone());
            let fut = async move {
                preload(&mut writer, &src2, docs, new_id, FOO_BAR).await?;
                wait_for(&ctx2, &dst2, base + docs).await?;
                Ok(u32::try_from(docs).unwrap_or(u32::MAX))
            };
            let sample = timed(measure.started(), &errors, fut).await;
            ctx.progress.tick(u64::from(sample.items));
            Ok::<_, BenchError>(Run {
                samples: vec![sample],
                measured: measure.finish(),
                error_messages: errors.take(),
            })
        }
        .await;
        // Stop the job whatever happened.
        let _ = conn
            .request(
                Method::POST,
                "/_replicate",
                body(&src, &dst, true, true),
                &[],
            )
            .await;
        let run = ran?;
        Ok(vec![Outcome::from_run(
            &ctx,
            "replicate_catchup",
            "replicate_catchup",
            "docs",
            run,
        )
        .with("docs", docs)])
    }
    .await;
    cleanup(&ctx.target, &src).await;
    cleanup(&ctx.target, &dst).await;
    result
}
