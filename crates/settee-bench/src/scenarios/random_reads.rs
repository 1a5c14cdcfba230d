//! Random reads: 100,000 `{"foo":"bar"}` documents (quick: 2,000) are
//! preloaded, then 1 and then 32 clients `GET /db/<id>` uniformly random
//! ids for 5 s each (quick: 0.4 s). Rows `random_reads_1`, `random_reads_32`.

use std::sync::Arc;

use bytes::Bytes;
use hyper::Method;

use super::{cleanup, create_db, preload, seq_id, Ctx, Outcome, ScenarioDef, Scope, FOO_BAR};
use crate::error::BenchError;
use crate::load::{drive, BoxFuture, Limit, Req, ReqOp};
use crate::zipf::mix;

pub const DEF: ScenarioDef = ScenarioDef {
    name: "random_reads",
    group: "concurrency",
    about: "GET random docs with 1 and 32 clients",
    scope: Scope::PerServer,
    run: run_boxed,
};

fn run_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run(ctx))
}

async fn run(ctx: Arc<Ctx>) -> Result<Vec<Outcome>, BenchError> {
    let docs = ctx.scale(100_000, 2_000);
    let db = ctx.db_name("random_reads");
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &db).await?;
    let result = async {
        preload(&mut conn, &db, docs, seq_id, FOO_BAR).await?;
        let mut out = Vec::new();
        for clients in [1usize, 32] {
            let prefix = format!("/{db}/");
            let op = ReqOp(move |w, i| {
                let key = mix(i ^ ((w as u64) << 40)) % docs;
                Req::new(
                    Method::GET,
                    format!("{prefix}{}", seq_id(key)),
                    Bytes::new(),
                    &[200],
                )
            });
            let limit = Limit::time(ctx.secs(5.0, 0.4));
            let run = drive(&ctx.target, clients, limit, Arc::new(op), &ctx.progress).await?;
            let name = format!("random_reads_{clients}");
            out.push(
                Outcome::from_run(&ctx, "random_reads", name, "ops", run)
                    .with("clients", clients)
                    .with("docs", docs),
            );
        }
        Ok(out)
    }
    .await;
    cleanup(&ctx.target, &db).await;
    result
}
