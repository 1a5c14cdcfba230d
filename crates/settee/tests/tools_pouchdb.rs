//! The operator tools against pouchdb-server 4.2.0 (tests/peers, pinned by
//! package-lock.json) as source and as target: Settee → pouchdb-server →
//! Settee with `copy`, and pouchdb-server → Settee with the
//! `ls-docs | post-docs` pipeline; conflicts, deletions and histories
//! survive both ways. A missing npm install is a failure, never a skip.

mod common;
mod tools_support;

use std::process::Stdio;

use tools_support::*;

#[test]
fn copy_to_pouchdb_server_and_back() {
    let settee = common::shared();
    let pouch = start_pouchdb();
    let hs = Http::settee(settee);
    let hp = Http::anonymous(format!("http://127.0.0.1:{}", pouch.port));
    let pouch_url = |db: &str| format!("http://127.0.0.1:{}/{db}", pouch.port);

    build_fixture(&hs, "peer_src", 1200);
    let src = snapshot(&hs, "peer_src");
    assert_fixture_shape(&src);

    // Settee → pouchdb-server.
    ok(&run(
        &[
            "copy",
            &db_url(settee, "peer_src"),
            &pouch_url("peer_mid"),
            "--create-target",
        ],
        b"",
    ));
    let mid = snapshot(&hp, "peer_mid");
    assert_same(&src, &mid, false);
    assert_eq!(hp.req("GET", "/peer_mid/_local/keep", None).status, 404);

    // pouchdb-server → Settee.
    ok(&run(
        &[
            "copy",
            &pouch_url("peer_mid"),
            &db_url(settee, "peer_back"),
            "--create-target",
        ],
        b"",
    ));
    assert_same(&src, &snapshot(&hs, "peer_back"), false);

    // Resuming against pouchdb-server as target: nothing left to copy.
    let err = ok(&run(
        &["copy", &db_url(settee, "peer_src"), &pouch_url("peer_mid")],
        b"",
    ));
    assert!(err.contains("resuming from checkpoint"), "{err}");
    assert!(err.contains(" 0 documents"), "{err}");

    // The pipeline with pouchdb-server as source, design docs filtered.
    ok(&run(&["mkdb", &db_url(settee, "peer_pipe")], b""));
    let mut ls = tool(&["ls-docs", &pouch_url("peer_mid"), "--revs", "-u", "300"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ls-docs");
    let pipe = ls.stdout.take().expect("stdout");
    let post = tool(&[
        "post-docs",
        &db_url(settee, "peer_pipe"),
        "--new-edits=false",
    ])
    .stdin(Stdio::from(pipe))
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn post-docs");
    ok(&wait_output(post, TOOL_DEADLINE));
    ok(&wait_output(ls, TOOL_DEADLINE));
    assert_same(&src, &snapshot(&hs, "peer_pipe"), true);

    // ls-docs (_all_docs paging) and post-docs with pouchdb-server as target.
    let out = run(&["ls-docs", &db_url(settee, "peer_src"), "-u", "250"], b"");
    ok(&out);
    ok(&run(&["mkdb", &pouch_url("peer_plain")], b""));
    // Without --new-edits=false, documents carrying a _rev the target
    // lacks conflict: reported, with a hint, exit code 2.
    let first_line = &out.stdout[..=out.stdout.iter().position(|&b| b == b'\n').unwrap()];
    let out1 = run(&["post-docs", &pouch_url("peer_plain")], first_line);
    assert_eq!(out1.status.code(), Some(2));
    assert!(
        stderr(&out1).contains("--new-edits=false"),
        "{}",
        stderr(&out1)
    );
    ok(&run(
        &["post-docs", &pouch_url("peer_plain"), "--new-edits=false"],
        &out.stdout,
    ));
    let n = hp.ok("GET", "/peer_plain", None)["doc_count"]
        .as_u64()
        .unwrap();
    assert_eq!(n, 1200 + 3, "plain docs + conf + dconf + deep");
    // The winners keep their revision ids.
    for id in ["doc-00007", "deep", "conf"] {
        let a = hs.ok("GET", &format!("/peer_src/{id}"), None);
        let b = hp.ok("GET", &format!("/peer_plain/{id}"), None);
        assert_eq!(a, b);
    }
}
