//! Faithful copies with the real binary against a real Settee server:
//! `ls-docs --revs | post-docs --new-edits=false` (two processes joined by
//! a pipe) and `copy` reproduce conflicts, deleted documents, deleted
//! conflicts, histories and design documents, and leave `_local` documents
//! behind. Also: ls-docs paging and design-document filtering.

mod common;
mod tools_support;

use std::process::Stdio;

use serde_json::Value;
use tools_support::*;

#[test]
fn pipeline_copies_conflicts_deletions_and_design_docs() {
    let server = common::shared();
    let h = Http::settee(server);
    build_fixture(&h, "pipe_src", 1500);
    let src = snapshot(&h, "pipe_src");
    assert_fixture_shape(&src);
    ok(&run(&["mkdb", &db_url(server, "pipe_dst")], b""));

    // ls-docs … | post-docs …, two processes joined by a pipe; small pages
    // so several pages and batches are exercised.
    let mut ls = tool(&[
        "ls-docs",
        &db_url(server, "pipe_src"),
        "--revs",
        "--include-design",
        "-u",
        "400",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn ls-docs");
    let pipe = ls.stdout.take().expect("ls stdout");
    let post = tool(&[
        "post-docs",
        &db_url(server, "pipe_dst"),
        "--new-edits=false",
        "-u",
        "300",
    ])
    .stdin(Stdio::from(pipe))
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn post-docs");
    let post_out = wait_output(post, TOOL_DEADLINE);
    let ls_out = wait_output(ls, TOOL_DEADLINE);
    ok(&ls_out);
    ok(&post_out);

    let dst = snapshot(&h, "pipe_dst");
    assert_same(&src, &dst, false);
    assert_eq!(h.req("GET", "/pipe_dst/_local/keep", None).status, 404);
}

#[test]
fn copy_is_faithful_and_idempotent() {
    let server = common::shared();
    let h = Http::settee(server);
    build_fixture(&h, "copy_src", 2500);
    let src = snapshot(&h, "copy_src");
    assert_fixture_shape(&src);

    let err = ok(&run(
        &[
            "copy",
            &db_url(server, "copy_src"),
            &db_url(server, "copy_dst"),
            "--create-target",
        ],
        b"",
    ));
    assert!(err.contains("documents"), "{err}");
    let dst = snapshot(&h, "copy_dst");
    assert_same(&src, &dst, false);
    assert_eq!(h.req("GET", "/copy_dst/_local/keep", None).status, 404);
    // The only local document on the target is the checkpoint.
    let locals = h.ok("GET", "/copy_dst/_local_docs", None);
    let ids: Vec<&str> = locals["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    // The replicator's checkpoint: the replication id `_replicate` computes
    // for these URLs on this server, in CouchDB's format, on both ends.
    let ckpt = h.ok("GET", &format!("/copy_dst/{}", ids[0]), None);
    let info = h.ok("GET", "/copy_src", None);
    assert_eq!(ckpt["source_last_seq"], info["update_seq"], "{ckpt}");
    assert_eq!(ckpt["replication_id_version"], 4, "{ckpt}");
    let on_source = h.ok("GET", &format!("/copy_src/{}", ids[0]), None);
    assert_eq!(on_source["session_id"], ckpt["session_id"]);
    // A pull `_replicate` on the target's server with the same URLs
    // resumes from it: nothing to do.
    let body = serde_json::json!({"source": db_url(server, "copy_src"), "target": db_url(server, "copy_dst")});
    let r = h.ok("POST", "/_replicate", Some(&body));
    assert_eq!(r["no_changes"], true, "{r}");

    // A second run starts at the checkpoint and copies nothing.
    let err = ok(&run(
        &[
            "copy",
            &db_url(server, "copy_src"),
            &db_url(server, "copy_dst"),
        ],
        b"",
    ));
    assert!(err.contains("resuming from checkpoint"), "{err}");
    assert!(err.contains(" 0 documents"), "{err}");

    // --restart walks the whole feed again, but `_revs_diff` shows the
    // target has every revision: nothing is read or written.
    let err = ok(&run(
        &[
            "copy",
            &db_url(server, "copy_src"),
            &db_url(server, "copy_dst"),
            "--restart",
        ],
        b"",
    ));
    assert!(err.contains("documents (0 revisions)"), "{err}");

    // New changes on the source (an update and a new conflict) follow.
    let d = h.ok("GET", "/copy_src/doc-00001", None);
    let mut d2 = d.clone();
    d2["n"] = Value::from(-1);
    h.ok("PUT", "/copy_src/doc-00001", Some(&d2));
    let err = ok(&run(
        &[
            "copy",
            &db_url(server, "copy_src"),
            &db_url(server, "copy_dst"),
        ],
        b"",
    ));
    assert!(err.contains(" 1 documents"), "{err}");
    assert_same(&snapshot(&h, "copy_src"), &snapshot(&h, "copy_dst"), false);
}

#[test]
fn copy_filter_design_leaves_design_docs_out() {
    let server = common::shared();
    let h = Http::settee(server);
    build_fixture(&h, "filt_src", 50);
    ok(&run(&["mkdb", &db_url(server, "filt_dst")], b""));
    ok(&run(
        &[
            "copy",
            &db_url(server, "filt_src"),
            &db_url(server, "filt_dst"),
            "--filter-design",
        ],
        b"",
    ));
    assert_same(&snapshot(&h, "filt_src"), &snapshot(&h, "filt_dst"), true);
    assert_eq!(h.req("GET", "/filt_dst/_design/app", None).status, 404);
}

#[test]
fn ls_docs_pages_and_filters_design_docs() {
    let server = common::shared();
    let h = Http::settee(server);
    build_fixture(&h, "ls_src", 100);
    let lines = |o: &std::process::Output| -> Vec<Value> {
        String::from_utf8(o.stdout.clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    };
    // Default: live winners, no design documents, pages of 7.
    let out = run(&["ls-docs", &db_url(server, "ls_src"), "-u", "7"], b"");
    ok(&out);
    let docs = lines(&out);
    // 100 plain + conf + dconf + deep (gone is deleted; 2 design docs excluded).
    assert_eq!(docs.len(), 103);
    assert!(docs
        .iter()
        .all(|d| d["_id"].is_string() && d["_rev"].is_string()));
    assert!(!docs
        .iter()
        .any(|d| d["_id"].as_str().unwrap().starts_with("_design/")));
    let mut ids: Vec<&str> = docs.iter().map(|d| d["_id"].as_str().unwrap()).collect();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "no document twice across page boundaries");

    let out = run(
        &["ls-docs", &db_url(server, "ls_src"), "--include-design"],
        b"",
    );
    ok(&out);
    assert_eq!(lines(&out).len(), 105);

    // -p limits the pages: 2 pages of 7 rows, of which the two design
    // documents (sorted first) are left out.
    let out = run(
        &["ls-docs", &db_url(server, "ls_src"), "-u", "7", "-p", "2"],
        b"",
    );
    ok(&out);
    assert_eq!(lines(&out).len(), 12);

    // --since: changes after a sequence, deletions as tombstones.
    let all = run(&["ls-docs", &db_url(server, "ls_src"), "--since", "0"], b"");
    ok(&all);
    let docs = lines(&all);
    assert!(docs
        .iter()
        .any(|d| d["_id"] == "gone" && d["_deleted"] == Value::Bool(true)));

    // A bare name resolved against SETTEE_URL.
    let mut cmd = tool(&["ls-docs", "ls_src", "-p", "1", "-u", "5"]);
    cmd.env(
        "SETTEE_URL",
        format!("http://admin:s3cret-pw@127.0.0.1:{}", server.port),
    );
    let out = run_cmd(cmd, b"");
    ok(&out);
    // Rows: _design/app, _design/other (left out), conf, dconf, deep.
    assert_eq!(lines(&out).len(), 3);
}

#[test]
fn continuous_copy_follows_changes_until_interrupted() {
    let server = common::shared();
    let h = Http::settee(server);
    build_fixture(&h, "cont_src", 20);
    let mut child = tool(&[
        "copy",
        &db_url(server, "cont_src"),
        &db_url(server, "cont_dst"),
        "--create-target",
        "--continuous",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn copy --continuous");
    let wait_for = |path: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while h.req("GET", path, None).status != 200 {
            assert!(std::time::Instant::now() < deadline, "{path} never arrived");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    wait_for("/cont_dst/doc-00019");
    // Later writes on the source arrive while the copy keeps running.
    h.ok("PUT", "/cont_src/later", Some(&serde_json::json!({"v": 1})));
    wait_for("/cont_dst/later");
    let d = h.ok("GET", "/cont_src/later", None);
    h.ok(
        "DELETE",
        &format!("/cont_src/later?rev={}", d["_rev"].as_str().unwrap()),
        None,
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while h.req("GET", "/cont_dst/later", None).status != 404 {
        assert!(
            std::time::Instant::now() < deadline,
            "deletion never arrived"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "continuous copy exited"
    );
    // SIGINT: finish, checkpoint, exit 0.
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = wait_output(child, std::time::Duration::from_secs(30));
    ok(&out);
    assert_same(&snapshot(&h, "cont_src"), &snapshot(&h, "cont_dst"), false);
}

#[test]
fn checkpoint_of_a_recreated_source_is_not_trusted() {
    let server = common::shared();
    let h = Http::settee(server);
    build_fixture(&h, "re_src", 30);
    let copy = || {
        run(
            &[
                "copy",
                &db_url(server, "re_src"),
                &db_url(server, "re_dst"),
                "--create-target",
            ],
            b"",
        )
    };
    ok(&copy());
    // Same name, new database with fewer updates than the checkpoint says.
    h.ok("DELETE", "/re_src", None);
    h.ok("PUT", "/re_src", None);
    h.ok("PUT", "/re_src/fresh", Some(&serde_json::json!({"v": 2})));
    // The new source holds no checkpoint: the copy starts over (as
    // CouchDB's replicator would) and copies the new document.
    let err = ok(&copy());
    assert!(!err.contains("resuming"), "{err}");
    assert_eq!(h.req("GET", "/re_dst/fresh", None).status, 200);
}
