//! An interrupted `settee copy` resumes from its checkpoint: the copy is
//! killed (SIGKILL) after its first checkpoints, the rerun starts from the
//! checkpointed sequence (not from zero) and the target ends up complete.

mod common;
mod tools_support;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tools_support::*;

/// id → sorted leaf revisions, from `_changes?style=all_docs`.
fn leaves(h: &Http, db: &str) -> BTreeMap<String, Vec<String>> {
    let changes = h.ok("GET", &format!("/{db}/_changes?style=all_docs"), None);
    changes["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut revs: Vec<String> = r["changes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["rev"].as_str().unwrap().to_string())
                .collect();
            revs.sort();
            (r["id"].as_str().unwrap().to_string(), revs)
        })
        .collect()
}

/// The copy checkpoint on `db`, if any.
fn checkpoint(h: &Http, db: &str) -> Option<Value> {
    let locals = h.req("GET", &format!("/{db}/_local_docs"), None);
    if locals.status != 200 {
        return None;
    }
    let v = locals.json();
    let id = v["rows"]
        .as_array()?
        .iter()
        .find_map(|r| {
            r["id"]
                .as_str()
                // The replication id: 32 hex digits.
                .filter(|i| i.strip_prefix("_local/").is_some_and(|h| h.len() == 32))
        })?
        .to_string();
    let d = h.req("GET", &format!("/{db}/{id}"), None);
    (d.status == 200).then(|| d.json())
}

/// A sequence's number: Settee sends sequences as strings (`"1234"`).
fn seq_number(seq: &serde_json::Value) -> u64 {
    seq.as_u64()
        .or_else(|| seq.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

#[test]
fn killed_copy_resumes_from_its_checkpoint() {
    let server = common::Server::start();
    let h = Http::settee(&server);
    const N: usize = 40_000;
    build_fixture(&h, "big_src", N);
    let src_seq = h.ok("GET", "/big_src", None)["update_seq"].clone();

    // Small fixed pages and batches make the copy take a while.
    let mut child = tool(&[
        "copy",
        &db_url(&server, "big_src"),
        &db_url(&server, "big_dst"),
        "--create-target",
        "-u",
        "500",
        "-b",
        "50",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("spawn copy");
    let deadline = Instant::now() + Duration::from_secs(60);
    let seq_at_kill = loop {
        if let Some(c) = checkpoint(&h, "big_dst") {
            if seq_number(&c["source_last_seq"]) >= 1000 {
                break seq_number(&c["source_last_seq"]);
            }
        }
        assert!(
            child.try_wait().expect("wait").is_none(),
            "copy finished before it could be interrupted"
        );
        assert!(Instant::now() < deadline, "no checkpoint within 60 s");
        std::thread::sleep(Duration::from_millis(5));
    };
    child.kill().expect("kill copy");
    child.wait().expect("reap copy");
    let copied = h.ok("GET", "/big_dst", None)["doc_count"].as_u64().unwrap();
    assert!(
        copied < N as u64,
        "interrupted copy already complete ({copied})"
    );
    // The checkpoint never claims more than was written.
    let ckpt = checkpoint(&h, "big_dst").expect("checkpoint");
    let ckpt_seq = seq_number(&ckpt["source_last_seq"]);
    assert!(ckpt_seq >= seq_at_kill);
    assert!(
        copied >= ckpt["history"][0]["docs_written"].as_u64().unwrap() - 3,
        "{ckpt} vs {copied}"
    );

    // The rerun (automatic sizes) starts at the checkpoint.
    let out = run(
        &[
            "copy",
            &db_url(&server, "big_src"),
            &db_url(&server, "big_dst"),
        ],
        b"",
    );
    let err = ok(&out);
    assert!(
        err.contains(&format!("resuming from checkpoint seq {ckpt_seq}")),
        "{err}"
    );
    let rerun_docs: u64 = err
        .split("settee copy: ")
        .nth(2)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary in {err}"));
    let total = (N + 6) as u64; // plain + 2 design + gone + conf + dconf + deep
    assert!(
        rerun_docs < total,
        "rerun copied {rerun_docs} of {total}: started from zero"
    );
    assert!(rerun_docs > 0);

    assert_eq!(leaves(&h, "big_src"), leaves(&h, "big_dst"));
    assert_eq!(
        checkpoint(&h, "big_dst").unwrap()["source_last_seq"],
        src_seq
    );
    let src_special: Vec<_> = ["conf", "dconf", "deep", "_design/app"]
        .iter()
        .map(|id| {
            h.ok(
                "GET",
                &format!("/big_src/{id}?revs=true&conflicts=true"),
                None,
            )
        })
        .collect();
    let dst_special: Vec<_> = ["conf", "dconf", "deep", "_design/app"]
        .iter()
        .map(|id| {
            h.ok(
                "GET",
                &format!("/big_dst/{id}?revs=true&conflicts=true"),
                None,
            )
        })
        .collect();
    assert_eq!(src_special, dst_special);
    assert_eq!(h.req("GET", "/big_dst/_local/keep", None).status, 404);
}
