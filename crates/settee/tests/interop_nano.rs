//! Interop with a real client: runs the nano test suite in
//! `tests/interop/nano/` (Node's built-in test runner; nano, the official
//! CouchDB client for Node, pinned by `tests/interop/package-lock.json`)
//! against the real `settee` binary.
//!
//! The server is started by `tests/common` on a random loopback port; its
//! URL, admin credentials included, reaches the Node tests in `SETTEE_URL`.
//! The Node run is bounded by [`NODE_RUN_TIMEOUT`]; its output is printed
//! when it fails. Missing Node dependencies are a failure, never a skip:
//! `scripts/test` installs them with `npm ci --prefix tests/interop`.

mod common;
#[path = "common/interop.rs"]
mod interop;

use std::time::Duration;

use common::{Server, ADMIN};

/// Upper bound for the whole Node run (about 15 s when healthy).
const NODE_RUN_TIMEOUT: Duration = Duration::from_secs(300);

#[test]
fn nano_interop_suite() {
    let root = interop::workspace_root();
    let modules = root.join("tests/interop/node_modules/nano");
    assert!(
        modules.is_dir(),
        "nano is not installed ({} is missing): run `npm ci --prefix tests/interop` \
         in {} (scripts/test does this before cargo test)",
        modules.display(),
        root.display()
    );
    let files = interop::node_test_files(&root, "tests/interop/nano");
    assert!(
        files.len() >= 10,
        "expected the nano test files in tests/interop/nano/, found {files:?}"
    );

    let server = Server::start();
    let url = format!("http://{}:{}@127.0.0.1:{}", ADMIN.0, ADMIN.1, server.port);
    let tests = interop::run_node_suite("nano", &root, &files, &url, NODE_RUN_TIMEOUT);
    assert!(tests >= 60, "expected at least 60 nano tests, ran {tests}");
    drop(server);
}
