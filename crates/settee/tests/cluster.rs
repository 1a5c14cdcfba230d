//! A Settee cluster end to end: three real `settee` binaries joined
//! through a real etcd on loopback, one database of q=2 shards with n=3
//! copies. Writes through one node are read through each other; a node
//! killed with SIGKILL leaves `w=2`/`r=2` requests answered promptly by
//! the two others (`w=3` is 202: accepted by fewer copies than asked);
//! restarted, the node catches up by internal replication until every
//! copy of every shard holds the same revision leaves; every acknowledged
//! write is readable through every node afterwards. Also: the refusals a
//! member owes (a node name already live, an unreachable etcd, a client
//! naming a shard copy, a wrong cluster secret).
//!
//! Every wait is bounded; all traffic is to 127.0.0.1.

mod cluster_support;
mod common;
#[path = "../../settee-cluster/tests/common/mod.rs"]
mod etcd_common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use cluster_support::{at, eventually, leaves, node, secret, suffix};
use common::Server;
use etcd_common::EtcdServer;
use serde_json::{json, Value};

#[test]
fn writes_survive_a_killed_node_and_it_catches_up() {
    let etcd = EtcdServer::start();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("tmp")).collect();
    let names = ["n0@127.0.0.1", "n1@127.0.0.1", "n2@127.0.0.1"];
    let mut nodes: Vec<Option<Server>> = (0..3)
        .map(|i| Some(node(dirs[i].path(), &etcd, names[i])))
        .collect();
    let m = at(&nodes, 0).admin("GET", "/_membership", None).json();
    assert_eq!(m["all_nodes"], json!(names), "{m}");

    let r = at(&nodes, 0).admin("PUT", "/db?q=2&n=3", None);
    assert_eq!(r.status, 201, "{r:?}");
    let r = at(&nodes, 1).admin("PUT", "/db", None);
    assert_eq!(
        r.status, 412,
        "a second creation through another node: {r:?}"
    );
    let shards = at(&nodes, 2).admin("GET", "/db/_shards", None).json();
    assert_eq!(
        shards["shards"].as_object().expect("shards").len(),
        2,
        "{shards}"
    );
    let info = at(&nodes, 1).admin("GET", "/db", None).json();
    assert_eq!(
        info["cluster"],
        json!({"q": 2, "n": 3, "w": 2, "r": 2}),
        "{info}"
    );

    // Writes through node 0, single and bulk; read through 1 and 2.
    let mut acked: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..20 {
        let id = format!("doc{i:02}");
        let r = at(&nodes, 0).admin(
            "PUT",
            &format!("/db/{id}"),
            Some(&json!({"i": i}).to_string()),
        );
        assert_eq!(r.status, 201, "{r:?}");
        acked.insert(id, r.json()["rev"].as_str().expect("rev").to_string());
    }
    let docs: Vec<Value> = (20..40)
        .map(|i| json!({"_id": format!("doc{i:02}"), "i": i}))
        .collect();
    let r = at(&nodes, 0).admin(
        "POST",
        "/db/_bulk_docs",
        Some(&json!({"docs": docs}).to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
    for row in r.json().as_array().expect("rows") {
        acked.insert(
            row["id"].as_str().expect("id").into(),
            row["rev"].as_str().expect("rev").into(),
        );
    }
    for reader in [1, 2] {
        for (id, rev) in &acked {
            let r = at(&nodes, reader).admin("GET", &format!("/db/{id}"), None);
            assert_eq!(r.status, 200, "{r:?}");
            assert_eq!(r.json()["_rev"], json!(rev));
        }
        let all = at(&nodes, reader)
            .admin("GET", "/db/_all_docs", None)
            .json();
        assert_eq!(all["total_rows"], json!(40), "{all}");
        let ids: Vec<&str> = all["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| r["id"].as_str().expect("id"))
            .collect();
        assert_eq!(ids, acked.keys().map(String::as_str).collect::<Vec<_>>());
        let page = at(&nodes, reader)
            .admin("GET", "/db/_all_docs?skip=5&limit=3", None)
            .json();
        let ids: Vec<&str> = page["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| r["id"].as_str().expect("id"))
            .collect();
        assert_eq!(ids, ["doc05", "doc06", "doc07"], "{page}");
    }
    let r = at(&nodes, 2).admin("PUT", "/db/doc00", Some(r#"{"stale":true}"#));
    assert_eq!(
        r.status, 409,
        "a conflict is a conflict in a cluster too: {r:?}"
    );

    // _changes merged from the shards; resumed from any row's opaque seq.
    let feed = at(&nodes, 1).admin("GET", "/db/_changes", None).json();
    let rows = feed["results"].as_array().expect("results").clone();
    assert_eq!(rows.len(), 40, "{feed}");
    let cut = rows[14]["seq"].as_str().expect("opaque seq").to_string();
    let rest = at(&nodes, 2)
        .admin("GET", &format!("/db/_changes?since={cut}"), None)
        .json();
    let mut seen: Vec<String> = rows[..15]
        .iter()
        .chain(rest["results"].as_array().expect("results"))
        .map(|r| r["id"].as_str().expect("id").to_string())
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 40, "resumed feed misses rows: {rest}");
    let page = at(&nodes, 0)
        .admin("GET", "/db/_changes?limit=5", None)
        .json();
    assert_eq!(
        page["results"].as_array().expect("results").len(),
        5,
        "{page}"
    );
    assert_eq!(page["pending"], json!(35), "{page}");
    let r = at(&nodes, 0).admin("GET", "/db/_changes?since=garbage", None);
    assert_eq!(r.status, 400, "{r:?}");
    // The replication protocol against the cluster: another clustered
    // database filled from this one by a node's replicator.
    let r = at(&nodes, 2).admin("PUT", "/copy", None);
    assert_eq!(r.status, 201, "{r:?}");
    let auth = format!("http://{}:{}@127.0.0.1", common::ADMIN.0, common::ADMIN.1);
    let body = json!({
        "source": format!("{auth}:{}/db", at(&nodes, 1).port),
        "target": format!("{auth}:{}/copy", at(&nodes, 0).port),
    });
    let r = at(&nodes, 2).admin("POST", "/_replicate", Some(&body.to_string()));
    assert_eq!(r.status, 200, "{r:?}");
    let copied = at(&nodes, 1).admin("GET", "/copy/_all_docs", None).json();
    assert_eq!(copied["total_rows"], json!(40), "{copied}");
    let diff = at(&nodes, 0)
        .admin(
            "POST",
            "/copy/_revs_diff",
            Some(&json!({"doc00": [acked["doc00"]], "nope": ["1-a"]}).to_string()),
        )
        .json();
    assert_eq!(diff, json!({"nope": {"missing": ["1-a"]}}), "{diff}");

    // Node 2 dies; once etcd says so, quorum requests go on at once.
    nodes[2].take().expect("node 2").kill9();
    eventually(Duration::from_secs(15), "node 2 seen as down", || {
        at(&nodes, 0).admin("GET", "/_membership", None).json()["all_nodes"] == json!(&names[..2])
    });
    for i in 40..50 {
        let id = format!("doc{i:02}");
        let t = Instant::now();
        let r = at(&nodes, i % 2).admin(
            "PUT",
            &format!("/db/{id}?w=2"),
            Some(&json!({"i": i}).to_string()),
        );
        assert_eq!(r.status, 201, "{r:?}");
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "w=2 took {:?}",
            t.elapsed()
        );
        acked.insert(
            id.clone(),
            r.json()["rev"].as_str().expect("rev").to_string(),
        );
        let t = Instant::now();
        let r = at(&nodes, 1 - i % 2).admin("GET", &format!("/db/{id}?r=2"), None);
        assert_eq!(r.status, 200, "{r:?}");
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "r=2 took {:?}",
            t.elapsed()
        );
    }
    let r = at(&nodes, 0).admin("PUT", "/db/w3?w=3", Some("{}"));
    assert_eq!(r.status, 202, "two copies of three: accepted: {r:?}");
    acked.insert(
        "w3".into(),
        r.json()["rev"].as_str().expect("rev").to_string(),
    );
    let r = at(&nodes, 1).admin(
        "PUT",
        "/db/doc01",
        Some(&json!({"_rev": acked["doc01"], "v": 2}).to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
    acked.insert(
        "doc01".into(),
        r.json()["rev"].as_str().expect("rev").to_string(),
    );

    // Node 2 comes back on its data and catches up.
    nodes[2] = Some(node(dirs[2].path(), &etcd, names[2]));
    let secret = secret(&etcd);
    let suffix = suffix(at(&nodes, 0), "db");
    let shard_names: Vec<String> = shards["shards"]
        .as_object()
        .expect("shards")
        .keys()
        .map(|r| format!("shards/{r}/db{suffix}"))
        .collect();
    eventually(
        Duration::from_secs(30),
        "every copy holds the same leaves",
        || {
            shard_names.iter().all(|shard| {
                let l: Vec<_> = (0..3)
                    .map(|i| leaves(at(&nodes, i), shard, &secret))
                    .collect();
                l[0] == l[1] && l[1] == l[2]
            })
        },
    );
    let total: usize = shard_names
        .iter()
        .map(|s| leaves(at(&nodes, 2), s, &secret).len())
        .sum();
    assert_eq!(total, acked.len());
    for reader in 0..3 {
        for (id, rev) in &acked {
            let r = at(&nodes, reader).admin("GET", &format!("/db/{id}?r=3"), None);
            assert_eq!(r.status, 200, "{r:?}");
            assert_eq!(r.json()["_rev"], json!(rev), "{id} through node {reader}");
        }
    }

    // The cluster's own: shard copies are not for clients; a wrong secret
    // is refused.
    let shard = shard_names[0].replace('/', "%2F");
    let r = at(&nodes, 0).admin("GET", &format!("/{shard}"), None);
    assert_eq!(r.status, 404, "{r:?}");
    let r = at(&nodes, 0).raw(
        "GET",
        &format!("/{shard}"),
        false,
        &[("X-Settee-Cluster-Secret", "0000")],
        None,
    );
    assert_eq!(r.status, 401, "{r:?}");
    let r = at(&nodes, 0).raw(
        "GET",
        &format!("/{shard}"),
        false,
        &[("X-Settee-Cluster-Secret", &secret)],
        None,
    );
    assert_eq!(r.status, 200, "{r:?}");

    let r = at(&nodes, 1).admin("DELETE", "/db", None);
    assert_eq!(r.status, 200, "{r:?}");
    eventually(
        Duration::from_secs(10),
        "the database gone everywhere",
        || (0..3).all(|i| at(&nodes, i).admin("GET", "/db", None).status == 404),
    );
}

/// Runs `settee serve` with `args`, which must fail: it must exit, with a
/// failure status, within 60 s (a server that started instead is killed and
/// the test fails, rather than waiting for it forever). Its stderr.
fn failed_start(args: &[&str]) -> String {
    use std::io::Read as _;
    let dir = tempfile::tempdir().expect("tmp");
    let mut child = Command::new(env!("CARGO_BIN_EXE_settee"))
        .args(["serve", "--bind", "127.0.0.1:0", "--data"])
        .arg(dir.path())
        .args(["--admin", "admin:admin"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run settee");
    let mut stderr = child.stderr.take().expect("stderr");
    let read_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut stdout = child.stdout.take().expect("stdout");
    let read_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        match child.try_wait().expect("wait for settee") {
            Some(status) => break Some(status),
            None if Instant::now() >= deadline => break None,
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let (err, out) = (
        read_err.join().expect("stderr reader"),
        read_out.join().expect("stdout reader"),
    );
    match status {
        None => panic!("settee {args:?} did not exit within 60 s\nstdout: {out}\nstderr: {err}"),
        Some(s) => assert!(
            !s.success(),
            "it started: {s:?}\nstdout: {out}\nstderr: {err}"
        ),
    }
    err
}

#[test]
fn a_name_taken_or_an_unreachable_etcd_is_a_clear_error_at_start() {
    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().expect("tmp");
    let first = node(dir.path(), &etcd, "same@127.0.0.1");
    let err = failed_start(&["--cluster-etcd", &etcd.url, "--node", "same@127.0.0.1"]);
    assert!(err.contains("already registered"), "{err}");
    let m = first.admin("GET", "/_membership", None).json();
    assert_eq!(m["all_nodes"], json!(["same@127.0.0.1"]), "{m}");
    // A port held by a listener that never answers: nothing else can take
    // it while the node tries it (a port merely found free could be given
    // to another test's etcd, which the node would then join).
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let port = silent.local_addr().expect("addr").port();
    let err = failed_start(&[
        "--cluster-etcd",
        &format!("http://127.0.0.1:{port}"),
        "--node",
        "x@127.0.0.1",
    ]);
    assert!(err.contains("unreachable"), "{err}");
    let err = failed_start(&["--cluster-etcd", &etcd.url, "--peer-url", "no-url-here"]);
    assert!(err.contains("expected NAME=URL"), "{err}");
}

/// `POST /_cluster_setup` with `body` through `s`: status and answer.
fn setup(s: &Server, body: &str) -> (u16, Value) {
    let r = s.admin("POST", "/_cluster_setup", Some(body));
    (
        r.status,
        serde_json::from_str(&r.body).unwrap_or(Value::Null),
    )
}

#[test]
fn cluster_setup_answers_as_couchdb_for_what_settee_needs_no_step_for() {
    // A single node: set up already; cluster actions refused as CouchDB's
    // single node refuses them.
    let single = Server::start();
    let r = single.admin("GET", "/_cluster_setup", None);
    assert_eq!(r.json(), json!({"state": "single_node_enabled"}), "{r:?}");
    let r = single.admin(
        "GET",
        "/_cluster_setup?ensure_dbs_exist=%5B%22nosuch%22%5D",
        None,
    );
    assert_eq!(r.json(), json!({"state": "single_node_disabled"}), "{r:?}");
    let r = single.admin("GET", "/_cluster_setup?ensure_dbs_exist=bad", None);
    assert_eq!((r.status, r.error()), (400, "bad_request".into()), "{r:?}");
    assert_eq!(single.anon("GET", "/_cluster_setup", None).status, 401);
    let r = single.admin("PUT", "/_cluster_setup", None);
    assert_eq!(r.status, 405, "{r:?}");
    assert_eq!(r.json()["reason"], json!("Only GET,POST allowed"));
    for (body, status, reason) in [
        (r#"{"action":"bogus"}"#, 400, "Invalid Action'"),
        ("{}", 400, "Invalid Action'"),
        ("[1]", 400, "Missing JSON body'"),
        ("nope", 400, "Missing JSON body'"),
        (
            r#"{"action":"add_node","host":"127.0.0.1","port":1}"#,
            400,
            "Cluster is not enabled.",
        ),
        (
            r#"{"action":"finish_cluster"}"#,
            400,
            "Cluster is already finished",
        ),
    ] {
        let (st, v) = setup(&single, body);
        assert_eq!(
            (st, v["reason"].clone()),
            (status, json!(reason)),
            "{body}: {v}"
        );
    }
    assert_eq!(
        setup(&single, r#"{"action":"enable_single_node"}"#),
        (201, json!({"ok": true}))
    );
    let (st, v) = setup(&single, r#"{"action":"enable_cluster"}"#);
    assert_eq!(st, 400, "{v}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap_or("")
            .contains("--cluster-etcd"),
        "{v}"
    );

    // Members: finished; add_node admits a member that joined, and says how
    // to start one that did not; remove_node decommissions.
    let etcd = EtcdServer::start();
    let (da, db) = (
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    );
    let a = node(da.path(), &etcd, "a@127.0.0.1");
    let b = node(db.path(), &etcd, "b@127.0.0.1");
    let r = a.admin("GET", "/_cluster_setup", None);
    assert_eq!(r.json(), json!({"state": "cluster_finished"}), "{r:?}");
    assert_eq!(
        setup(&a, r#"{"action":"enable_cluster","node_count":"2"}"#).0,
        201
    );
    let add = |port: u16| {
        json!({"action": "add_node", "host": "127.0.0.1", "port": port,
               "username": common::ADMIN.0, "password": common::ADMIN.1})
        .to_string()
    };
    let (st, v) = setup(&a, &add(single.port));
    assert_eq!(st, 400, "{v}");
    assert!(
        v["reason"].as_str().unwrap_or("").contains("not a member"),
        "{v}"
    );
    let (st, v) = setup(&a, &add(etcd_common::free_port()));
    assert_eq!(st, 400, "{v}");
    assert!(
        v["reason"].as_str().unwrap_or("").contains("cannot reach"),
        "{v}"
    );
    let r = a.admin("DELETE", "/_node/_local/_nodes/b@127.0.0.1", None);
    assert_eq!(r.status, 202, "{r:?}");
    assert_eq!(setup(&a, &add(b.port)), (201, json!({"ok": true})));
    let r = a.admin("GET", "/_node/_local/_nodes/b@127.0.0.1", None);
    assert_eq!(r.json()["state"], json!("live"), "{r:?}");
    let (st, _) = setup(&a, r#"{"action":"remove_node","node":"nobody@127.0.0.1"}"#);
    assert_eq!(st, 404);
    assert_eq!(
        setup(&a, r#"{"action":"remove_node","node":"b@127.0.0.1"}"#),
        (201, json!({"ok": true}))
    );
    let r = b.admin("GET", "/_node/_local/_nodes/b@127.0.0.1", None);
    assert_eq!(r.json()["state"], json!("leaving"), "{r:?}");
    assert_eq!(
        setup(&a, r#"{"action":"finish_cluster"}"#).1["reason"],
        json!("Cluster is already finished")
    );
}
