//! Fault tolerance, only against a server the bench starts itself
//! (`--spawn-settee`): per round, 8 clients write single documents with
//! full commit; after 2 s (quick: 0.3 s) the server is SIGKILLed mid-load,
//! restarted on the same data directory, and the bench measures the time
//! until it answers `GET /` again, then checks that every write acknowledged
//! (201) in any round so far is present. 5 rounds (quick: 2). The row's
//! samples are the writes (requests cut off by the kill are its expected
//! errors); `lost` must be 0.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use serde::Deserialize;

use super::{create_db, Ctx, Outcome, ScenarioDef, Scope, FOO_BAR};
use crate::client::{Conn, Target};
use crate::cpu::Measure;
use crate::error::BenchError;
use crate::load::{send, timed, BoxFuture, ErrorLog, Req, Run};
use crate::spawn::Spawned;
use crate::stats::Sample;

pub const DEF: ScenarioDef = ScenarioDef {
    name: "fault_tolerance",
    group: "fault",
    about: "SIGKILL a spawned settee under full-commit load; recovery time, lost acked writes",
    scope: Scope::Once,
    run: run_boxed,
};

const WRITERS: usize = 8;
const DB: &str = "bench-fault";
/// Most time to wait for a restarted server to answer.
const RECOVERY_MAX: Duration = Duration::from_secs(60);

fn run_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run(ctx))
}

/// Writes until `stop` or the connection dies; the acknowledged ids.
async fn writer(
    target: Arc<Target>,
    round: usize,
    w: usize,
    stop: Arc<AtomicBool>,
    start: Instant,
    errors: ErrorLog,
    cap: Instant,
) -> (Vec<Sample>, Vec<String>) {
    let (mut samples, mut acked) = (Vec::new(), Vec::new());
    let Ok(mut conn) = Conn::connect(&target).await else {
        return (samples, acked);
    };
    let body = Bytes::from_static(FOO_BAR.as_bytes());
    for i in 0u64.. {
        if stop.load(Ordering::Relaxed) || Instant::now() >= cap {
            break;
        }
        let id = format!("r{round}-w{w}-{i:08}");
        let req = Req {
            headers: &[("x-couch-full-commit", "true")],
            ..Req::new(Method::PUT, format!("/{DB}/{id}"), body.clone(), &[201])
        };
        let s = timed(start, &errors, send(&mut conn, req)).await;
        samples.push(s);
        if s.ok {
            acked.push(id);
        } else {
            break; // the server is gone
        }
    }
    (samples, acked)
}

#[derive(Deserialize)]
struct KeysPage {
    rows: Vec<serde_json::Value>,
}

/// How many of `ids` are missing (or deleted) on the server.
async fn missing(conn: &mut Conn, ids: &[String]) -> Result<u64, BenchError> {
    let mut lost = 0;
    for chunk in ids.chunks(5000) {
        let body = serde_json::to_vec(&serde_json::json!({ "keys": chunk }))?;
        let r = conn
            .expect(
                Method::POST,
                &format!("/{DB}/_all_docs"),
                Bytes::from(body),
                &[200],
            )
            .await?;
        let page: KeysPage = r.json()?;
        if page.rows.len() != chunk.len() {
            return Err(BenchError::BadResponse {
                path: "_all_docs keys".into(),
                reason: format!("{} rows for {} keys", page.rows.len(), chunk.len()),
            });
        }
        lost += page
            .rows
            .iter()
            .filter(|r| r.get("error").is_some() || r["value"]["deleted"] == true)
            .count() as u64;
    }
    Ok(lost)
}

/// Polls `GET /` until it answers 200; the time it took.
async fn until_up(target: &Arc<Target>, since: Instant) -> Result<Duration, BenchError> {
    while since.elapsed() < RECOVERY_MAX {
        if let Ok(mut c) = Conn::connect(target).await {
            if matches!(c.get("/").await, Ok(r) if r.status == 200) {
                return Ok(since.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Err(BenchError::Spawn(
        "restarted server did not answer within 60 s".into(),
    ))
}

async fn run(ctx: Arc<Ctx>) -> Result<Vec<Outcome>, BenchError> {
    let Some(bin) = ctx.settee_bin.clone() else {
        ctx.progress
            .println("fault_tolerance: skipped (needs --spawn-settee)");
        return Ok(vec![]);
    };
    let rounds = ctx.scale(5, 2) as usize;
    let write_for = ctx.secs(2.0, 0.3);
    let dir = tempfile::tempdir()?;
    let start_server = |bin: std::path::PathBuf, dir: std::path::PathBuf| async move {
        tokio::task::spawn_blocking(move || Spawned::start(&bin, &dir))
            .await
            .map_err(|e| BenchError::Spawn(e.to_string()))?
    };
    let mut server = start_server(bin.clone(), dir.path().to_path_buf()).await?;
    let mut target = Arc::new(Target::parse(&server.url)?);
    create_db(&mut Conn::connect(&target).await?, DB).await?;
    let errors = ErrorLog::default();
    let measure = Measure::start();
    let (mut samples, mut acked) = (Vec::new(), Vec::<String>::new());
    let (mut recovery_ms, mut lost_per_round) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let stop = Arc::new(AtomicBool::new(false));
        let cap = Instant::now() + write_for * 10 + Duration::from_secs(5);
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                tokio::spawn(writer(
                    target.clone(),
                    round,
                    w,
                    stop.clone(),
                    measure.started(),
                    errors.clone(),
                    cap,
                ))
            })
            .collect();
        tokio::time::sleep(write_for).await;
        server.kill9(); // mid-load: requests are in flight
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            let (s, a) = t
                .await
                .map_err(|e| BenchError::Check(format!("writer task: {e}")))?;
            ctx.progress.tick(a.len() as u64);
            samples.extend(s);
            acked.extend(a);
        }
        let t0 = Instant::now();
        server = start_server(bin.clone(), dir.path().to_path_buf()).await?;
        target = Arc::new(Target::parse(&server.url)?);
        let up = until_up(&target, t0).await?;
        recovery_ms.push(up.as_secs_f64() * 1000.0);
        let lost = missing(&mut Conn::connect(&target).await?, &acked).await?;
        lost_per_round.push(lost);
    }
    let run = Run {
        samples,
        measured: measure.finish(),
        error_messages: errors.take(),
    };
    drop(server);
    let lost: u64 = lost_per_round.iter().sum::<u64>().min(acked.len() as u64);
    let mut out = Outcome::from_run(&ctx, "fault_tolerance", "fault_tolerance", "docs", run)
        .with("rounds", rounds)
        .with("acked_writes", acked.len())
        .with("lost", *lost_per_round.iter().max().unwrap_or(&0))
        .with("lost_checks_total", lost)
        .with("recovery_ms", recovery_ms);
    out.server = "settee (spawned)".into();
    out.errors_expected = true;
    Ok(vec![out])
}
