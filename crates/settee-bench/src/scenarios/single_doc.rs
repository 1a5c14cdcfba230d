//! The chapter's `single_doc_insert`: one client, one document per request
//! (`PUT /db/<sequential id>`), with full commit (`X-Couch-Full-Commit:
//! true`: the reply follows the fsync) and with delayed commit
//! (`X-Couch-Full-Commit: false`). 5 s each (quick: 0.4 s).

use std::sync::Arc;

use bytes::Bytes;
use hyper::Method;

use super::{cleanup, create_db, seq_id, Ctx, Outcome, ScenarioDef, Scope, FOO_BAR};
use crate::error::BenchError;
use crate::load::{drive, BoxFuture, Limit, Req, ReqOp};

pub const DEFS: [ScenarioDef; 2] = [
    ScenarioDef {
        name: "single_doc_insert",
        group: "chapter",
        about: "one client, PUT one doc per request, full commit",
        scope: Scope::PerServer,
        run: full,
    },
    ScenarioDef {
        name: "single_doc_insert_delayed",
        group: "chapter",
        about: "one client, PUT one doc per request, delayed commit",
        scope: Scope::PerServer,
        run: delayed,
    },
];

fn full(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run(
        ctx,
        "single_doc_insert",
        &[("x-couch-full-commit", "true")],
    ))
}

fn delayed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run(
        ctx,
        "single_doc_insert_delayed",
        &[("x-couch-full-commit", "false")],
    ))
}

/// `clients` writers putting single documents under `headers` for the
/// scenario's duration; shared by the concurrency scenarios.
pub async fn writers(
    ctx: &Arc<Ctx>,
    name: &str,
    clients: usize,
    headers: &'static [(&'static str, &'static str)],
    query: &'static str,
    ok: &'static [u16],
) -> Result<Outcome, BenchError> {
    let db = ctx.db_name(name);
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &db).await?;
    let body = Bytes::from_static(FOO_BAR.as_bytes());
    let prefix = format!("/{db}/");
    let op = ReqOp(move |_w, i| Req {
        headers,
        ..Req::new(
            Method::PUT,
            format!("{prefix}{}{query}", seq_id(i)),
            body.clone(),
            ok,
        )
    });
    let limit = Limit::time(ctx.secs(5.0, 0.4));
    let result = drive(&ctx.target, clients, limit, Arc::new(op), &ctx.progress).await;
    cleanup(&ctx.target, &db).await;
    Ok(Outcome::from_run(ctx, name, name, "docs", result?).with("clients", clients))
}

async fn run(
    ctx: Arc<Ctx>,
    name: &'static str,
    headers: &'static [(&'static str, &'static str)],
) -> Result<Vec<Outcome>, BenchError> {
    Ok(vec![
        writers(&ctx, name, 1, headers, "", &[201, 202]).await?,
    ])
}
