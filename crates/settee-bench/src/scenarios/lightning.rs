//! `lightning`, after Hovercraft's `lightning()`: the embedded engine
//! (settee-db, in this process, temporary directory), 100,000 documents
//! (quick: 10,000) `{"foo":"bar"}` in batches of 1,000 with sequential ids,
//! one batch after another, each a full commit. No HTTP; runs once per
//! invocation (server "embedded"); client CPU here is the engine's too.

use std::sync::Arc;

use serde_json::json;
use settee_core::doc::{Body, Doc};
use settee_db::{Durability, Engine, EngineOptions, UpdateOptions};

use super::{seq_id, Ctx, Outcome, ScenarioDef, Scope};
use crate::cpu::Measure;
use crate::error::BenchError;
use crate::load::{BoxFuture, Run};
use crate::stats::Sample;

pub const DEF: ScenarioDef = ScenarioDef {
    name: "lightning",
    group: "embedded",
    about: "embedded engine in-process: 100k docs in batches of 1000",
    scope: Scope::Once,
    run: run_boxed,
};

const BATCH: u64 = 1000;

fn run_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(async move {
        let docs = ctx.scale(100_000, 10_000);
        let c = ctx.clone();
        let run = tokio::task::spawn_blocking(move || lightning(&c, docs))
            .await
            .map_err(|e| BenchError::Engine(e.to_string()))??;
        let mut out = Outcome::from_run(&ctx, "lightning", "lightning", "docs", run)
            .with("docs", docs)
            .with("batch_docs", BATCH);
        out.server = "embedded".into();
        Ok(vec![out])
    })
}

fn lightning(ctx: &Ctx, docs: u64) -> Result<Run, BenchError> {
    let err = |e: &dyn std::fmt::Display| BenchError::Engine(e.to_string());
    let dir = tempfile::tempdir()?;
    let engine = Engine::open(dir.path(), EngineOptions::default()).map_err(|e| err(&e))?;
    let db = engine.create_db("lightning").map_err(|e| err(&e))?;
    let body = Body::from_value(json!({"foo": "bar"})).map_err(|e| err(&e))?;
    let opts = UpdateOptions {
        durability: Some(Durability::Full),
        ..UpdateOptions::default()
    };
    let measure = Measure::start();
    let mut samples = Vec::new();
    let mut n = 0;
    while n < docs {
        let batch = (n..(n + BATCH).min(docs))
            .map(|i| Doc::with_body(seq_id(i), body.clone()))
            .collect::<Result<Vec<Doc>, _>>()
            .map_err(|e| err(&e))?;
        let len = batch.len() as u64;
        let t0 = std::time::Instant::now();
        let results = db.update(batch, opts).map_err(|e| err(&e))?;
        let ok = results.iter().all(Result::is_ok);
        samples.push(Sample {
            at_us: t0.duration_since(measure.started()).as_micros() as u64,
            latency_us: u32::try_from(t0.elapsed().as_micros()).unwrap_or(u32::MAX),
            items: if ok { len as u32 } else { 0 },
            ok,
        });
        ctx.progress.tick(len);
        n += len;
    }
    let measured = measure.finish();
    let count = db.info().map_err(|e| err(&e))?.doc_count;
    engine.shutdown();
    if count != docs {
        return Err(BenchError::Check(format!(
            "lightning: {count} of {docs} documents"
        )));
    }
    Ok(Run {
        samples,
        measured,
        error_messages: Vec::new(),
    })
}
