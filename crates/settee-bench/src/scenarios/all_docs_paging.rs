//! The YALTools read side: page through a whole database with
//! `_all_docs?include_docs=true&limit=P`, each next page from
//! `startkey=<last id>&skip=1`, one client. Page sizes 50 … 10,000 (a sweep
//! to find the best; quick: 50, 200, 2000) over 100,000 documents (quick:
//! 5,000). Rows `all_docs_page_<P>`; throughput is documents read per second.

use std::sync::Arc;

use bytes::Bytes;
use hyper::Method;
use serde::Deserialize;

use super::{
    cleanup, create_db, json_param, preload, seq_id, Ctx, Outcome, ScenarioDef, Scope, FOO_BAR,
};
use crate::client::Conn;
use crate::cpu::Measure;
use crate::error::BenchError;
use crate::load::{timed, BoxFuture, ErrorLog, Run};

pub const DEF: ScenarioDef = ScenarioDef {
    name: "all_docs_paging",
    group: "copy",
    about: "read a db with _all_docs?include_docs=true pages of 50..10000",
    scope: Scope::PerServer,
    run: run_boxed,
};

/// The rows of an `_all_docs` page; documents are skipped, not decoded.
#[derive(Deserialize)]
struct Page {
    rows: Vec<Row>,
}

#[derive(Deserialize)]
struct Row {
    id: String,
}

fn run_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run(ctx))
}

/// Reads page `after` → (rows, last id).
async fn page(
    conn: &mut Conn,
    db: &str,
    size: u64,
    after: Option<&str>,
) -> Result<(u32, Option<String>), BenchError> {
    let path = match after {
        None => format!("/{db}/_all_docs?include_docs=true&limit={size}"),
        Some(last) => format!(
            "/{db}/_all_docs?include_docs=true&limit={size}&skip=1&startkey={}",
            json_param(last)
        ),
    };
    let r = conn
        .expect(Method::GET, &path, Bytes::new(), &[200])
        .await?;
    let p: Page = r.json()?;
    Ok((p.rows.len() as u32, p.rows.last().map(|r| r.id.clone())))
}

async fn run(ctx: Arc<Ctx>) -> Result<Vec<Outcome>, BenchError> {
    let docs = ctx.scale(100_000, 5_000);
    let sizes: &[u64] = if ctx.quick {
        &[50, 200, 2000]
    } else {
        &[50, 100, 200, 500, 1000, 2000, 5000, 10000]
    };
    let db = ctx.db_name("all_docs_paging");
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &db).await?;
    let result = async {
        preload(&mut conn, &db, docs, seq_id, FOO_BAR).await?;
        let mut out = Vec::new();
        for &size in sizes {
            let errors = ErrorLog::default();
            let measure = Measure::start();
            let mut samples = Vec::new();
            let mut last: Option<String> = None;
            let mut read = 0u64;
            // Bounded: at most docs/size + 2 pages.
            for _ in 0..docs / size + 2 {
                let mut got = None;
                let s = timed(measure.started(), &errors, async {
                    let (n, l) = page(&mut conn, &db, size, last.as_deref()).await?;
                    got = Some((n, l));
                    Ok(n)
                })
                .await;
                samples.push(s);
                ctx.progress.tick(u64::from(s.items));
                match got {
                    Some((n, l)) => {
                        read += u64::from(n);
                        last = l;
                        if u64::from(n) < size {
                            break;
                        }
                    }
                    None => break,
                }
            }
            let run = Run {
                samples,
                measured: measure.finish(),
                error_messages: errors.take(),
            };
            if read != docs && run.error_messages.is_empty() {
                return Err(BenchError::Check(format!(
                    "paging read {read} of {docs} documents"
                )));
            }
            out.push(
                Outcome::from_run(
                    &ctx,
                    "all_docs_paging",
                    format!("all_docs_page_{size}"),
                    "docs",
                    run,
                )
                .with("page_size", size)
                .with("docs", docs),
            );
        }
        Ok(out)
    }
    .await;
    cleanup(&ctx.target, &db).await;
    result
}
