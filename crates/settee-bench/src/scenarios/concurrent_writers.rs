//! Concurrency: N clients (N = 1, 32, 256, 1000 connections) each putting
//! single `{"foo":"bar"}` documents with full commit, 5 s each (quick:
//! 0.4 s). Group commit is what should make N writers cost a few fsyncs.

use std::sync::Arc;

use super::{single_doc::writers, Ctx, Outcome, ScenarioDef, Scope};
use crate::error::BenchError;
use crate::load::BoxFuture;

macro_rules! def {
    ($name:literal, $n:literal, $f:ident) => {
        fn $f(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
            Box::pin(async move {
                let headers = &[("x-couch-full-commit", "true")];
                Ok(vec![
                    writers(&ctx, $name, $n, headers, "", &[201, 202]).await?,
                ])
            })
        }
    };
}
def!("concurrent_writers_1", 1, run_1);
def!("concurrent_writers_32", 32, run_32);
def!("concurrent_writers_256", 256, run_256);
def!("concurrent_writers_1000", 1000, run_1000);

const fn d(name: &'static str, run: super::RunFn) -> ScenarioDef {
    ScenarioDef {
        name,
        group: "concurrency",
        about: "N connections writing single docs, full commit",
        scope: Scope::PerServer,
        run,
    }
}

pub const DEFS: [ScenarioDef; 4] = [
    d("concurrent_writers_1", run_1),
    d("concurrent_writers_32", run_32),
    d("concurrent_writers_256", run_256),
    d("concurrent_writers_1000", run_1000),
];
