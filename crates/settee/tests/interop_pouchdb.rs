//! Interop with a real client: runs the PouchDB test suite in
//! `tests/interop/` (Node's built-in test runner, PouchDB pinned by
//! `tests/interop/package-lock.json`) against the real `settee` binary.
//!
//! The server is started by `tests/common` on a random loopback port; its
//! URL, admin credentials included, reaches the Node tests in `SETTEE_URL`.
//! The Node run is bounded by [`NODE_RUN_TIMEOUT`]; its output is printed
//! when it fails. Missing Node dependencies are a failure, never a skip:
//! `scripts/test` installs them with `npm ci --prefix tests/interop`.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, ADMIN};

/// Upper bound for the whole Node run (it takes seconds when healthy).
const NODE_RUN_TIMEOUT: Duration = Duration::from_secs(300);

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// The test files, relative to the workspace root, sorted. Named
/// explicitly (rather than passing the directory) so every Node version
/// runs exactly these files and never `helpers.js`.
fn test_files(root: &Path) -> Vec<String> {
    let dir = root.join("tests/interop");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.ends_with(".test.js"))
        .map(|name| format!("tests/interop/{name}"))
        .collect();
    files.sort();
    files
}

/// `# name N` from the TAP summary.
fn tap_count(output: &str, name: &str) -> Option<u64> {
    output.lines().rev().find_map(|line| {
        line.strip_prefix("# ")?
            .strip_prefix(name)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Kills the Node process group (the runner and its per-file children).
fn kill_group(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .status();
}

#[test]
fn pouchdb_interop_suite() {
    let root = workspace_root();
    let modules = root.join("tests/interop/node_modules/pouchdb");
    assert!(
        modules.is_dir(),
        "PouchDB is not installed ({} is missing): run `npm ci --prefix tests/interop` \
         in {} (scripts/test does this before cargo test)",
        modules.display(),
        root.display()
    );
    let node_version = Command::new("node").arg("--version").output();
    let node_version = match node_version {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        other => panic!("Node.js (v20 or later) is required on PATH to run the PouchDB interop tests: {other:?}"),
    };
    let files = test_files(&root);
    assert!(
        files.len() >= 3,
        "expected the PouchDB test files in tests/interop/, found {files:?}"
    );

    let server = Server::start();
    let url = format!("http://{}:{}@127.0.0.1:{}", ADMIN.0, ADMIN.1, server.port);

    let started = Instant::now();
    let mut child = {
        use std::os::unix::process::CommandExt;
        Command::new("node")
            .arg("--test")
            .arg("--test-reporter=tap")
            .args(&files)
            .current_dir(&root)
            .env("SETTEE_URL", &url)
            .env("NODE_ENV", "test")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so a timeout kills the per-file children too.
            .process_group(0)
            .spawn()
            .expect("start node --test")
    };
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
        if let Some(status) = child.try_wait().expect("wait for node") {
            break Some(status);
        }
        if started.elapsed() > NODE_RUN_TIMEOUT {
            kill_group(pid);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let elapsed = started.elapsed();
    let stdout = out_reader.join().expect("stdout reader");
    let stderr = err_reader.join().expect("stderr reader");
    let report = format!(
        "node {node_version}, `node --test {}` with SETTEE_URL={url}, {elapsed:.1?}\n\
         --- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        files.join(" ")
    );

    let Some(status) = status else {
        panic!("the PouchDB interop run did not finish within {NODE_RUN_TIMEOUT:?}\n{report}");
    };
    assert!(
        status.success(),
        "PouchDB interop tests failed ({status})\n{report}"
    );
    let tests = tap_count(&stdout, "tests");
    let pass = tap_count(&stdout, "pass");
    assert!(
        tests.is_some_and(|t| t > 0) && pass == tests,
        "expected every PouchDB test to pass (none skipped): tests={tests:?} pass={pass:?}\n{report}"
    );
    for zero in ["fail", "cancelled", "skipped", "todo"] {
        assert_eq!(
            tap_count(&stdout, zero),
            Some(0),
            "`# {zero}` must be 0\n{report}"
        );
    }
    println!(
        "PouchDB interop: {} tests passed in {elapsed:.1?} (node {node_version})",
        tests.unwrap_or(0)
    );
    drop(server);
}
