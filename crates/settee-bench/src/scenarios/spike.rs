//! A load spike: 10 clients write single documents (full commit) for a
//! phase P; then 990 more connect one by one over the next P (ramp to
//! 1,000), all 1,000 write for another P, and the extra 990 stop: the
//! original 10 write alone for a last P. P = 3 s (quick: 0.3 s). The chapter
//! asks a database to keep serving every client under such a spike —
//! latency rising a little, no errors. Rows `spike_before`, `spike_during`
//! (ramp + hold) and `spike_after`; `spike_during` carries a timeline of
//! 40 windows (throughput, p50, p99, errors, connections) for the plot.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use serde_json::json;

use super::{cleanup, create_db, seq_id, Ctx, Outcome, ScenarioDef, Scope, FOO_BAR};
use crate::client::Conn;
use crate::cpu::{process_cpu, Measured};
use crate::error::BenchError;
use crate::load::{send, timed, BoxFuture, ErrorLog, Req, Run};
use crate::stats::{Histogram, Sample};

pub const DEF: ScenarioDef = ScenarioDef {
    name: "spike",
    group: "concurrency",
    about: "single-doc writers ramped 10 -> 1000 -> 10: latency before/during/after",
    scope: Scope::PerServer,
    run: run_boxed,
};

const BASE: usize = 10;
const PEAK: usize = 1000;
const WINDOWS: u64 = 40;

fn run_boxed(ctx: Arc<Ctx>) -> BoxFuture<'static, Result<Vec<Outcome>, BenchError>> {
    Box::pin(run(ctx))
}

/// Connections open at `t` (by the schedule).
fn active(t: Duration, p: Duration) -> usize {
    if t < p || t >= 3 * p {
        BASE
    } else if t >= 2 * p {
        PEAK
    } else {
        let frac = (t - p).as_secs_f64() / p.as_secs_f64();
        BASE + ((PEAK - BASE) as f64 * frac) as usize
    }
}

async fn worker(
    target: Arc<crate::client::Target>,
    prefix: Arc<String>,
    next: Arc<AtomicU64>,
    start: Instant,
    begin: Instant,
    end: Instant,
    errors: ErrorLog,
) -> Vec<Sample> {
    tokio::time::sleep_until(begin.into()).await;
    let mut samples = Vec::new();
    let mut conn = match Conn::connect(&target).await {
        Ok(c) => c,
        Err(e) => {
            samples.push(timed(start, &errors, async { Err::<u32, _>(e) }).await);
            return samples;
        }
    };
    let body = Bytes::from_static(FOO_BAR.as_bytes());
    while Instant::now() < end {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let req = Req {
            headers: &[("x-couch-full-commit", "true")],
            ..Req::new(
                Method::PUT,
                format!("{prefix}{}", seq_id(i)),
                body.clone(),
                &[201, 202],
            )
        };
        samples.push(timed(start, &errors, send(&mut conn, req)).await);
    }
    samples
}

async fn run(ctx: Arc<Ctx>) -> Result<Vec<Outcome>, BenchError> {
    let p = ctx.secs(3.0, 0.3);
    let db = ctx.db_name("spike");
    let mut conn = ctx.conn().await?;
    create_db(&mut conn, &db).await?;
    let prefix = Arc::new(format!("/{db}/"));
    let next = Arc::new(AtomicU64::new(0));
    let errors = ErrorLog::default();
    let start = Instant::now() + Duration::from_millis(50);
    let mut tasks = Vec::new();
    for k in 0..PEAK {
        let (begin, end) = if k < BASE {
            (start, start + 4 * p)
        } else {
            let offset = p.mul_f64((k - BASE) as f64 / (PEAK - BASE) as f64);
            (start + p + offset, start + 3 * p)
        };
        tasks.push(tokio::spawn(worker(
            ctx.target.clone(),
            prefix.clone(),
            next.clone(),
            start,
            begin,
            end,
            errors.clone(),
        )));
    }
    // Client CPU at the phase boundaries.
    let mut cpu = Vec::new();
    for at in [start, start + p, start + 3 * p] {
        tokio::time::sleep_until(at.into()).await;
        cpu.push(process_cpu());
    }
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(
            t.await
                .map_err(|e| BenchError::Check(format!("spike task: {e}")))?,
        );
    }
    cpu.push(process_cpu());
    cleanup(&ctx.target, &db).await;
    samples.sort_by_key(|s| s.at_us);
    let messages = errors.take();
    // Samples of [from, to) by start time; `wall` is the phase's length.
    let phase = |name: &str, from: Duration, to: Duration, wall: Duration, cpu: Duration| {
        let run = Run {
            samples: samples
                .iter()
                .filter(|s| s.at_us >= from.as_micros() as u64 && s.at_us < to.as_micros() as u64)
                .copied()
                .collect(),
            measured: Measured { wall, cpu },
            error_messages: messages.clone(),
        };
        Outcome::from_run(&ctx, "spike", name, "docs", run)
    };
    let before = phase(
        "spike_before",
        Duration::ZERO,
        p,
        p,
        cpu[1].saturating_sub(cpu[0]),
    );
    let during = phase(
        "spike_during",
        p,
        3 * p,
        2 * p,
        cpu[2].saturating_sub(cpu[1]),
    );
    // Requests still in flight at the end are attributed by start time.
    let after = phase(
        "spike_after",
        3 * p,
        4 * p + Duration::from_secs(3600),
        p,
        cpu[3].saturating_sub(cpu[2]),
    );
    let window = (4 * p).as_micros() as u64 / WINDOWS;
    let timeline: Vec<serde_json::Value> = (0..WINDOWS)
        .map(|w| {
            let (lo, hi) = (w * window, (w + 1) * window);
            let mut h = Histogram::default();
            let (mut ok, mut err) = (0u64, 0u64);
            for s in samples.iter().filter(|s| s.at_us >= lo && s.at_us < hi) {
                h.record(s.latency_us);
                if s.ok {
                    ok += u64::from(s.items);
                } else {
                    err += 1;
                }
            }
            let ms = |v: Option<u32>| v.map_or(0.0, |us| f64::from(us) / 1000.0);
            json!({
                "t_s": lo as f64 / 1e6,
                "throughput": ok as f64 / (window as f64 / 1e6),
                "p50_ms": ms(h.percentile(50.0)),
                "p99_ms": ms(h.percentile(99.0)),
                "errors": err,
                "connections": active(Duration::from_micros(lo), p),
            })
        })
        .collect();
    Ok(vec![
        before.with("connections", BASE),
        during
            .with("connections", PEAK)
            .with("timeline", serde_json::Value::Array(timeline)),
        after.with("connections", BASE),
    ])
}
