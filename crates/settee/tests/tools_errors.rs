//! Failure paths of the operator tools, against the real binary and a real
//! server: every one exits non-zero with a message that says what went
//! wrong, and nothing is silently dropped.

mod common;
mod tools_support;

use serde_json::{json, Value};
use tools_support::*;

fn doc_count(h: &Http, db: &str) -> u64 {
    h.ok("GET", &format!("/{db}"), None)["doc_count"]
        .as_u64()
        .unwrap()
}

/// stderr lines that are JSON objects (the per-item reports).
fn reports(err: &str) -> Vec<Value> {
    err.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .collect()
}

#[test]
fn malformed_lines_are_reported_by_number_and_the_rest_is_written() {
    let server = common::shared();
    let h = Http::settee(server);
    ok(&run(&["mkdb", &db_url(server, "bad_lines")], b""));
    let long = format!("{{\"_id\":\"long\",\"x\":\"{}\"}}", "z".repeat(300));
    let input = format!(
        "{{\"_id\":\"a\"}}\n{{\"_id\": \"b\",\n[1,2]\n\n{{\"_id\":\"c\"}}\r\n{long}\nnot json\n{{\"_id\":\"d\"}}"
    );
    let out = run(
        &[
            "post-docs",
            &db_url(server, "bad_lines"),
            "--max-line-bytes",
            "200",
        ],
        input.as_bytes(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<u64> = reports(&err)
        .iter()
        .map(|r| r["line"].as_u64().expect("line number"))
        .collect();
    assert_eq!(lines, vec![2, 3, 6, 7], "{err}");
    assert!(err.contains("line 6: longer than 200 bytes"), "{err}");
    assert!(err.contains("4 malformed input lines"), "{err}");
    assert_eq!(doc_count(&h, "bad_lines"), 3);
    for id in ["a", "c", "d"] {
        assert_eq!(h.req("GET", &format!("/bad_lines/{id}"), None).status, 200);
    }
}

#[test]
fn per_document_failures_are_reported_and_fail_the_run() {
    let server = common::shared();
    let h = Http::settee(server);
    ok(&run(&["mkdb", &db_url(server, "doc_fail")], b""));
    h.ok("PUT", "/doc_fail/taken", Some(&json!({"v": 1})));
    let input = "{\"_id\":\"x1\"}\n{\"_id\":\"taken\",\"v\":2}\n{\"_id\":\"x2\"}\n";
    let out = run(
        &["post-docs", &db_url(server, "doc_fail")],
        input.as_bytes(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let r = reports(&err);
    assert_eq!(r.len(), 1, "{err}");
    assert_eq!(r[0]["id"], "taken");
    assert_eq!(r[0]["error"], "conflict");
    assert_eq!(r[0]["line"], 2);
    assert!(r[0]["reason"].is_string());
    assert_eq!(doc_count(&h, "doc_fail"), 3);
}

#[test]
fn unreachable_server_fails_clearly() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/db");
    for args in [
        vec!["ls-docs", url.as_str(), "--retries", "1"],
        vec!["mkdb", url.as_str(), "--retries", "0"],
        vec!["copy", url.as_str(), url.as_str(), "--retries", "0"],
    ] {
        let out = run(&args, b"");
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        assert!(
            err.contains("unreachable") || err.contains("cannot connect"),
            "{err}"
        );
        assert!(out.stdout.is_empty());
    }
    let out = run(&["post-docs", url.as_str(), "--retries", "0"], b"{}\n");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn bad_credentials_and_missing_databases() {
    let server = common::shared();
    let h = Http::settee(server);
    h.ok("PUT", "/auth_db", None);
    let wrong = format!("http://admin:wrong@127.0.0.1:{}/auth_db", server.port);
    let out = run(&["ls-docs", &wrong], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("401"), "{err}");
    assert!(
        !err.contains("wrong"),
        "the password must not be printed: {err}"
    );

    let out = run(&["ls-docs", &db_url(server, "no_such_db")], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));

    let out = run(&["post-docs", &db_url(server, "no_such_db")], b"{}\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("does not exist"));

    let out = run(
        &[
            "copy",
            &db_url(server, "auth_db"),
            &db_url(server, "no_such_db"),
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--create-target"), "{}", stderr(&out));
    assert_eq!(h.req("GET", "/no_such_db", None).status, 404);
}

#[test]
fn mkdb_and_rmdb() {
    let server = common::shared();
    let h = Http::settee(server);
    let url = db_url(server, "made");
    ok(&run(&["mkdb", &url], b""));
    assert_eq!(h.req("GET", "/made", None).status, 200);
    let out = run(&["mkdb", &url], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("already exists"));

    // No terminal and no --yes: refuse, keep the database.
    let out = run(&["rmdb", &url], b"made\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--yes"), "{}", stderr(&out));
    assert_eq!(h.req("GET", "/made", None).status, 200);

    ok(&run(&["rmdb", &url, "--yes"], b""));
    assert_eq!(h.req("GET", "/made", None).status, 404);
    let out = run(&["rmdb", &url, "--yes"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("does not exist"));
}

#[test]
fn oversized_batches_are_halved_after_413() {
    // A server of its own: the request size limit is lowered.
    let server = common::Server::start();
    let h = Http::settee(&server);
    h.ok(
        "PUT",
        "/_node/_local/_config/chttpd/max_http_request_size",
        Some(&json!("100000")),
    );
    ok(&run(&["mkdb", &db_url(&server, "small")], b""));
    let mut input = String::new();
    for i in 0..1000 {
        input.push_str(&json!({"_id": format!("d{i:04}"), "pad": "p".repeat(1000)}).to_string());
        input.push('\n');
    }
    // Fixed batches of 1000 (~1 MB) cannot pass; they must shrink.
    let out = run(
        &["post-docs", &db_url(&server, "small"), "-u", "1000"],
        input.as_bytes(),
    );
    let err = ok(&out);
    assert!(err.contains("413"), "{err}");
    assert_eq!(doc_count(&h, "small"), 1000);

    // A single document above the limit is reported, not retried forever.
    let huge =
        json!({"_id": "huge", "pad": "h".repeat(200_000)}).to_string() + "\n{\"_id\":\"after\"}\n";
    let out = run(&["post-docs", &db_url(&server, "small")], huge.as_bytes());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let r = reports(&stderr(&out));
    assert!(
        r.iter()
            .any(|r| r["id"] == "huge" && r["error"] == "too_large"),
        "{r:?}"
    );
    assert_eq!(h.req("GET", "/small/after", None).status, 200);
}

#[test]
fn help_has_examples() {
    for t in ["ls-docs", "post-docs", "mkdb", "rmdb", "copy"] {
        let out = run(&[t, "--help"], b"");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{t}");
        assert!(text.contains("Examples:"), "{t}: {text}");
        assert!(text.contains(&format!("settee {t}")), "{t}: {text}");
    }
}
