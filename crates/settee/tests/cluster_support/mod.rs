//! What the cluster tests share: starting a member, bounded waits, the
//! cluster's secret read from etcd, a shard copy's leaves, where a
//! database's copies are.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{self, Server};
use crate::etcd_common::EtcdServer;

/// A member named `name` on `etcd` (a 2 s lease, a 1 s sweep), with `extra`
/// flags.
pub fn node_with(dir: &Path, etcd: &EtcdServer, name: &str, extra: &[&str]) -> Server {
    let mut args = vec![
        "--cluster-etcd",
        &etcd.url,
        "--node",
        name,
        "--lease-ttl-s",
        "2",
        "--sync-interval-ms",
        "1000",
    ];
    args.extend_from_slice(extra);
    let s = Server::start_in(dir, &args);
    // A node listens before it joins: wait until it is a member (its
    // `/_up` is 503 until then), so a test never races its registration.
    eventually(
        Duration::from_secs(30),
        "the node joined the cluster",
        || s.admin("GET", "/_up", None).status == 200,
    );
    s
}

/// [`node_with`] and no other flags.
pub fn node(dir: &Path, etcd: &EtcdServer, name: &str) -> Server {
    node_with(dir, etcd, name, &[])
}

/// Polls `cond` every 100 ms for at most `limit`.
pub fn eventually(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("not within {limit:?}: {what}");
}

/// The cluster's secret, read from etcd's JSON gateway (as a node does).
pub fn secret(etcd: &EtcdServer) -> String {
    secret_at(&etcd.url)
}

/// The cluster's secret, read from the etcd (a member of it) at `url`.
pub fn secret_at(url: &str) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let body = json!({"key": b64.encode("/settee/secret")}).to_string();
    let r = common::call(
        &common::agent(),
        "POST",
        &format!("{url}/v3/kv/range"),
        None,
        &[("Content-Type", "application/json")],
        Some(body.as_bytes()),
    );
    let v: Value = serde_json::from_str(&r.body).expect("etcd answer");
    let value = v["kvs"][0]["value"].as_str().expect("a secret in etcd");
    String::from_utf8(b64.decode(value).expect("base64")).expect("utf-8")
}

/// Each document's leaf revisions on one shard copy (asked as the cluster);
/// `None` when the node has no such copy.
pub fn try_leaves(s: &Server, shard: &str, secret: &str) -> Option<BTreeMap<String, Vec<String>>> {
    let path = format!("/{}/_changes?style=all_docs", shard.replace('/', "%2F"));
    let r = s.raw(
        "GET",
        &path,
        false,
        &[("X-Settee-Cluster-Secret", secret)],
        None,
    );
    if r.status == 404 {
        return None;
    }
    assert_eq!(r.status, 200, "{r:?}");
    let mut out = BTreeMap::new();
    for row in r.json()["results"].as_array().expect("results") {
        let mut revs: Vec<String> = row["changes"]
            .as_array()
            .expect("changes")
            .iter()
            .map(|c| c["rev"].as_str().expect("rev").to_string())
            .collect();
        revs.sort();
        out.insert(row["id"].as_str().expect("id").to_string(), revs);
    }
    Some(out)
}

/// [`try_leaves`] of a copy that must exist.
pub fn leaves(s: &Server, shard: &str, secret: &str) -> BTreeMap<String, Vec<String>> {
    try_leaves(s, shard, secret).unwrap_or_else(|| panic!("no copy {shard} on :{}", s.port))
}

/// The shard-name suffix of `db` (from the node's `_dbs` document).
pub fn suffix(s: &Server, db: &str) -> String {
    let map = s
        .admin("GET", &format!("/_node/_local/_dbs/{db}"), None)
        .json();
    match map["shard_suffix"].clone() {
        Value::String(s) => s,
        Value::Array(codes) => codes
            .iter()
            .map(|c| char::from(c.as_u64().expect("code") as u8))
            .collect(),
        other => panic!("shard_suffix {other}"),
    }
}

/// `db`'s full copies: range -> nodes (`GET /{db}/_shards`).
pub fn copies(s: &Server, db: &str) -> BTreeMap<String, Vec<String>> {
    let r = s.admin("GET", &format!("/{db}/_shards"), None);
    assert_eq!(r.status, 200, "{r:?}");
    r.json()["shards"]
        .as_object()
        .expect("shards")
        .iter()
        .map(|(range, nodes)| {
            let mut v: Vec<String> = nodes
                .as_array()
                .expect("nodes")
                .iter()
                .map(|n| n.as_str().expect("node").to_string())
                .collect();
            v.sort();
            (range.clone(), v)
        })
        .collect()
}

/// How many copies of `db` each node holds.
pub fn per_node(copies: &BTreeMap<String, Vec<String>>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for nodes in copies.values() {
        for n in nodes {
            *out.entry(n.clone()).or_insert(0) += 1;
        }
    }
    out
}

/// The member at `i` (it must be running).
pub fn at(nodes: &[Option<Server>], i: usize) -> &Server {
    nodes[i].as_ref().expect("running")
}
