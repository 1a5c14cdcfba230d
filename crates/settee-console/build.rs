//! Builds the console's bundle from `console/` into `OUT_DIR/dist` and
//! writes `OUT_DIR/assets.rs`, the table `src/lib.rs` serves.
//!
//! - `npm ci` runs only when `console/package-lock.json` differs from the
//!   one the installed `console/node_modules` came from (a stamp file in
//!   it holds the lockfile's hash), so the bundle is built from exactly the
//!   pinned packages and a rebuild costs no network.
//! - `node build.mjs OUT` (esbuild) runs whenever a source changed (cargo
//!   reruns this script on changes under `console/src`, its `index.html`,
//!   `build.mjs`, `package.json` and the lockfile).
//! - The bundle's total size is bounded by [`BUNDLE_LIMIT`]: a build over
//!   it fails, so growth is a decision (raise it with a reason, see
//!   docs/adr/0012-web-console.md), not an accident.
//!
//! Nothing it writes is committed: `OUT_DIR` is cargo's, `node_modules` is
//! ignored by git.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Largest total size of the bundle's files, uncompressed (the server
/// gzips them on the wire). Measured at 0.1.0: see the ADR.
const BUNDLE_LIMIT: u64 = 512 * 1024;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let console = manifest.join("../../console");
    let console = console.canonicalize().unwrap_or(console);
    for p in [
        "src",
        "index.html",
        "build.mjs",
        "package.json",
        "package-lock.json",
    ] {
        println!("cargo:rerun-if-changed={}", console.join(p).display());
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let dist = out.join("dist");

    install(&console);
    let _ = std::fs::remove_dir_all(&dist);
    run(
        Command::new("node")
            .arg("build.mjs")
            .arg(&dist)
            .current_dir(&console),
        "node build.mjs (esbuild)",
    );

    let mut files = Vec::new();
    collect(&dist, &dist, &mut files);
    files.sort();
    let total: u64 = files
        .iter()
        .map(|(_, p)| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    if total > BUNDLE_LIMIT {
        panic!(
            "the console's bundle is {total} bytes, over its limit of {BUNDLE_LIMIT} \
             (crates/settee-console/build.rs BUNDLE_LIMIT; see docs/adr/0012-web-console.md)"
        );
    }
    let mut table = String::new();
    writeln!(table, "/// Bytes of every file of the bundle together.").unwrap();
    writeln!(table, "pub const BUNDLE_BYTES: u64 = {total};").unwrap();
    writeln!(table, "/// The bundle's files, sorted by path.").unwrap();
    writeln!(table, "pub static ASSETS: &[Asset] = &[").unwrap();
    for (rel, path) in &files {
        let bytes = std::fs::read(path).expect("read a bundle file");
        let etag = format!("\"{:016x}\"", xxhash_rust::xxh3::xxh3_64(&bytes));
        writeln!(
            table,
            "    Asset {{ path: {rel:?}, etag: {etag:?}, body: include_bytes!({:?}) }},",
            path.display().to_string()
        )
        .unwrap();
    }
    writeln!(table, "];").unwrap();
    std::fs::write(out.join("assets.rs"), table).expect("write assets.rs");
}

/// `npm ci` unless `node_modules` was installed from this very lockfile.
fn install(console: &Path) {
    let lock = std::fs::read(console.join("package-lock.json"))
        .expect("console/package-lock.json (the console's pinned packages)");
    let want = format!("{:016x}\n", xxhash_rust::xxh3::xxh3_64(&lock));
    let stamp = console.join("node_modules/.settee-lock-stamp");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == want) {
        return;
    }
    run(
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(console),
        "npm ci in console/ (node and npm come from scripts/ensure-deps)",
    );
    std::fs::write(&stamp, want).expect("write node_modules/.settee-lock-stamp");
}

fn run(cmd: &mut Command, what: &str) {
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{what} failed: {s}"),
        Err(e) => panic!("{what} could not start: {e}"),
    }
}

/// Every file under `dir`, as (path relative to `root` with `/`, path).
fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for e in entries {
        let p = e.expect("a bundle entry").path();
        if p.is_dir() {
            collect(root, &p, out);
        } else {
            let rel = p.strip_prefix(root).expect("under the bundle's root");
            let rel = rel.to_string_lossy().replace('\\', "/");
            out.push((rel, p));
        }
    }
}
