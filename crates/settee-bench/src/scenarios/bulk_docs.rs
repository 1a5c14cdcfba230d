//! The chapter's `bulk_doc_100` … `bulk_doc_10000`: one client posts
//! `_bulk_docs` batches of N `{"foo":"bar"}` documents with sequential ids,
//! one after another (200,000 documents; quick: two batches or 4,000
//! documents). All batches are encoded before the clock starts.

use std::sync::Arc;

use bytes::Bytes;
use hyper::Method;

use super::{bulk_body, cleanup, create_db, seq_id, Ctx, Outcome, ScenarioDef, Scope, FOO_BAR};
use crate::error::BenchError;
use crate::load::{drive, BoxFuture, Limit, Req, ReqOp};

macro_rules! def {
    ($name:literal, $batch:literal, $f:ident) => {
        fn $f(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
            Box::pin(run(ctx, $name, $batch))
        }
    };
}
def!("bulk_doc_100", 100, run_100);
def!("bulk_doc_1000", 1000, run_1000);
def!("bulk_doc_5000", 5000, run_5000);
def!("bulk_doc_10000", 10000, run_10000);

const fn d(name: &'static str, run: super::RunFn) -> ScenarioDef {
    ScenarioDef {
        name,
        group: "chapter",
        about: "sequential _bulk_docs batches of N docs, sequential ids",
        scope: Scope::PerServer,
        run,
    }
}

pub const DEFS: [ScenarioDef; 4] = [
    d("bulk_doc_100", run_100),
    d("bulk_doc_1000", run_1000),
    d("bulk_doc_5000", run_5000),
    d("bulk_doc_10000", run_10000),
];

async fn run(ctx: Arc<Ctx>, name: &'static str, batch: u64) -> Result<Vec<Outcome>, BenchError> {
    let total = ctx.scale(200_000, (batch * 2).max(4_000));
    let db = ctx.db_name(name);
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &db).await?;
    let batches: Arc<Vec<(Bytes, u32)>> = Arc::new(
        (0..total.div_ceil(batch))
            .map(|b| {
                let (lo, hi) = (b * batch, ((b + 1) * batch).min(total));
                (bulk_body((lo..hi).map(seq_id), FOO_BAR), (hi - lo) as u32)
            })
            .collect(),
    );
    let path = format!("/{db}/_bulk_docs");
    let n = batches.len() as u64;
    let op = ReqOp(move |_w, i| {
        let (body, docs) = &batches[i as usize];
        Req {
            items: *docs,
            check_body: true,
            ..Req::new(Method::POST, path.clone(), body.clone(), &[201, 202])
        }
    });
    let result = drive(&ctx.target, 1, Limit::ops(n), Arc::new(op), &ctx.progress).await;
    cleanup(&ctx.target, &db).await;
    let out = Outcome::from_run(&ctx, name, name, "docs", result?).with("batch_docs", batch);
    Ok(vec![out])
}
