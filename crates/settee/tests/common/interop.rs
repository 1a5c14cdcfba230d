//! Running a real client's own test suite (Node's test runner, Python's
//! unittest) against the real server, for the interop tests
//! (`interop_pouchdb.rs`, `interop_nano.rs`, `interop_python.rs`): the
//! client runs in its own process group, bounded in time (the whole group
//! is killed at the limit), with its output kept for the failure report and
//! the proxy variables removed (its requests go to loopback only, never
//! through a proxy the environment names).
//!
//! Included by those tests with `#[path = "common/interop.rs"] mod interop;`
//! (not through `common`, so the other tests do not compile it).

#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The environment variables HTTP clients (axios, httpx…) take a proxy from.
const PROXY_VARS: [&str; 8] = [
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
];

/// The workspace root (where `tests/interop` is).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// A finished (or timed-out) client run.
pub struct Run {
    /// `None` when it was killed at the time limit.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    /// What ran, how long, and everything it printed.
    pub fn report(&self, what: &str) -> String {
        format!(
            "{what}, {:.1?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` to its end or until `timeout`, whichever comes first.
pub fn run_bounded(mut cmd: Command, timeout: Duration) -> Run {
    use std::os::unix::process::CommandExt;
    for var in PROXY_VARS {
        cmd.env_remove(var);
    }
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout kills its children too.
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let pid = child.id();
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the client") {
            break Some(status);
        }
        if started.elapsed() > timeout {
            kill_group(pid);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let elapsed = started.elapsed();
    Run {
        status,
        stdout: out_reader.join().expect("stdout reader"),
        stderr: err_reader.join().expect("stderr reader"),
        elapsed,
    }
}

/// Kills a process group (a client run and its children).
fn kill_group(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .status();
}

/// `node --version`; a missing Node.js is a failure, never a skip.
pub fn node_version() -> String {
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        other => {
            panic!("Node.js (v20 or later) is required on PATH to run the interop tests: {other:?}")
        }
    }
}

/// The `*.test.js` files directly in `root/rel`, as paths relative to
/// `root`, sorted. Named explicitly (rather than passing the directory) so
/// every Node version runs exactly these files and never a helper.
pub fn node_test_files(root: &Path, rel: &str) -> Vec<String> {
    let dir = root.join(rel);
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.ends_with(".test.js"))
        .map(|name| format!("{rel}/{name}"))
        .collect();
    files.sort();
    files
}

/// `# name N` from a TAP summary.
pub fn tap_count(output: &str, name: &str) -> Option<u64> {
    output.lines().rev().find_map(|line| {
        line.strip_prefix("# ")?
            .strip_prefix(name)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Runs `node --test --test-reporter=tap FILES` from `root` with
/// `SETTEE_URL=url` and asserts that it finished in time and that every
/// test passed (none failed, cancelled, skipped or todo). Returns the
/// number of tests.
pub fn run_node_suite(
    suite: &str,
    root: &Path,
    files: &[String],
    url: &str,
    timeout: Duration,
) -> u64 {
    let node = node_version();
    let mut cmd = Command::new("node");
    cmd.arg("--test")
        .arg("--test-reporter=tap")
        .args(files)
        .current_dir(root)
        .env("SETTEE_URL", url)
        .env("NODE_ENV", "test");
    let run = run_bounded(cmd, timeout);
    let report = run.report(&format!(
        "node {node}, `node --test {}` with SETTEE_URL={url}",
        files.join(" ")
    ));
    let Some(status) = run.status else {
        panic!("the {suite} interop run did not finish within {timeout:?}\n{report}");
    };
    assert!(
        status.success(),
        "{suite} interop tests failed ({status})\n{report}"
    );
    let tests = tap_count(&run.stdout, "tests");
    let pass = tap_count(&run.stdout, "pass");
    assert!(
        tests.is_some_and(|t| t > 0) && pass == tests,
        "expected every {suite} test to pass (none skipped): tests={tests:?} pass={pass:?}\n{report}"
    );
    for zero in ["fail", "cancelled", "skipped", "todo"] {
        assert_eq!(
            tap_count(&run.stdout, zero),
            Some(0),
            "`# {zero}` must be 0\n{report}"
        );
    }
    let tests = tests.unwrap_or(0);
    println!(
        "{suite} interop: {tests} tests passed in {:.1?} (node {node})",
        run.elapsed
    );
    tests
}
