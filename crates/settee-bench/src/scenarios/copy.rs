//! The YALTools copy job (`lsdocs src -u 2000 | postdocs dst`): 100,000
//! documents (quick: 5,000) are preloaded into a source database, then
//! copied page by page into a fresh target: a reader pages
//! `_all_docs?include_docs=true&limit=2000`, a writer posts each page to
//! the target's `_bulk_docs` with `new_edits=false` (same ids and revs),
//! the two pipelined through a 2-page channel like the shell pipe. Throughput
//! is documents copied per second, end to end; samples are the writes. The
//! target's doc_count and a document's rev are checked afterwards.

use std::sync::Arc;

use bytes::Bytes;
use hyper::Method;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{
    cleanup, create_db, db_info, json_param, preload, seq_id, Ctx, Outcome, ScenarioDef, Scope,
    FOO_BAR,
};
use crate::cpu::Measure;
use crate::error::BenchError;
use crate::load::{send, timed, BoxFuture, ErrorLog, Req, Run};

pub const DEF: ScenarioDef = ScenarioDef {
    name: "copy",
    group: "copy",
    about: "copy a db page by page (_all_docs 2000 -> _bulk_docs new_edits=false)",
    scope: Scope::PerServer,
    run: run_boxed,
};

const PAGE: u64 = 2000;

#[derive(Deserialize)]
struct Page<'a> {
    #[serde(borrow)]
    rows: Vec<Row<'a>>,
}

#[derive(Deserialize)]
struct Row<'a> {
    id: String,
    #[serde(borrow)]
    doc: Option<&'a RawValue>,
}

fn run_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run(ctx))
}

/// Reads every page of `db` into `tx` as ready-to-post bulk bodies.
async fn reader(
    ctx: Arc<Ctx>,
    db: String,
    docs: u64,
    tx: tokio::sync::mpsc::Sender<(Bytes, u32)>,
) -> Result<u64, BenchError> {
    let mut conn = ctx.conn().await?;
    let mut last: Option<String> = None;
    let mut read = 0;
    for _ in 0..docs / PAGE + 2 {
        let path = match &last {
            None => format!("/{db}/_all_docs?include_docs=true&limit={PAGE}"),
            Some(l) => format!(
                "/{db}/_all_docs?include_docs=true&limit={PAGE}&skip=1&startkey={}",
                json_param(l)
            ),
        };
        let r = conn
            .expect(Method::GET, &path, Bytes::new(), &[200])
            .await?;
        let page: Page = serde_json::from_slice(&r.body)?;
        let n = page.rows.len() as u64;
        let mut body = String::with_capacity(r.body.len());
        body.push_str("{\"new_edits\":false,\"docs\":[");
        let mut first = true;
        for row in &page.rows {
            if let Some(doc) = row.doc {
                if !first {
                    body.push(',');
                }
                first = false;
                body.push_str(doc.get());
            }
        }
        body.push_str("]}");
        last = page.rows.last().map(|r| r.id.clone());
        read += n;
        if n > 0 && tx.send((Bytes::from(body), n as u32)).await.is_err() {
            break;
        }
        if n < PAGE {
            break;
        }
    }
    Ok(read)
}

async fn run(ctx: Arc<Ctx>) -> Result<Vec<Outcome>, BenchError> {
    let docs = ctx.scale(100_000, 5_000);
    let (src, dst) = (ctx.db_name("copy-src"), ctx.db_name("copy-dst"));
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &src).await?;
    create_db(&mut conn, &dst).await?;
    let result = async {
        preload(&mut conn, &src, docs, seq_id, FOO_BAR).await?;
        let errors = ErrorLog::default();
        let measure = Measure::start();
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let read_task = tokio::spawn(reader(ctx.clone(), src.clone(), docs, tx));
        let mut writer = ctx.conn().await?;
        let mut samples = Vec::new();
        let path = format!("/{dst}/_bulk_docs");
        while let Some((body, n)) = rx.recv().await {
            let req = Req {
                items: n,
                check_body: true,
                ..Req::new(Method::POST, path.clone(), body, &[201, 202])
            };
            let s = timed(measure.started(), &errors, send(&mut writer, req)).await;
            ctx.progress.tick(u64::from(s.items));
            samples.push(s);
        }
        let read = read_task
            .await
            .map_err(|e| BenchError::Check(format!("reader task: {e}")))??;
        let run = Run {
            samples,
            measured: measure.finish(),
            error_messages: errors.take(),
        };
        let info = db_info(&mut conn, &dst).await?;
        let copied = info["doc_count"].as_u64().unwrap_or(0);
        if read != docs || copied != docs {
            return Err(BenchError::Check(format!(
                "copy: read {read}, target holds {copied} of {docs} documents"
            )));
        }
        // Same revision on both sides.
        let probe = seq_id(docs / 2);
        let a = conn
            .expect(
                Method::GET,
                &format!("/{src}/{probe}"),
                Bytes::new(),
                &[200],
            )
            .await?;
        let b = conn
            .expect(
                Method::GET,
                &format!("/{dst}/{probe}"),
                Bytes::new(),
                &[200],
            )
            .await?;
        let rev =
            |r: &crate::client::Response| r.json::<serde_json::Value>().map(|v| v["_rev"].clone());
        if rev(&a)? != rev(&b)? {
            return Err(BenchError::Check(format!(
                "copy: {probe} has a different rev in the target"
            )));
        }
        Ok(vec![Outcome::from_run(&ctx, "copy", "copy", "docs", run)
            .with("docs", docs)
            .with("page_docs", PAGE)])
    }
    .await;
    cleanup(&ctx.target, &src).await;
    cleanup(&ctx.target, &dst).await;
    result
}
