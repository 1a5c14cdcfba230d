//! Load drivers. [`drive`] runs a closed loop: `conns` connections, each a
//! task sending one request after another until the operation budget
//! (`ops_max`) or the time budget (`duration`) is used up — both always
//! bounded. Connections are opened before the clock starts. Every request
//! becomes a [`Sample`]; a failed request is a sample with `ok = false`
//! (the first few error messages are kept for the report).
//!
//! What a request is comes from an [`Op`]: usually a [`ReqOp`] closure that
//! builds a pre-encoded request from the operation number, or a custom
//! implementation for multi-request operations (read-modify-write).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;

use crate::client::{Conn, Target};
use crate::cpu::{Measure, Measured};
use crate::error::BenchError;
use crate::progress::Progress;
use crate::stats::Sample;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Error messages kept per run.
const ERROR_MESSAGES_MAX: usize = 5;

/// One operation of a workload.
pub trait Op: Send + Sync + 'static {
    /// Runs operation `i` on `conn` from worker `worker`; the number of
    /// items (documents, operations) it completed, or why it failed.
    fn run<'a>(
        &'a self,
        conn: &'a mut Conn,
        worker: usize,
        i: u64,
    ) -> BoxFuture<'a, Result<u32, BenchError>>;
}

/// A single pre-encoded request.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: Method,
    pub path: String,
    pub body: Bytes,
    pub headers: &'static [(&'static str, &'static str)],
    /// Statuses that count as success.
    pub ok: &'static [u16],
    /// Items a success completes.
    pub items: u32,
    /// Fail if the body mentions `"error"` (per-document bulk failures).
    pub check_body: bool,
}

impl Req {
    pub fn new(method: Method, path: String, body: Bytes, ok: &'static [u16]) -> Req {
        Req {
            method,
            path,
            body,
            headers: &[],
            ok,
            items: 1,
            check_body: false,
        }
    }
}

/// Sends `req`; `Ok(items)` when the status (and body check) pass.
pub async fn send(conn: &mut Conn, req: Req) -> Result<u32, BenchError> {
    let method = req.method.to_string();
    let r = conn
        .request(req.method, &req.path, req.body, req.headers)
        .await?;
    if !req.ok.contains(&r.status) || (req.check_body && r.mentions_error()) {
        return Err(BenchError::Status {
            method,
            path: req.path,
            status: r.status,
            body: r.text(),
        });
    }
    Ok(req.items)
}

/// An [`Op`] made of one request built by a closure.
pub struct ReqOp<F>(pub F);

impl<F> Op for ReqOp<F>
where
    F: Fn(usize, u64) -> Req + Send + Sync + 'static,
{
    fn run<'a>(
        &'a self,
        conn: &'a mut Conn,
        worker: usize,
        i: u64,
    ) -> BoxFuture<'a, Result<u32, BenchError>> {
        let req = (self.0)(worker, i);
        Box::pin(send(conn, req))
    }
}

/// Budget of a closed-loop run: whichever ends first.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub ops_max: u64,
    pub duration: Duration,
}

impl Limit {
    /// Exactly `ops` operations (with a generous time cap).
    pub fn ops(ops: u64) -> Limit {
        Limit {
            ops_max: ops,
            duration: Duration::from_secs(600),
        }
    }

    /// As many operations as fit in `duration` (bounded anyway).
    pub fn time(duration: Duration) -> Limit {
        Limit {
            ops_max: 100_000_000,
            duration,
        }
    }
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Run {
    pub samples: Vec<Sample>,
    pub measured: Measured,
    pub error_messages: Vec<String>,
}

/// Shared error-message log (bounded).
#[derive(Debug, Default, Clone)]
pub struct ErrorLog(Arc<Mutex<Vec<String>>>);

impl ErrorLog {
    pub fn push(&self, e: &BenchError) {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if v.len() < ERROR_MESSAGES_MAX {
            v.push(e.to_string());
        }
    }
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Times one operation and turns it into a sample.
pub async fn timed<F: Future<Output = Result<u32, BenchError>>>(
    start: Instant,
    errors: &ErrorLog,
    fut: F,
) -> Sample {
    let t0 = Instant::now();
    let result = fut.await;
    let latency_us = u32::try_from(t0.elapsed().as_micros()).unwrap_or(u32::MAX);
    let at_us = u64::try_from(t0.duration_since(start).as_micros()).unwrap_or(u64::MAX);
    match result {
        Ok(items) => Sample {
            at_us,
            latency_us,
            items,
            ok: true,
        },
        Err(e) => {
            errors.push(&e);
            Sample {
                at_us,
                latency_us,
                items: 0,
                ok: false,
            }
        }
    }
}

/// Runs `op` in a closed loop over `conns` connections.
pub async fn drive<O: Op>(
    target: &Arc<Target>,
    conns: usize,
    limit: Limit,
    op: Arc<O>,
    progress: &Progress,
) -> Result<Run, BenchError> {
    let mut connections = Vec::with_capacity(conns);
    for _ in 0..conns.max(1) {
        connections.push(Conn::connect(target).await?);
    }
    let next = Arc::new(AtomicU64::new(0));
    let errors = ErrorLog::default();
    let measure = Measure::start();
    let start = measure.started();
    let deadline = start + limit.duration;
    let mut tasks = Vec::with_capacity(connections.len());
    for (worker, mut conn) in connections.into_iter().enumerate() {
        let (op, next, errors, progress) =
            (op.clone(), next.clone(), errors.clone(), progress.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= limit.ops_max || Instant::now() >= deadline {
                    break;
                }
                let s = timed(start, &errors, op.run(&mut conn, worker, i)).await;
                samples.push(s);
                progress.tick(1);
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(
            t.await
                .map_err(|e| BenchError::Check(format!("load task failed: {e}")))?,
        );
    }
    Ok(Run {
        samples,
        measured: measure.finish(),
        error_messages: errors.take(),
    })
}
