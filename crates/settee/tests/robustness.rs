//! Robustness, end to end: the real binary under a short hostile run
//! (5,000 seeded malformed and hostile requests from crates/settee-stress,
//! then its consistency checks) and a short soak (200 keep-alive clients
//! for 5 s), then a restart on the same data directory.
//!
//! Fails on: the server dying or printing a panic, a response that is not
//! well-formed HTTP or is cut short, an application response that is not
//! CouchDB-shaped, an undocumented 500, a request left without answer, an
//! inconsistency between `GET /db`, `_all_docs`, `_changes` and document
//! reads, a soak request that fails or a lost update, and anything the
//! restart does not bring back (databases, counts, `stress*` config).
//!
//! The server is started as `common::Server` starts it (same flags, stdin
//! tied to the test), except that its stderr goes to a file so the run can
//! look for panics in it (`common::Server` discards stderr).
//!
//! [`KNOWN_OPEN`] lists the server bugs this suite found that are still
//! open: they are printed on every run and tolerated so the rest of the
//! suite stays meaningful; delete an entry when its fix lands, and the
//! test then guards the fix.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use settee_stress::hostile::Finding;
use settee_stress::{HostileOptions, SoakOptions, Target};

use common::ADMIN;

/// An open server bug this suite found: the failure kind it shows up as,
/// what it is, and whether a finding is an instance of it.
struct KnownBug {
    kind: &'static str,
    what: &'static str,
    matches: fn(&Finding) -> bool,
}

/// Open server bugs (see bench/RESULTS.md, "Robustness and soak
/// (conformance issue)", for the reproductions).
const KNOWN_OPEN: &[KnownBug] = &[
    KnownBug {
        kind: "truncated_response",
        what: "the response is cut (FIN/RST mid-body) when the client is still sending a large request body the handler did not read (no lingering close)",
        matches: |f| {
            let head = f.request.to_ascii_lowercase();
            let big = head
                .split("content-length: ")
                .nth(1)
                .and_then(|v| v.split('\\').next())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .is_some_and(|n| n > 1 << 20);
            big || head.contains("content-encoding: gzip")
        },
    },
];

/// The server, its stderr log and the stdin that keeps it alive.
struct Spawned {
    child: Child,
    port: u16,
    _stdin: Option<ChildStdin>,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `settee serve` on `dir` as `common::Server::start_in` does, with
/// stderr appended to `log`.
fn spawn(dir: &Path, log: &Path) -> Spawned {
    let admin = format!("{}:{}", ADMIN.0, ADMIN.1);
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("stderr log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_settee"))
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--data",
            dir.to_str().expect("utf-8 path"),
            "--exit-on-stdin-eof",
            "--admin",
            &admin,
        ])
        .env_remove("SETTEE_ADMIN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(err))
        .spawn()
        .expect("start settee");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(first)) = lines.next() {
            let _ = tx.send(first);
        }
        for _ in lines {}
    });
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("server did not print its address in 60 s");
    let port = line
        .strip_prefix("settee listening on http://127.0.0.1:")
        .and_then(|p| p.trim().parse::<u16>().ok())
        .unwrap_or_else(|| panic!("unexpected first line: {line}"));
    let stdin = child.stdin.take();
    Spawned {
        child,
        port,
        _stdin: stdin,
    }
}

/// SIGTERM and a bounded wait for a clean exit.
fn stop(mut s: Spawned) {
    let status = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM failed");
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(st)) = s.child.try_wait() {
            assert!(st.success(), "server exited with {st}");
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("server did not stop within 30 s of SIGTERM");
}

fn admin_get(port: u16, path: &str) -> Value {
    let r = common::call(
        &common::agent(),
        "GET",
        &format!("http://127.0.0.1:{port}{path}"),
        Some(ADMIN),
        &[],
        None,
    );
    assert_eq!(r.status, 200, "GET {path}: {r:?}");
    r.json()
}

/// The `stress*` sections of the server's configuration.
fn stress_config(port: u16) -> Value {
    let all = admin_get(port, "/_node/_local/_config");
    let kept: serde_json::Map<String, Value> = all
        .as_object()
        .expect("config object")
        .iter()
        .filter(|(k, _)| k.starts_with("stress"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Value::Object(kept)
}

#[test]
fn hostile_requests_then_soak_then_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("data");
    let log = tmp.path().join("stderr.log");
    let server = spawn(&dir, &log);
    let url = format!("http://{}:{}@127.0.0.1:{}", ADMIN.0, ADMIN.1, server.port);
    let target = Target::parse(&url).expect("url");
    let pid = server.child.id();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");

    // Hostile requests.
    let mut h = HostileOptions::new(target.clone());
    h.requests = 5_000;
    h.seed = 20_261_124;
    h.connections = 8;
    h.max_duration = Duration::from_secs(40);
    h.request_timeout = Duration::from_secs(10);
    h.max_body_bytes = 9 << 20;
    // Wrong admin passwords cost 0.25 s of server CPU each: the full run
    // (bench/RESULTS.md) covers them.
    h.pbkdf2_per_million = 0;
    h.pid = Some(pid);
    h.server_stderr = Some(log.clone());
    let began = Instant::now();
    let report = runtime
        .block_on(settee_stress::hostile::run(h))
        .expect("hostile run");
    println!("{}", report.render());
    println!("hostile phase: {:.1} s", began.elapsed().as_secs_f64());
    assert!(
        report.responses > 4_000,
        "too few responses: {}",
        report.responses
    );
    assert_eq!(report.server_alive, Some(true), "server died");
    assert!(
        report.panics.is_empty(),
        "server panicked: {:?}",
        report.panics
    );
    let c = report.consistency.as_ref().expect("consistency ran");
    assert!(c.ok(), "consistency: {}", c.render());
    assert!(
        c.dbs.len() >= 7 && c.docs_read > 500,
        "the run wrote too little: {}",
        c.render()
    );
    let mut unexpected = Vec::new();
    for f in &report.findings {
        match KNOWN_OPEN
            .iter()
            .find(|b| b.kind == f.kind && (b.matches)(f))
        {
            Some(KnownBug { what, .. }) => println!(
                "KNOWN OPEN BUG (tolerated): {what}\n  #{} {}: {}",
                f.index, f.label, f.request
            ),
            None => unexpected.push(f),
        }
    }
    let counted: u64 = report.failure_counts.values().sum();
    assert!(
        unexpected.is_empty() && counted as usize == report.findings.len(),
        "{} unexpected failures ({} in all): {:#?}",
        unexpected.len(),
        counted,
        unexpected
    );

    // Soak.
    let mut s = SoakOptions::new(target);
    s.clients = 200;
    s.duration = Duration::from_secs(5);
    s.docs = 2_000;
    s.seed = 7;
    s.pid = Some(pid);
    s.server_stderr = Some(log.clone());
    let soak = runtime.block_on(settee_stress::soak::run(s)).expect("soak");
    println!("{}", soak.render());
    assert!(soak.ok(), "soak failed: {}", soak.render());
    assert!(
        soak.requests > 1_000,
        "soak too slow: {} requests",
        soak.requests
    );

    // Restart: everything written comes back.
    let config_before = stress_config(server.port);
    let dbs_before: Vec<(String, Value)> = c
        .dbs
        .keys()
        .map(|db| {
            (
                db.clone(),
                admin_get(server.port, &format!("/{db}"))["doc_count"].clone(),
            )
        })
        .collect();
    stop(server);
    let server = spawn(&dir, &log);
    for (db, count) in &dbs_before {
        let info = admin_get(server.port, &format!("/{db}"));
        assert_eq!(&info["doc_count"], count, "{db} after restart: {info}");
    }
    assert_eq!(
        stress_config(server.port),
        config_before,
        "stress* config after restart"
    );
    let panics = settee_stress::procwatch::panics_in(&log).expect("stderr log");
    assert!(panics.is_empty(), "server panicked: {panics:?}");
    stop(server);
    println!(
        "robustness test: {:.1} s in all",
        began.elapsed().as_secs_f64()
    );
}

#[test]
fn known_bug_patterns_match_their_reproductions() {
    let finding = |kind: &str, request: &str| Finding {
        kind: kind.into(),
        index: 0,
        label: String::new(),
        detail: String::new(),
        request: request.into(),
        response: String::new(),
    };
    let known = |f: &Finding| {
        KNOWN_OPEN
            .iter()
            .any(|b| b.kind == f.kind && (b.matches)(f))
    };
    // Fixed (descending live feeds end after one pass): no longer tolerated.
    assert!(!known(&finding(
        "response_never_ends",
        "GET /db/_changes?feed=continuous&timeout=28&descending=true HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"
    )));
    assert!(!known(&finding(
        "response_never_ends",
        "GET /db/_changes?feed=continuous&timeout=28 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"
    )));
    assert!(known(&finding(
        "truncated_response",
        "GET /db/_all_docs HTTP/1.1\\r\\nContent-Length: 8029599\\r\\n\\r\\n{\\\"pad\\\""
    )));
    assert!(!known(&finding(
        "truncated_response",
        "GET /db/_all_docs HTTP/1.1\\r\\nContent-Length: 12\\r\\n\\r\\n{}"
    )));
    assert!(!known(&finding(
        "no_response",
        "GET / HTTP/1.1\\r\\n\\r\\n"
    )));
}
