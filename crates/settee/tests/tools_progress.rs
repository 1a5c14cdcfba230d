//! The progress bar of the operator tools: drawn on stderr when stderr is a
//! terminal (here a pseudo-terminal from util-linux `script`), absent when
//! it is not, and never mixed into stdout.

mod common;
mod tools_support;

use std::process::Command;

use serde_json::{json, Value};
use tools_support::*;

const DOCS: usize = 3000;

fn load(h: &Http, db: &str) {
    ok(&run(&["mkdb", &db_url(common::shared(), db)], b""));
    let docs: Vec<Value> = (0..DOCS)
        .map(|i| json!({"_id": format!("d{i:06}"), "n": i}))
        .collect();
    h.ok(
        "POST",
        &format!("/{db}/_bulk_docs"),
        Some(&json!({ "docs": docs })),
    );
}

/// Removes ANSI escape sequences so the bar's text can be matched.
fn plain(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes).replace('\r', "\n");
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // Skip "ESC [ params letter".
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn copy_draws_a_progress_bar_on_a_terminal_only() {
    let server = common::shared();
    let h = Http::settee(server);
    load(&h, "progress_src");
    let (src, dst_tty, dst_pipe) = (
        db_url(server, "progress_src"),
        db_url(server, "progress_tty"),
        db_url(server, "progress_pipe"),
    );
    // On a terminal: `script` gives the tool a pseudo-terminal and copies
    // what it draws to our stdout.
    let cmd = format!(
        "{} copy {src} {dst_tty} --create-target",
        env!("CARGO_BIN_EXE_settee")
    );
    let mut script = Command::new("script");
    script
        .args(["-qec", &cmd, "/dev/null"])
        .env_remove("SETTEE_URL");
    let out = run_cmd(script, b"");
    assert!(out.status.success(), "script/copy failed: {}", stderr(&out));
    let drawn = plain(&out.stdout);
    assert!(
        drawn.contains("3,000/3,000 docs"),
        "no finished bar in: {drawn}"
    );
    assert!(drawn.contains("docs/s"), "no rate in the bar: {drawn}");
    // Not a terminal: no bar, only the summary line, and stdout stays empty.
    let out = run(&["copy", &src, &dst_pipe, "--create-target"], b"");
    let err = ok(&out);
    assert!(out.stdout.is_empty(), "copy wrote to stdout");
    assert!(
        !err.contains("docs/s  ETA"),
        "a bar was drawn without a terminal: {err}"
    );
    assert!(
        err.contains(&format!("{DOCS} documents")),
        "no summary: {err}"
    );
    for db in ["progress_tty", "progress_pipe"] {
        assert_eq!(h.ok("GET", &format!("/{db}"), None)["doc_count"], DOCS);
    }
}
