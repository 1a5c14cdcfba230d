//! The console's own logic under `cargo test`: runs `npm test` in
//! `console/` (esbuild bundles `test/*.test.ts`, Node's test runner runs
//! them). The crate's build has installed `console/node_modules` from the
//! lockfile before any test of it runs.

use std::path::Path;
use std::process::Command;

#[test]
fn console_unit_tests_pass() {
    let console = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../console");
    let out = Command::new("node")
        .arg("test/run.mjs")
        .current_dir(&console)
        .output()
        .expect("run node (nodejs, from scripts/ensure-deps)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "console unit tests failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("# fail 0"), "{stdout}");
}
