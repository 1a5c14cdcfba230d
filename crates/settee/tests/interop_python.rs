//! Interop with a real client: runs the couchdb3 test suite in
//! `tests/interop-python/` (Python's unittest; couchdb3 from PyPI, pinned
//! with hashes by `tests/interop-python/requirements.txt`) against the real
//! `settee` binary.
//!
//! The suite runs in a venv outside the clone that
//! `tests/interop-python/ensure-venv` makes once per version of the pins
//! (`scripts/test` runs it first; here it is a no-op then, and makes the
//! venv otherwise). The server is started by `tests/common` on a random
//! loopback port; its URL, admin credentials included, reaches the suite in
//! `SETTEE_URL`. Both steps are bounded in time; the output is printed when
//! either fails. A missing Python is a failure, never a skip; the only
//! tests that may be skipped are the [`KNOWN_DIFFERENCES`] (CouchDB's
//! answer asserted, skipped on Settee with the difference as the reason).

mod common;
#[path = "common/interop.rs"]
mod interop;

use std::process::Command;
use std::time::Duration;

use common::{Server, ADMIN};

/// Upper bound for making the venv (a pip install of 8 wheels).
const VENV_TIMEOUT: Duration = Duration::from_secs(600);
/// Upper bound for the whole suite (about 5 s when healthy).
const SUITE_TIMEOUT: Duration = Duration::from_secs(300);
/// At least this many tests must run.
const MIN_TESTS: u64 = 20;

/// The tests of CouchDB's answers that Settee is known not to give yet
/// (`@settee_differs` in the suite skips them on Settee, with the reason).
/// Exactly these may be skipped, so a new skip fails, and one whose
/// difference is gone must be taken off this list and the decorator.
const KNOWN_DIFFERENCES: &[&str] = &[];

#[test]
fn couchdb3_interop_suite() {
    let root = interop::workspace_root();
    let dir = root.join("tests/interop-python");

    let venv = interop::run_bounded(Command::new(dir.join("ensure-venv")), VENV_TIMEOUT);
    let report = venv.report("tests/interop-python/ensure-venv");
    assert!(
        venv.status.is_some_and(|s| s.success()),
        "could not make the couchdb3 venv (needs python3 >= 3.11 with venv: \
         scripts/ensure-deps installs Debian's python3 and python3-venv)\n{report}"
    );
    let python = venv.stdout.trim().to_string();
    assert!(
        python.ends_with("/bin/python") && std::path::Path::new(&python).is_file(),
        "ensure-venv printed no python path\n{report}"
    );

    let server = Server::start();
    let url = format!("http://{}:{}@127.0.0.1:{}", ADMIN.0, ADMIN.1, server.port);
    let mut cmd = Command::new(&python);
    cmd.args(["-m", "unittest", "-v", "test_couchdb3"])
        .current_dir(&dir)
        .env("SETTEE_URL", &url)
        // No __pycache__ in the tree.
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let run = interop::run_bounded(cmd, SUITE_TIMEOUT);
    let report = run.report(&format!(
        "`{python} -m unittest -v test_couchdb3` in tests/interop-python with SETTEE_URL={url}"
    ));
    let Some(status) = run.status else {
        panic!("the couchdb3 interop run did not finish within {SUITE_TIMEOUT:?}\n{report}");
    };
    assert!(
        status.success(),
        "couchdb3 interop tests failed ({status})\n{report}"
    );
    // unittest's summary (on stderr): "Ran N tests in …", then "OK", or
    // "OK (skipped=N)" when something was skipped; with -v each skipped
    // test's line is "NAME (MODULE.CLASS.NAME) ... skipped 'REASON'".
    let ran = run.stderr.lines().find_map(|l| {
        l.strip_prefix("Ran ")?
            .split_once(" test")?
            .0
            .parse::<u64>()
            .ok()
    });
    assert!(
        ran.is_some_and(|n| n >= MIN_TESTS),
        "expected at least {MIN_TESTS} couchdb3 tests, ran {ran:?}\n{report}"
    );
    let mut skipped: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains(" ... skipped "))
        .filter_map(|l| {
            let (_, qualified) = l.split_once(" (test_couchdb3.")?;
            Some(qualified.split_once(')')?.0)
        })
        .collect();
    skipped.sort_unstable();
    let mut known = KNOWN_DIFFERENCES.to_vec();
    known.sort_unstable();
    assert_eq!(
        skipped, known,
        "only the known differences may be skipped (KNOWN_DIFFERENCES)\n{report}"
    );
    let want = if known.is_empty() {
        "OK".to_string()
    } else {
        format!("OK (skipped={})", known.len())
    };
    let verdict = run.stderr.lines().rev().find(|l| !l.trim().is_empty());
    assert_eq!(
        verdict,
        Some(want.as_str()),
        "every other couchdb3 test must pass\n{report}"
    );
    println!(
        "couchdb3 interop: {} tests, all passed but the {} known difference(s) {known:?}, in {:.1?}",
        ran.unwrap_or(0),
        known.len(),
        run.elapsed
    );
    drop(server);
}
