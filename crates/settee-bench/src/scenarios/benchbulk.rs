//! The chapter's `benchbulk`: 10 concurrent clients each posting 1,000-doc
//! `_bulk_docs` batches with sequential ids (batch k holds ids
//! k·1000 … k·1000+999), 20 rounds (quick: 2 rounds of 10 × 100 docs).

use std::sync::Arc;

use super::{bulk_post_op, cleanup, create_db, seq_id, Ctx, Outcome, ScenarioDef, Scope};
use crate::error::BenchError;
use crate::load::{drive, BoxFuture, Limit};

pub const DEF: ScenarioDef = ScenarioDef {
    name: "benchbulk",
    group: "chapter",
    about: "10 concurrent clients x 1000-doc _bulk_docs batches, sequential ids",
    scope: Scope::PerServer,
    run: run_boxed,
};

const CLIENTS: usize = 10;

fn run_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run(ctx))
}

async fn run(ctx: Arc<Ctx>) -> Result<Vec<Outcome>, BenchError> {
    let rounds = ctx.scale(20, 2);
    let batch = ctx.scale(1000, 100);
    let db = ctx.db_name("benchbulk");
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &db).await?;
    let n = rounds * CLIENTS as u64;
    let op = bulk_post_op(format!("/{db}/_bulk_docs"), n, batch, seq_id);
    let result = drive(
        &ctx.target,
        CLIENTS,
        Limit::ops(n),
        Arc::new(op),
        &ctx.progress,
    )
    .await;
    cleanup(&ctx.target, &db).await;
    Ok(vec![Outcome::from_run(
        &ctx,
        "benchbulk",
        "benchbulk",
        "docs",
        result?,
    )
    .with("clients", CLIENTS)
    .with("batch_docs", batch)])
}
