//! The soak: many concurrent keep-alive clients mixing reads and writes on
//! one database for a fixed time, with the server's memory sampled
//! throughout.
//!
//! Workload per request: 80% `GET` of a random document, 15% update
//! (`PUT` with the revision the client last wrote) of a document the
//! client owns, 5% `_all_docs` or `_changes` pages (limit 100). Each
//! client owns the documents whose number ≡ its own modulo the number of
//! clients, so updates never conflict: any status but 2xx (and the
//! documented 503) is an error. Afterwards every document must read back
//! at the revision its owner last wrote (no lost update).
//!
//! Invariants (bounds): clients ≤ what the open-file limit allows; at most
//! `connect_parallel` connects in flight while connecting (before the
//! clock starts); every request has a deadline; latencies are kept as
//! microseconds, one `u32` per request, so memory is 4 bytes × requests.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use crate::client::Client;
use crate::procwatch::{self, RssSummary, RssWatch};
use crate::target::Target;
use crate::wire::{Conn, Response};

/// What to run.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    pub target: Target,
    pub clients: usize,
    pub duration: Duration,
    /// Documents in the soak database (at least one per client is best).
    pub docs: u64,
    pub seed: u64,
    pub request_timeout: Duration,
    pub connect_parallel: usize,
    pub pid: Option<u32>,
    pub server_stderr: Option<PathBuf>,
    pub progress: bool,
}

impl SoakOptions {
    pub fn new(target: Target) -> SoakOptions {
        SoakOptions {
            target,
            clients: 1000,
            duration: Duration::from_secs(60),
            docs: 10_000,
            seed: 1,
            request_timeout: Duration::from_secs(30),
            connect_parallel: 64,
            pid: None,
            server_stderr: None,
            progress: false,
        }
    }
}

/// The soak's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SoakReport {
    pub clients: usize,
    pub connected: usize,
    pub docs: u64,
    pub duration_s: f64,
    pub requests: u64,
    pub requests_per_s: f64,
    pub by_op: BTreeMap<String, u64>,
    pub errors: u64,
    pub error_kinds: BTreeMap<String, u64>,
    pub error_examples: Vec<String>,
    /// 503s (documented: the server is shutting down or overloaded).
    pub documented_503: u64,
    pub reconnects: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// Requests completed in each second of the run.
    pub per_second: Vec<u64>,
    pub pid: Option<u32>,
    pub rss: RssSummary,
    pub server_alive: Option<bool>,
    pub panics: Vec<String>,
    /// Documents whose final revision differs from their owner's last write.
    pub lost_updates: u64,
    pub final_check_error: Option<String>,
}

impl SoakReport {
    pub fn ok(&self) -> bool {
        self.errors == 0
            && self.connected == self.clients
            && self.server_alive != Some(false)
            && self.panics.is_empty()
            && self.lost_updates == 0
            && self.final_check_error.is_none()
            && self.requests > 0
    }

    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "soak: {} clients ({} connected), {} documents, {:.1} s",
            self.clients, self.connected, self.docs, self.duration_s
        );
        let _ = writeln!(
            o,
            "  requests {} ({:.0}/s): {}",
            self.requests,
            self.requests_per_s,
            self.by_op
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            o,
            "  latency ms: p50 {:.2}, p90 {:.2}, p99 {:.2}, p99.9 {:.2}, max {:.2}",
            self.p50_ms, self.p90_ms, self.p99_ms, self.p999_ms, self.max_ms
        );
        let _ = writeln!(
            o,
            "  errors {} {}; documented 503s {}; reconnects {}",
            self.errors,
            if self.error_kinds.is_empty() {
                String::new()
            } else {
                format!(
                    "({})",
                    self.error_kinds
                        .iter()
                        .map(|(k, v)| format!("{k}: {v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            self.documented_503,
            self.reconnects
        );
        for e in self.error_examples.iter().take(5) {
            let _ = writeln!(o, "    e.g. {e}");
        }
        if !self.per_second.is_empty() {
            let min = self.per_second.iter().min().copied().unwrap_or(0);
            let max = self.per_second.iter().max().copied().unwrap_or(0);
            let _ = writeln!(
                o,
                "  requests per second: min {min}, max {max} over {} whole seconds",
                self.per_second.len()
            );
        }
        o.push_str(&self.rss.render_server(self.pid, self.server_alive, 13));
        let _ = writeln!(
            o,
            "  final check: {} lost updates{}; panics in server stderr: {}",
            self.lost_updates,
            self.final_check_error
                .as_ref()
                .map_or(String::new(), |e| format!(", error: {e}")),
            self.panics.len()
        );
        let _ = writeln!(o, "  verdict: {}", if self.ok() { "PASS" } else { "FAIL" });
        o
    }
}

/// Per-client results.
#[derive(Default)]
struct ClientTally {
    latencies_us: Vec<u32>,
    by_op: BTreeMap<&'static str, u64>,
    errors: BTreeMap<String, u64>,
    examples: Vec<String>,
    documented_503: u64,
    reconnects: u64,
    /// (second of the run) → requests completed.
    per_second: Vec<u64>,
    /// Last revision written per owned document.
    revs: Vec<(u64, String)>,
}

struct Shared {
    target: Target,
    auth: String,
    db: String,
    docs: u64,
    clients: u64,
    timeout: Duration,
}

fn doc_id(n: u64) -> String {
    format!("k{n:07}")
}

/// Sets up the soak database with `docs` documents; their revisions.
async fn setup(opts: &SoakOptions, db: &str) -> Result<Vec<String>, String> {
    let mut c = Client::new(&opts.target);
    let path = format!("/{db}");
    let _ = c
        .request("DELETE", &path, None)
        .await
        .map_err(|e| e.to_string())?;
    c.json("PUT", &path, None)
        .await
        .map_err(|e| e.to_string())?;
    let mut revs = Vec::with_capacity(opts.docs as usize);
    let mut n = 0;
    while n < opts.docs {
        let end = (n + 1000).min(opts.docs);
        let docs: Vec<String> = (n..end)
            .map(|i| {
                format!(
                    "{{\"_id\":\"{}\",\"n\":{i},\"v\":0,\"pad\":\"{}\"}}",
                    doc_id(i),
                    "p".repeat(200)
                )
            })
            .collect();
        let res = c
            .json(
                "POST",
                &format!("{path}/_bulk_docs"),
                Some(format!("{{\"docs\":[{}]}}", docs.join(",")).as_bytes()),
            )
            .await
            .map_err(|e| e.to_string())?;
        for r in res.as_array().into_iter().flatten() {
            revs.push(
                r["rev"]
                    .as_str()
                    .ok_or_else(|| format!("bulk write failed: {r}"))?
                    .to_string(),
            );
        }
        n = end;
    }
    if revs.len() as u64 != opts.docs {
        return Err(format!("{} of {} documents written", revs.len(), opts.docs));
    }
    Ok(revs)
}

enum Op {
    Get(u64),
    Put(usize),
    AllDocs(u64),
    Changes(u64),
}

async fn client_loop(
    shared: Arc<Shared>,
    id: u64,
    mut conn: Conn,
    mut revs: Vec<(u64, String)>,
    began: Instant,
    until: Instant,
    seed: u64,
) -> ClientTally {
    let mut rng = StdRng::seed_from_u64(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut t = ClientTally::default();
    let mut counter = 0u64;
    let mut conn_ok = true;
    while Instant::now() < until {
        let roll = rng.random_range(0..100);
        let op = if roll < 80 || (roll < 95 && revs.is_empty()) {
            Op::Get(rng.random_range(0..shared.docs))
        } else if roll < 95 {
            Op::Put(rng.random_range(0..revs.len()))
        } else if roll < 98 {
            Op::AllDocs(rng.random_range(0..shared.docs))
        } else {
            Op::Changes(rng.random_range(0..shared.docs))
        };
        let (name, method, path, body) = match &op {
            Op::Get(n) => ("get", "GET", format!("/{}/{}", shared.db, doc_id(*n)), None),
            Op::Put(i) => {
                counter += 1;
                let (n, rev) = &revs[*i];
                (
                    "put",
                    "PUT",
                    format!("/{}/{}", shared.db, doc_id(*n)),
                    Some(format!(
                        "{{\"_rev\":\"{rev}\",\"n\":{n},\"v\":{counter},\"by\":{id}}}"
                    )),
                )
            }
            Op::AllDocs(n) => (
                "all_docs",
                "GET",
                format!(
                    "/{}/_all_docs?limit=100&startkey=%22{}%22",
                    shared.db,
                    doc_id(*n)
                ),
                None,
            ),
            Op::Changes(n) => (
                "changes",
                "GET",
                format!("/{}/_changes?limit=100&since={n}", shared.db),
                None,
            ),
        };
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\n",
            shared.target.host, shared.auth
        );
        if let Some(b) = &body {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                b.len()
            ));
        }
        req.push_str("\r\n");
        if let Some(b) = &body {
            req.push_str(b);
        }
        if !conn_ok {
            match shared.target.connect(shared.timeout).await {
                Ok(s) => {
                    conn = Conn::new(s);
                    conn_ok = true;
                    t.reconnects += 1;
                }
                Err(e) => {
                    record_error(&mut t, "connect", format!("connect: {e}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let start = Instant::now();
        let result = one(&mut conn, req.as_bytes(), start + shared.timeout).await;
        let us = start.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
        *t.by_op.entry(name).or_default() += 1;
        let sec = began.elapsed().as_secs() as usize;
        if t.per_second.len() <= sec {
            t.per_second.resize(sec + 1, 0);
        }
        t.per_second[sec] += 1;
        t.latencies_us.push(us);
        match result {
            Ok(r) => {
                if r.close {
                    conn_ok = false;
                }
                match r.status {
                    200..=299 => {
                        if let Op::Put(i) = op {
                            match r.json().and_then(|v| v["rev"].as_str().map(str::to_string)) {
                                Some(rev) => revs[i].1 = rev,
                                None => record_error(
                                    &mut t,
                                    "put_without_rev",
                                    crate::check::preview(&r.body, 200),
                                ),
                            }
                        }
                    }
                    503 => t.documented_503 += 1,
                    s => record_error(
                        &mut t,
                        &format!("{name} {s}"),
                        format!(
                            "{method} {path}: {s} {}",
                            crate::check::preview(&r.body, 200)
                        ),
                    ),
                }
            }
            Err(e) => {
                conn_ok = false;
                record_error(
                    &mut t,
                    &format!("{name} transport"),
                    format!("{method} {path}: {e}"),
                );
            }
        }
    }
    t.revs = revs;
    t
}

fn record_error(t: &mut ClientTally, kind: &str, example: String) {
    *t.errors.entry(kind.to_string()).or_default() += 1;
    if t.examples.len() < 3 {
        t.examples.push(example);
    }
}

async fn one(conn: &mut Conn, req: &[u8], deadline: Instant) -> Result<Response, String> {
    conn.wr
        .write_all(req)
        .await
        .map_err(|e| format!("write: {e}"))?;
    conn.rd
        .read_response(false, deadline, 64 << 20)
        .await
        .map_err(|e| e.to_string())
}

/// Nearest-rank percentile of sorted values, in ms.
fn pct_ms(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    f64::from(sorted[rank.clamp(1, sorted.len()) - 1]) / 1000.0
}

/// Runs the soak.
pub async fn run(opts: SoakOptions) -> Result<SoakReport, String> {
    let auth = opts
        .target
        .basic_auth()
        .ok_or("the soak needs admin credentials in the URL (http://user:pass@host:port)")?;
    let fd_limit = procwatch::raise_open_files(opts.clients as u64 + 256);
    if fd_limit < opts.clients as u64 + 64 {
        return Err(format!(
            "open-file limit {fd_limit} is too low for {} clients (raise ulimit -n)",
            opts.clients
        ));
    }
    let pid = opts
        .pid
        .or_else(|| procwatch::listener_pid(opts.target.addr.port()));
    if let Some(limit) = pid.and_then(procwatch::open_files_limit) {
        if limit < opts.clients as u64 + 64 {
            return Err(format!(
                "the server's open-file limit {limit} is too low for {} clients",
                opts.clients
            ));
        }
    }
    let db = format!("stress-soak-{}", opts.seed);
    let revs = setup(&opts, &db).await?;
    let shared = Arc::new(Shared {
        target: opts.target.clone(),
        auth,
        db: db.clone(),
        docs: opts.docs,
        clients: opts.clients as u64,
        timeout: opts.request_timeout,
    });
    // Connect everyone before the clock starts.
    let sem = Arc::new(tokio::sync::Semaphore::new(opts.connect_parallel.max(1)));
    let mut connecting = tokio::task::JoinSet::new();
    for i in 0..opts.clients {
        let (sem, target) = (sem.clone(), opts.target.clone());
        connecting.spawn(async move {
            let _p = sem.acquire_owned().await;
            (i, target.connect(Duration::from_secs(30)).await)
        });
    }
    let mut conns: Vec<Option<Conn>> = (0..opts.clients).map(|_| None).collect();
    let mut connect_errors = Vec::new();
    while let Some(r) = connecting.join_next().await {
        match r {
            Ok((i, Ok(s))) => conns[i] = Some(Conn::new(s)),
            Ok((_, Err(e))) => connect_errors.push(e.to_string()),
            Err(e) => connect_errors.push(e.to_string()),
        }
    }
    let connected = conns.iter().filter(|c| c.is_some()).count();
    let watch = pid.map(|p| RssWatch::start(p, Duration::from_millis(500)));
    let began = Instant::now();
    let until = began + opts.duration;
    let mut tasks = tokio::task::JoinSet::new();
    // Client i owns the documents n with n % clients == i.
    let mut owned: Vec<Vec<(u64, String)>> = vec![Vec::new(); opts.clients];
    for (n, rev) in revs.into_iter().enumerate() {
        owned[n % opts.clients].push((n as u64, rev));
    }
    for (i, conn) in conns.into_iter().enumerate() {
        let Some(conn) = conn else { continue };
        let mine = std::mem::take(&mut owned[i]);
        tasks.spawn(client_loop(
            shared.clone(),
            i as u64,
            conn,
            mine,
            began,
            until,
            opts.seed,
        ));
    }
    let progress = opts.progress.then(|| {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                eprintln!(
                    "settee stress soak: {:.0} s, RSS {}",
                    began.elapsed().as_secs_f64(),
                    pid.and_then(procwatch::rss_kib)
                        .map_or("?".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
                );
            }
        })
    });
    let mut report = SoakReport {
        clients: opts.clients,
        connected,
        docs: opts.docs,
        pid,
        ..SoakReport::default()
    };
    for e in connect_errors.iter().take(3) {
        report.error_examples.push(format!("connect: {e}"));
    }
    let mut lat = Vec::new();
    let mut per_second: Vec<u64> = Vec::new();
    let mut final_revs: Vec<(u64, String)> = Vec::with_capacity(opts.docs as usize);
    while let Some(done) = tasks.join_next().await {
        let Ok(t) = done else {
            report.errors += 1;
            *report
                .error_kinds
                .entry("client task failed".into())
                .or_default() += 1;
            continue;
        };
        lat.extend_from_slice(&t.latencies_us);
        for (k, v) in t.by_op {
            *report.by_op.entry(k.to_string()).or_default() += v;
        }
        for (k, v) in t.errors {
            report.errors += v;
            *report.error_kinds.entry(k).or_default() += v;
        }
        for e in t.examples {
            if report.error_examples.len() < 10 {
                report.error_examples.push(e);
            }
        }
        report.documented_503 += t.documented_503;
        report.reconnects += t.reconnects;
        if per_second.len() < t.per_second.len() {
            per_second.resize(t.per_second.len(), 0);
        }
        for (i, n) in t.per_second.iter().enumerate() {
            per_second[i] += n;
        }
        final_revs.extend(t.revs);
    }
    // Clients that never connected still own their documents.
    final_revs.extend(owned.into_iter().flatten());
    let elapsed = began.elapsed();
    if let Some(p) = progress {
        p.abort();
    }
    report.duration_s = elapsed.as_secs_f64();
    report.requests = lat.len() as u64;
    report.requests_per_s = report.requests as f64 / report.duration_s.max(1e-9);
    lat.sort_unstable();
    report.p50_ms = pct_ms(&lat, 50.0);
    report.p90_ms = pct_ms(&lat, 90.0);
    report.p99_ms = pct_ms(&lat, 99.0);
    report.p999_ms = pct_ms(&lat, 99.9);
    report.max_ms = lat.last().map_or(0.0, |&m| f64::from(m) / 1000.0);
    // Whole seconds only (the last one is partial).
    per_second.truncate(opts.duration.as_secs() as usize);
    report.per_second = per_second;
    if let (Some(w), Some(p)) = (watch, pid) {
        report.rss = w.finish(p).await;
    }
    // No lost update: every document is at its owner's last revision.
    match final_check(
        &opts.target,
        &db,
        &final_revs,
        shared.clients.clamp(1, 16) as usize,
    )
    .await
    {
        Ok(lost) => report.lost_updates = lost,
        Err(e) => report.final_check_error = Some(e),
    }
    report.server_alive = pid.map(procwatch::alive);
    if let Some(log) = &opts.server_stderr {
        report.panics = procwatch::panics_in(log)
            .unwrap_or_else(|e| vec![format!("cannot read {}: {e}", log.display())]);
    }
    Ok(report)
}

async fn final_check(
    target: &Target,
    db: &str,
    revs: &[(u64, String)],
    parallel: usize,
) -> Result<u64, String> {
    let chunk = revs.len().div_ceil(parallel).max(1);
    let mut tasks = tokio::task::JoinSet::new();
    for part in revs.chunks(chunk) {
        let (part, target, db) = (part.to_vec(), target.clone(), db.to_string());
        tasks.spawn(async move {
            let mut c = Client::new(&target);
            let mut lost = 0u64;
            for (n, rev) in part {
                let d = c
                    .json("GET", &format!("/{db}/{}", doc_id(n)), None)
                    .await
                    .map_err(|e| e.to_string())?;
                if d["_rev"].as_str() != Some(rev.as_str()) {
                    lost += 1;
                }
            }
            Ok::<u64, String>(lost)
        });
    }
    let mut lost = 0;
    while let Some(r) = tasks.join_next().await {
        lost += r.map_err(|e| e.to_string())??;
    }
    let mut c = Client::new(target);
    let info = c
        .json("GET", &format!("/{db}"), None)
        .await
        .map_err(|e| e.to_string())?;
    if info["doc_count"].as_u64() != Some(revs.len() as u64) {
        return Err(format!(
            "doc_count {} after the soak, {} expected",
            info["doc_count"],
            revs.len()
        ));
    }
    Ok(lost)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<u32> = (1..=100).map(|x| x * 1000).collect();
        assert_eq!(pct_ms(&v, 50.0), 50.0);
        assert_eq!(pct_ms(&v, 99.0), 99.0);
        assert_eq!(pct_ms(&v, 100.0), 100.0);
        assert_eq!(pct_ms(&[], 50.0), 0.0);
    }
}
