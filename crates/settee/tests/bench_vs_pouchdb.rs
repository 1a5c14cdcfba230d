//! `settee bench --vs`: a quick run against Settee and pouchdb-server 4.2.0
//! side by side (tests/peers, installed by `npm ci --prefix tests/peers`;
//! missing is a failure, not a skip) must measure both servers and print
//! the ratio of each row.

mod bench_support;
mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, ADMIN};

/// pouchdb-server on a free loopback port; killed on drop.
struct Pouch(Child);

impl Drop for Pouch {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_pouchdb(dir: &Path) -> (Pouch, u16) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = root.join("tests/peers/node_modules/pouchdb-server/bin/pouchdb-server");
    assert!(
        bin.exists(),
        "pouchdb-server is not installed: run `npm ci --prefix tests/peers`"
    );
    // It does not print its port: pick a free one, then poll.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("node")
        .arg("--unhandled-rejections=warn")
        .arg(&bin)
        .args(["-n", "-o", "127.0.0.1", "-p", &port.to_string(), "-d"])
        .arg(dir)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start node");
    let pouch = Pouch(child);
    let agent = common::agent();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = agent.get(&format!("http://127.0.0.1:{port}/")).call() {
            if r.status() == 200 {
                return (pouch, port);
            }
        }
        assert!(
            Instant::now() < deadline,
            "pouchdb-server did not answer within 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn side_by_side_with_pouchdb_server_prints_ratios() {
    let server = Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_pouch, port) = start_pouchdb(tmp.path());
    let settee = format!("http://{}:{}@127.0.0.1:{}", ADMIN.0, ADMIN.1, server.port);
    let pouch = format!("http://127.0.0.1:{port}");
    let json = tmp.path().join("vs.json");
    let (ok, out, err) = bench_support::bench(
        &[
            "--url",
            &settee,
            "--vs",
            &pouch,
            "--quick",
            "--json",
            json.to_str().unwrap(),
            "bulk_doc_1000",
            "benchbulk",
            "random_reads",
            "all_docs_paging",
            "copy",
            "ycsb_b",
        ],
        Duration::from_secs(240),
    );
    assert!(ok, "bench failed\nstdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains("| settee | pouchdb-server | settee / pouchdb-server |"),
        "{out}"
    );
    let ratio_lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("ratio ") && l.contains('×'))
        .collect();
    assert!(ratio_lines.len() >= 8, "ratios for every row:\n{out}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for server in ["settee", "pouchdb-server"] {
        for row in [
            "bulk_doc_1000",
            "benchbulk",
            "random_reads_32",
            "all_docs_page_2000",
            "copy",
            "ycsb_b",
        ] {
            let r = report["results"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["server"] == server && r["name"] == row)
                .unwrap_or_else(|| panic!("no {row} for {server}:\n{out}"));
            assert!(r["summary"]["samples"].as_u64().unwrap() > 0, "{r}");
            assert_eq!(r["summary"]["errors"], 0, "{r}");
        }
    }
}
