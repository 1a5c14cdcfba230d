//! The chapter's `batch_ok_doc_insert`: one client, `PUT /db/<id>?batch=ok`
//! (the server answers 202 at once and writes within its flush window),
//! 5 s (quick: 0.4 s).

use std::sync::Arc;

use super::{single_doc::writers, Ctx, Outcome, ScenarioDef, Scope};
use crate::error::BenchError;
use crate::load::BoxFuture;

pub const DEF: ScenarioDef = ScenarioDef {
    name: "batch_ok_doc_insert",
    group: "chapter",
    about: "one client, PUT ?batch=ok (202 Accepted)",
    scope: Scope::PerServer,
    run: run_boxed,
};

fn run_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(async move {
        let name = "batch_ok_doc_insert";
        Ok(vec![
            writers(&ctx, name, 1, &[], "?batch=ok", &[201, 202]).await?,
        ])
    })
}
