//! Interop with a real client: runs the PouchDB test suite in
//! `tests/interop/` (Node's built-in test runner, PouchDB pinned by
//! `tests/interop/package-lock.json`) against the real `settee` binary.
//!
//! The server is started by `tests/common` on a random loopback port; its
//! URL, admin credentials included, reaches the Node tests in `SETTEE_URL`.
//! The Node run is bounded by [`NODE_RUN_TIMEOUT`]; its output is printed
//! when it fails. Missing Node dependencies are a failure, never a skip:
//! `scripts/test` installs them with `npm ci --prefix tests/interop`.
//! (The nano suite in `tests/interop/nano/` has its own driver,
//! `interop_nano.rs`: only the files directly in `tests/interop/` run here.)

mod common;
#[path = "common/interop.rs"]
mod interop;

use std::time::Duration;

use common::{Server, ADMIN};

/// Upper bound for the whole Node run (it takes seconds when healthy).
const NODE_RUN_TIMEOUT: Duration = Duration::from_secs(300);

#[test]
fn pouchdb_interop_suite() {
    let root = interop::workspace_root();
    let modules = root.join("tests/interop/node_modules/pouchdb");
    assert!(
        modules.is_dir(),
        "PouchDB is not installed ({} is missing): run `npm ci --prefix tests/interop` \
         in {} (scripts/test does this before cargo test)",
        modules.display(),
        root.display()
    );
    let files = interop::node_test_files(&root, "tests/interop");
    assert!(
        files.len() >= 3,
        "expected the PouchDB test files in tests/interop/, found {files:?}"
    );

    let server = Server::start();
    let url = format!("http://{}:{}@127.0.0.1:{}", ADMIN.0, ADMIN.1, server.port);
    interop::run_node_suite("PouchDB", &root, &files, &url, NODE_RUN_TIMEOUT);
    drop(server);
}
