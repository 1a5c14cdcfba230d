//! Sequential vs random ids at scale: 200,000 documents (quick: 5,000) in
//! `_bulk_docs` batches of 1,000 from one client, once with sequential ids
//! and once with random 32-hex ids, each into a fresh database; reports
//! throughput and the database's file size (`sizes.file` of `GET /db`,
//! after `_ensure_full_commit`).

use std::sync::Arc;

use bytes::Bytes;
use hyper::Method;

use super::{
    bulk_post_op, cleanup, create_db, db_info, random_id, seq_id, Ctx, Outcome, ScenarioDef, Scope,
};
use crate::error::BenchError;
use crate::load::{drive, BoxFuture, Limit};

pub const DEF: ScenarioDef = ScenarioDef {
    name: "ids",
    group: "chapter",
    about: "sequential vs random ids at scale (throughput, file size)",
    scope: Scope::PerServer,
    run: run_boxed,
};

const BATCH: u64 = 1000;

fn run_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(async move {
        Ok(vec![
            one(&ctx, "ids_sequential", seq_id).await?,
            one(&ctx, "ids_random", random_id).await?,
        ])
    })
}

async fn one(ctx: &Arc<Ctx>, name: &str, id: fn(u64) -> String) -> Result<Outcome, BenchError> {
    let total = ctx.scale(200_000, 5_000);
    let db = ctx.db_name(name);
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &db).await?;
    let n = total / BATCH;
    let op = bulk_post_op(format!("/{db}/_bulk_docs"), n, BATCH, id);
    let result = drive(&ctx.target, 1, Limit::ops(n), Arc::new(op), &ctx.progress).await;
    let info = async {
        conn.request(
            Method::POST,
            &format!("/{db}/_ensure_full_commit"),
            Bytes::from_static(b"{}"),
            &[],
        )
        .await?;
        db_info(&mut conn, &db).await
    }
    .await;
    cleanup(&ctx.target, &db).await;
    let info = info?;
    let file = info["sizes"]["file"]
        .as_u64()
        .or_else(|| info["disk_size"].as_u64())
        .unwrap_or(0);
    Ok(Outcome::from_run(ctx, "ids", name, "docs", result?)
        .with("docs", total)
        .with("file_bytes", file)
        .with("doc_count", info["doc_count"].clone()))
}
