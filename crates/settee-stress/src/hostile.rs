//! The hostile runner: sends generated requests ([`crate::gen`]) at a
//! running server over several raw connections, judges every response
//! ([`crate::check`]), watches the server process ([`crate::procwatch`])
//! and finally checks the databases it wrote ([`crate::consistency`]).
//!
//! Invariants (bounds): at most `requests` cases, started within
//! `max_duration`; `connections` connections in the main lane plus at most
//! `slow_lanes` slow or broken deliveries in flight; every exchange has a
//! deadline (`request_timeout`, or `live_feed_wait` for live `_changes`
//! feeds); response bodies are read up to [`BODY_LIMIT`]; at most
//! `findings_max` findings are kept in full (all are counted).
//!
//! What counts as a failure: a response that is not well-formed HTTP or
//! is cut short (unless the client had already ended its side), an
//! application response that is not CouchDB-shaped, a 500 whose `error`
//! is not documented, no response to a request whose framing was valid
//! (the connection dropped, or nothing within the deadline), a response
//! that never ends (outside live `_changes` feeds), no response and no
//! close within the deadline after the client ended a broken request,
//! the server refusing connections, dying, or printing a panic, and any
//! inconsistency found afterwards.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::time::Instant;

use crate::check::{
    is_replication, preview, runs_design_functions, verdict, Verdict, DESIGN_FUNCTION_500,
    DOCUMENTED_500, REPLICATION_500,
};
use crate::consistency::{self, ConsistencyReport};
use crate::gen::{self, Case, Delivery, GenConfig, Need};
use crate::procwatch::{self, mib, RssSummary, RssWatch};
use crate::target::Target;
use crate::wire::{Conn, Response, WireError};

/// Largest response body read.
pub const BODY_LIMIT: usize = 256 << 20;
/// Longest a slow delivery trickles before sending the rest at once.
const SLOW_BUDGET: Duration = Duration::from_millis(1500);
/// Bytes written per call for large bodies.
const WRITE_CHUNK: usize = 64 << 10;
/// Consecutive connection failures after which the run stops.
const CONNECT_FAILURES_MAX: u64 = 200;

/// What to run.
#[derive(Debug, Clone)]
pub struct HostileOptions {
    pub target: Target,
    pub requests: u64,
    pub seed: u64,
    pub connections: usize,
    pub max_duration: Duration,
    pub request_timeout: Duration,
    pub live_feed_wait: Duration,
    pub slow_lanes: usize,
    pub max_body_bytes: usize,
    pub pbkdf2_per_million: u32,
    pub slow_per_mille: u32,
    pub dbs: u32,
    /// Server process (RSS, liveness); found from the port when `None`.
    pub pid: Option<u32>,
    /// The server's stderr log, scanned for panics afterwards.
    pub server_stderr: Option<PathBuf>,
    pub findings_max: usize,
    pub check_consistency: bool,
    /// Print progress lines to stderr every 10 s.
    pub progress: bool,
}

impl HostileOptions {
    /// Defaults for `target`: 100,000 requests, 16 connections, 15 min.
    pub fn new(target: Target) -> HostileOptions {
        HostileOptions {
            target,
            requests: 100_000,
            seed: 1,
            connections: 16,
            max_duration: Duration::from_secs(900),
            request_timeout: Duration::from_secs(30),
            live_feed_wait: Duration::from_secs(2),
            slow_lanes: 32,
            max_body_bytes: 70 << 20,
            pbkdf2_per_million: 100,
            slow_per_mille: 15,
            dbs: 6,
            pid: None,
            server_stderr: None,
            findings_max: 100,
            check_consistency: true,
            progress: false,
        }
    }

    pub fn gen_config(&self) -> GenConfig {
        GenConfig {
            seed: self.seed,
            prefix: format!("stress-{}-", self.seed),
            dbs: self.dbs,
            host: self.target.host.clone(),
            admin_auth: self.target.basic_auth(),
            admin_user: self.target.credentials.as_ref().map(|(u, _)| u.clone()),
            max_body_bytes: self.max_body_bytes,
            pbkdf2_per_million: self.pbkdf2_per_million,
            slow_per_mille: self.slow_per_mille,
        }
    }
}

/// One failure, with what reproduces it.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub kind: String,
    pub index: u64,
    pub label: String,
    pub detail: String,
    /// The request's first bytes, escaped.
    pub request: String,
    /// The response's status line and body start, if any.
    pub response: String,
}

/// The run's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HostileReport {
    pub seed: u64,
    pub requests_planned: u64,
    /// Cases started (each may carry several pipelined requests).
    pub cases: u64,
    /// Requests written (pipelined copies counted).
    pub requests_sent: u64,
    pub responses: u64,
    pub duration_s: f64,
    pub statuses: BTreeMap<u16, u64>,
    /// `"<status> <error>"` of CouchDB-shaped errors.
    pub errors: BTreeMap<String, u64>,
    /// `"<status> <error>"` of every 5xx.
    pub server_errors: BTreeMap<String, u64>,
    /// Statuses of refusals by the HTTP layer (no handler ran).
    pub protocol_rejects: BTreeMap<u16, u64>,
    /// Non-failure outcomes without a judged response.
    pub outcomes: BTreeMap<String, u64>,
    pub failure_counts: BTreeMap<String, u64>,
    /// Failures by request label (family/mutations).
    pub failure_labels: BTreeMap<String, u64>,
    pub findings: Vec<Finding>,
    pub pid: Option<u32>,
    pub rss: RssSummary,
    pub server_alive: Option<bool>,
    pub panics: Vec<String>,
    pub consistency: Option<ConsistencyReport>,
    /// The run stopped early (deadline, server gone); why.
    pub stopped_early: Option<String>,
}

impl HostileReport {
    /// No failure of any kind.
    pub fn ok(&self) -> bool {
        self.failure_counts.is_empty()
            && self.server_alive != Some(false)
            && self.panics.is_empty()
            && self.consistency.as_ref().is_none_or(ConsistencyReport::ok)
    }

    /// A human-readable report.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let rate = self.requests_sent as f64 / self.duration_s.max(1e-9);
        let _ = writeln!(o, "hostile run, seed {}", self.seed);
        let _ = writeln!(
            o,
            "  cases {} of {} planned, requests sent {}, responses {}, {:.1} s ({:.0} requests/s)",
            self.cases,
            self.requests_planned,
            self.requests_sent,
            self.responses,
            self.duration_s,
            rate
        );
        if let Some(why) = &self.stopped_early {
            let _ = writeln!(o, "  stopped early: {why}");
        }
        let _ = writeln!(o, "  statuses: {}", join_map(&self.statuses));
        let _ = writeln!(
            o,
            "  5xx by kind: {}",
            if self.server_errors.is_empty() {
                "none".into()
            } else {
                join_map(&self.server_errors)
            }
        );
        let _ = writeln!(
            o,
            "  protocol-level rejections (no handler ran): {}",
            join_map(&self.protocol_rejects)
        );
        let _ = writeln!(o, "  other outcomes: {}", join_map(&self.outcomes));
        let mut errs: Vec<(&String, &u64)> = self.errors.iter().collect();
        errs.sort_by(|a, b| b.1.cmp(a.1));
        let top: Vec<String> = errs
            .iter()
            .take(12)
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        let _ = writeln!(o, "  top CouchDB errors: {}", top.join(", "));
        o.push_str(&self.rss.render_server(self.pid, self.server_alive, 12));
        let _ = writeln!(o, "  panics in server stderr: {}", self.panics.len());
        for p in self.panics.iter().take(5) {
            let _ = writeln!(o, "    {p}");
        }
        if let Some(c) = &self.consistency {
            o.push_str(&c.render());
        }
        let _ = writeln!(
            o,
            "  failures: {}",
            if self.failure_counts.is_empty() {
                "none".into()
            } else {
                join_map(&self.failure_counts)
            }
        );
        if !self.failure_labels.is_empty() {
            let mut fl: Vec<(&String, &u64)> = self.failure_labels.iter().collect();
            fl.sort_by(|a, b| b.1.cmp(a.1));
            let top: Vec<String> = fl
                .iter()
                .take(15)
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            let _ = writeln!(o, "  failing labels: {}", top.join(", "));
        }
        for f in self.findings.iter().take(30) {
            let _ = writeln!(
                o,
                "  - [{}] #{} {} — {}",
                f.kind, f.index, f.label, f.detail
            );
            let _ = writeln!(o, "      request: {}", f.request);
            if !f.response.is_empty() {
                let _ = writeln!(o, "      response: {}", f.response);
            }
        }
        if !self.findings.is_empty() {
            let _ = writeln!(
                o,
                "  (replay one: settee stress hostile --url URL --seed {} --show INDEX)",
                self.seed
            );
        }
        let _ = writeln!(o, "  verdict: {}", if self.ok() { "PASS" } else { "FAIL" });
        o
    }
}

fn join_map<K: std::fmt::Display, V: std::fmt::Display>(m: &BTreeMap<K, V>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Shared state of a run.
struct Run {
    opts: HostileOptions,
    gen: GenConfig,
    next: AtomicU64,
    stop: AtomicBool,
    deadline: Instant,
    tally: Mutex<HostileReport>,
    connect_failures: AtomicU64,
}

impl Run {
    fn tally(&self) -> std::sync::MutexGuard<'_, HostileReport> {
        self.tally.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn outcome(&self, what: &str) {
        *self.tally().outcomes.entry(what.to_string()).or_default() += 1;
    }

    fn fail(&self, kind: &str, case: &Case, detail: String, resp: Option<&Response>) {
        let mut t = self.tally();
        *t.failure_counts.entry(kind.to_string()).or_default() += 1;
        *t.failure_labels.entry(case.label.clone()).or_default() += 1;
        if t.findings.len() < self.opts.findings_max {
            t.findings.push(Finding {
                kind: kind.to_string(),
                index: case.index,
                label: case.label.clone(),
                detail,
                request: preview(&case.slice(0, 600), 600),
                response: resp.map(describe).unwrap_or_default(),
            });
        }
    }

    /// Judges what one case produced.
    fn judge(&self, case: &Case, responses: &[Response], err: Option<WireError>) {
        {
            let mut t = self.tally();
            t.responses += responses.len() as u64;
        }
        for r in responses {
            let v = verdict(r, case.hint);
            let error_name = match &v {
                Verdict::CouchError(e) if e.is_empty() && case.hint.head => {
                    "(HEAD, no body)".to_string()
                }
                Verdict::CouchError(e) => e.clone(),
                _ => String::new(),
            };
            {
                let mut t = self.tally();
                *t.statuses.entry(r.status).or_default() += 1;
                match &v {
                    Verdict::CouchError(_) => {
                        *t.errors
                            .entry(format!("{} {error_name}", r.status))
                            .or_default() += 1;
                    }
                    Verdict::ProtocolReject => {
                        *t.protocol_rejects.entry(r.status).or_default() += 1
                    }
                    _ => {}
                }
                if r.status >= 500 {
                    let mut kind = if matches!(v, Verdict::ProtocolReject) {
                        "(http layer)".to_string()
                    } else {
                        error_name.clone()
                    };
                    if r.header("server").is_none() && !matches!(v, Verdict::ProtocolReject) {
                        kind.push_str(" (no Server header: answered outside the handler)");
                    }
                    *t.server_errors
                        .entry(format!("{} {kind}", r.status))
                        .or_default() += 1;
                }
            }
            if let Verdict::Bad(why) = &v {
                self.fail("bad_response_shape", case, why.clone(), Some(r));
            }
            // A HEAD's 500 has no body to name it: one that runs design
            // functions is judged as they are.
            let documented = DOCUMENTED_500.contains(&error_name.as_str())
                || ((DESIGN_FUNCTION_500.contains(&error_name.as_str())
                    || error_name == "(HEAD, no body)")
                    && runs_design_functions(&case.head))
                || (REPLICATION_500.contains(&error_name.as_str()) && is_replication(&case.head));
            if r.status == 500 && !matches!(v, Verdict::ProtocolReject) && !documented {
                self.fail(
                    "undocumented_500",
                    case,
                    format!("500 {error_name}"),
                    Some(r),
                );
            }
        }
        let Some(err) = err else { return };
        let last = responses.last();
        match err {
            WireError::Malformed(m) => self.fail("malformed_response", case, m, last),
            // A client that half-closed may see the server abandon the
            // response (hyper closes on a read EOF mid-exchange).
            WireError::Truncated(_) if case.half_close || case.need != Need::Required => {
                self.outcome("truncated_after_client_ended_request")
            }
            WireError::Truncated(m) => self.fail("truncated_response", case, m, last),
            WireError::TooLarge if case.may_block => self.outcome("live_feed_ended_by_client"),
            WireError::TooLarge => self.fail(
                "response_never_ends",
                case,
                format!("body over the {} MiB read limit", BODY_LIMIT >> 20),
                last,
            ),
            WireError::Timeout { .. } if case.may_block => {
                self.outcome("live_feed_ended_by_client")
            }
            WireError::Timeout { partial: true } => self.fail(
                "response_never_ends",
                case,
                "response incomplete at the deadline".into(),
                last,
            ),
            WireError::Timeout { partial: false } => self.fail(
                "no_response_in_time",
                case,
                "no response and no close before the deadline".into(),
                last,
            ),
            WireError::Closed | WireError::Reset(_) => match case.need {
                Need::Required => self.fail(
                    "no_response",
                    case,
                    format!(
                        "{err} (after {} of {} responses)",
                        responses.len(),
                        case.repeat
                    ),
                    last,
                ),
                _ => self.outcome("closed_without_response"),
            },
        }
    }
}

/// Status line and body start of a response.
fn describe(r: &Response) -> String {
    format!("HTTP/1.{} {} {}", r.minor, r.status, preview(&r.body, 300))
}

/// Writes bytes `[start, end)` of a case.
async fn write_range(
    wr: &mut OwnedWriteHalf,
    case: &Case,
    start: usize,
    end: usize,
) -> std::io::Result<()> {
    let mut at = start;
    while at < end {
        let next = (at + WRITE_CHUNK).min(end);
        let piece = if next <= case.head.len() {
            case.head[at..next].to_vec()
        } else {
            case.slice(at, next)
        };
        wr.write_all(&piece).await?;
        at = next;
    }
    Ok(())
}

/// Sends a whole case (`repeat` times) while reading its responses.
async fn exchange(
    conn: &mut Conn,
    case: &Case,
    deadline: Instant,
) -> (Vec<Response>, Option<WireError>) {
    let Conn { rd, wr } = conn;
    let total = case.len();
    let writer = async {
        match case.delivery {
            Delivery::Slow { piece, pause_ms } => {
                let began = Instant::now();
                let mut at = 0;
                while at < total {
                    if began.elapsed() > SLOW_BUDGET {
                        write_range(wr, case, at, total).await?;
                        break;
                    }
                    let next = (at + piece.max(1)).min(total);
                    write_range(wr, case, at, next).await?;
                    at = next;
                    tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                }
            }
            _ => {
                for _ in 0..case.repeat {
                    write_range(wr, case, 0, total).await?;
                }
            }
        }
        if case.half_close || case.need != Need::Required {
            wr.shutdown().await?;
        }
        Ok::<(), std::io::Error>(())
    };
    let reader = async {
        let mut got = Vec::new();
        for _ in 0..case.repeat {
            match rd.read_response(case.hint.head, deadline, BODY_LIMIT).await {
                Ok(r) => {
                    let close = r.close;
                    got.push(r);
                    if close {
                        break;
                    }
                }
                Err(e) => return (got, Some(e)),
            }
        }
        (got, None)
    };
    tokio::pin!(writer);
    tokio::pin!(reader);
    let mut written = false;
    loop {
        tokio::select! {
            w = &mut writer, if !written => {
                written = true;
                if w.is_err() {
                    // The server stopped reading (it may have answered and
                    // closed): whatever it sent is still to be read.
                }
            }
            r = &mut reader => return r,
        }
    }
}

/// Runs one case; returns the connection if it may carry the next one.
async fn run_case(run: &Run, case: &Case, reuse: Option<Conn>) -> Option<Conn> {
    let wait = if case.may_block {
        run.opts.live_feed_wait
    } else {
        run.opts.request_timeout
    };
    match case.delivery {
        Delivery::Cut { at, hold_ms } => {
            let conn = connect(run, case).await?;
            let Conn { mut wr, rd } = conn;
            let _ = write_range(&mut wr, case, 0, at).await;
            tokio::time::sleep(Duration::from_millis(hold_ms)).await;
            drop((wr, rd));
            run.outcome("client_left_mid_request");
            None
        }
        Delivery::NoRead { hold_ms } => {
            let conn = connect(run, case).await?;
            let Conn { mut wr, rd } = conn;
            let _ = tokio::time::timeout(
                Duration::from_millis(hold_ms),
                write_range(&mut wr, case, 0, case.len()),
            )
            .await;
            tokio::time::sleep(Duration::from_millis(hold_ms)).await;
            drop((wr, rd));
            run.outcome("client_never_read");
            None
        }
        Delivery::Whole | Delivery::Slow { .. } => {
            let reused = reuse.is_some();
            let mut conn = match reuse {
                Some(c) => c,
                None => connect(run, case).await?,
            };
            let slow_extra = if matches!(case.delivery, Delivery::Slow { .. }) {
                SLOW_BUDGET
            } else {
                Duration::ZERO
            };
            let deadline = Instant::now() + wait + slow_extra;
            let (mut got, mut err) = exchange(&mut conn, case, deadline).await;
            if reused
                && got.is_empty()
                && matches!(err, Some(WireError::Closed) | Some(WireError::Reset(_)))
            {
                // A keep-alive connection the server had closed: retry once.
                conn = connect(run, case).await?;
                let deadline = Instant::now() + wait + slow_extra;
                (got, err) = exchange(&mut conn, case, deadline).await;
            }
            let reusable = err.is_none()
                && case.reusable
                && got.len() == case.repeat as usize
                && got.last().is_some_and(|r| !r.close);
            run.judge(case, &got, err);
            reusable.then_some(conn)
        }
    }
}

async fn connect(run: &Run, case: &Case) -> Option<Conn> {
    match run.opts.target.connect(Duration::from_secs(10)).await {
        Ok(s) => {
            run.connect_failures.store(0, Ordering::Relaxed);
            Some(Conn::new(s))
        }
        Err(e) => {
            run.fail("connect_failed", case, e.to_string(), None);
            if run.connect_failures.fetch_add(1, Ordering::Relaxed) + 1 >= CONNECT_FAILURES_MAX {
                run.stop.store(true, Ordering::Relaxed);
                run.tally().stopped_early = Some(format!(
                    "{CONNECT_FAILURES_MAX} connections failed in a row"
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

/// One main-lane worker: takes case numbers until none are left.
async fn worker(
    run: Arc<Run>,
    slow: Arc<tokio::sync::Semaphore>,
    lanes: Arc<Mutex<tokio::task::JoinSet<()>>>,
) {
    let mut conn: Option<Conn> = None;
    loop {
        if run.stop.load(Ordering::Relaxed) || Instant::now() >= run.deadline {
            break;
        }
        let i = run.next.fetch_add(1, Ordering::Relaxed);
        if i >= run.opts.requests {
            break;
        }
        let case = gen::generate(&run.gen, i);
        {
            let mut t = run.tally();
            t.cases += 1;
            t.requests_sent += u64::from(case.repeat);
        }
        if case.delivery == Delivery::Whole {
            conn = run_case(&run, &case, conn.take()).await;
        } else {
            let Ok(permit) = slow.clone().acquire_owned().await else {
                break;
            };
            let r = run.clone();
            lanes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .spawn(async move {
                    let _ = run_case(&r, &case, None).await;
                    drop(permit);
                });
        }
    }
}

/// Creates the run's databases (admin credentials required).
async fn setup(opts: &HostileOptions, gen: &GenConfig) -> Result<(), String> {
    if opts.target.credentials.is_none() {
        return Err(
            "the hostile run needs admin credentials in the URL (http://user:pass@host:port)"
                .into(),
        );
    }
    let mut c = crate::client::Client::new(&opts.target);
    c.json("GET", "/", None)
        .await
        .map_err(|e| format!("server not answering: {e}"))?;
    if opts.pbkdf2_per_million > 0 {
        // The run sends wrong admin passwords (to load the password
        // checks): the login lockout would otherwise lock the admin out
        // for the rest of the run. Warn-only, as the run is not about it.
        let r = c
            .request(
                "PUT",
                "/_node/_local/_config/chttpd_auth_lockout/mode",
                Some(br#""warn""#.as_slice()),
            )
            .await
            .map_err(|e| e.to_string())?;
        if r.status != 200 {
            return Err(format!(
                "cannot set the login lockout to warn: {} {}",
                r.status,
                preview(&r.body, 200)
            ));
        }
    }
    for db in gen.initial_dbs() {
        let r = c
            .request("PUT", &format!("/{db}"), None)
            .await
            .map_err(|e| e.to_string())?;
        if r.status != 201 && r.status != 202 && r.status != 412 {
            return Err(format!(
                "cannot create {db}: {} {}",
                r.status,
                preview(&r.body, 200)
            ));
        }
    }
    Ok(())
}

/// Runs the hostile requests, then the checks.
pub async fn run(opts: HostileOptions) -> Result<HostileReport, String> {
    let gen = opts.gen_config();
    setup(&opts, &gen).await?;
    let pid = opts
        .pid
        .or_else(|| procwatch::listener_pid(opts.target.addr.port()));
    procwatch::raise_open_files((opts.connections + opts.slow_lanes) as u64 * 2 + 256);
    let watch = pid.map(|p| RssWatch::start(p, Duration::from_millis(250)));
    let began = Instant::now();
    let run = Arc::new(Run {
        opts: opts.clone(),
        gen,
        next: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        deadline: began + opts.max_duration,
        tally: Mutex::new(HostileReport {
            seed: opts.seed,
            requests_planned: opts.requests,
            pid,
            ..HostileReport::default()
        }),
        connect_failures: AtomicU64::new(0),
    });
    let slow = Arc::new(tokio::sync::Semaphore::new(opts.slow_lanes.max(1)));
    let lanes = Arc::new(Mutex::new(tokio::task::JoinSet::new()));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..opts.connections.max(1) {
        workers.spawn(worker(run.clone(), slow.clone(), lanes.clone()));
    }
    // Progress and liveness.
    let monitor = {
        let run = run.clone();
        tokio::spawn(async move {
            let mut last_print = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if let Some(p) = pid {
                    if !procwatch::alive(p) {
                        run.stop.store(true, Ordering::Relaxed);
                        run.tally().stopped_early = Some(format!("server process {p} is gone"));
                        break;
                    }
                }
                if run.opts.progress && last_print.elapsed() >= Duration::from_secs(10) {
                    last_print = Instant::now();
                    let t = run.tally();
                    eprintln!(
                        "settee stress: {:.0} s, {} cases, {} responses, {} failures, RSS {}",
                        began.elapsed().as_secs_f64(),
                        t.cases,
                        t.responses,
                        t.failure_counts.values().sum::<u64>(),
                        pid.and_then(procwatch::rss_kib)
                            .map_or("?".into(), |k| format!("{} MiB", mib(k)))
                    );
                }
            }
        })
    };
    while workers.join_next().await.is_some() {}
    let pending = std::mem::take(&mut *lanes.lock().unwrap_or_else(|e| e.into_inner()));
    let mut pending = pending;
    while pending.join_next().await.is_some() {}
    let duration = began.elapsed();
    monitor.abort();
    if Instant::now() >= run.deadline && run.next.load(Ordering::Relaxed) < opts.requests {
        let mut t = run.tally();
        if t.stopped_early.is_none() {
            t.stopped_early = Some(format!(
                "time limit of {} s reached",
                opts.max_duration.as_secs()
            ));
        }
    }
    // Let batch-mode writes (flushed within 1 s) land before checking.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let mut report = run.tally().clone();
    report.duration_s = duration.as_secs_f64();
    if let (Some(w), Some(p)) = (watch, pid) {
        report.rss = w.finish(p).await;
    }
    report.server_alive = pid.map(procwatch::alive);
    if report.server_alive != Some(false) && opts.check_consistency {
        let c = consistency::check(&opts.target, &run.gen.prefix, 8).await;
        report.consistency = Some(c);
    }
    if let Some(p) = pid {
        // Figures after the checks, too.
        if let Some(k) = procwatch::rss_kib(p) {
            report.rss.end_kib = k;
            report.rss.peak_kib = report.rss.peak_kib.max(k);
        }
        report.server_alive = Some(procwatch::alive(p));
    }
    if let Some(log) = &opts.server_stderr {
        report.panics = procwatch::panics_in(log)
            .unwrap_or_else(|e| vec![format!("cannot read {}: {e}", log.display())]);
    }
    Ok(report)
}

/// Regenerates case `index` of `opts`' run, sends it alone and returns a
/// printable account of the request and what came back.
pub async fn show(opts: &HostileOptions, index: u64) -> String {
    let gen = opts.gen_config();
    let case = gen::generate(&gen, index);
    let mut out = format!(
        "case #{index} seed {} label {}\nneed {:?}, delivery {:?}, may_block {}, repeat {}, half_close {}\nrequest ({} bytes): {}\n",
        opts.seed,
        case.label,
        case.need,
        case.delivery,
        case.may_block,
        case.repeat,
        case.half_close,
        case.len(),
        preview(&case.slice(0, 4000), 4000)
    );
    let Ok(stream) = opts.target.connect(Duration::from_secs(10)).await else {
        out.push_str("cannot connect\n");
        return out;
    };
    let mut conn = Conn::new(stream);
    let wait = if case.may_block {
        opts.live_feed_wait
    } else {
        opts.request_timeout
    };
    let (got, err) = match case.delivery {
        Delivery::Whole | Delivery::Slow { .. } => {
            exchange(&mut conn, &case, Instant::now() + wait + SLOW_BUDGET).await
        }
        _ => (Vec::new(), None),
    };
    for r in &got {
        out.push_str(&format!(
            "response: HTTP/1.{} {}\n{}\n\n{}\nverdict: {:?}\n",
            r.minor,
            r.status,
            r.headers
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join("\n"),
            preview(&r.body, 2000),
            verdict(r, case.hint)
        ));
    }
    if let Some(e) = err {
        out.push_str(&format!("then: {e}\n"));
    }
    out
}
