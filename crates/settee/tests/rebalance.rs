//! Rebalance and healing end to end (issue 39): real `settee` binaries
//! and a real etcd on loopback.
//!
//! Two members hold a database of q=4 shards, n=2 copies; a third joins
//! while a client keeps writing: the decider moves copies to it online
//! until the members hold 3/3/2, every copy of a range holds the same
//! leaves, the members that gave a copy away deleted theirs, and every
//! acknowledged write reads back with its revision. Then the new member is
//! killed (SIGKILL) while writes go on: after `--heal-after-s` its copies
//! are replaced on the two others, again with no acknowledged write lost.
//! It comes back: its stale copies are drained and deleted and the data
//! spreads back to it. `POST /_cluster/rebalance` pauses and resumes.
//!
//! Every wait and every load loop is bounded; all traffic is to 127.0.0.1.

mod cluster_support;
mod common;
#[path = "../../settee-cluster/tests/common/mod.rs"]
mod etcd_common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster_support::{at, copies, eventually, node_with, per_node, secret, suffix, try_leaves};
use common::{Server, ADMIN};
use etcd_common::EtcdServer;
use serde_json::{json, Value};

const NAMES: [&str; 3] = ["a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"];
const FLAGS: [&str; 4] = ["--heal-after-s", "3", "--rebalance-max-moves", "2"];

/// Acknowledged writes: id -> revision.
type Acked = Arc<Mutex<BTreeMap<String, String>>>;

/// Writes new documents through the node on `port` until `stop` (at most
/// `max` of them, at most 120 s), each acknowledged one recorded.
fn writer(
    port: u16,
    prefix: &'static str,
    max: usize,
    stop: Arc<AtomicBool>,
    acked: Acked,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let agent = common::agent();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut n = 0;
        while n < max && !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            let id = format!("{prefix}{n:04}");
            let r = common::call(
                &agent,
                "PUT",
                &format!("http://127.0.0.1:{port}/db/{id}"),
                Some(ADMIN),
                &[("Content-Type", "application/json")],
                Some(json!({"n": n}).to_string().as_bytes()),
            );
            if r.status == 201 || r.status == 202 {
                let rev = r.json()["rev"].as_str().expect("rev").to_string();
                acked.lock().expect("acked").insert(id, rev);
            }
            n += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
        n
    })
}

/// The rebalance status through `s`.
fn status(s: &Server) -> Value {
    let r = s.admin("GET", "/_cluster/rebalance", None);
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

/// Whether `db`'s copies are spread over exactly `members` (each range on
/// two distinct members, counts differing by at most one), no move in
/// flight, and every copy of every range holds the same leaves.
fn settled(
    via: &Server,
    nodes: &[Option<Server>],
    members: &[usize],
    secret: &str,
    sfx: &str,
) -> bool {
    let st = status(via);
    if st["state"] != json!("balanced") {
        return false;
    }
    let c = copies(via, "db");
    let counts = per_node(&c);
    let names: Vec<String> = members.iter().map(|i| NAMES[*i].to_string()).collect();
    if counts.keys().cloned().collect::<Vec<_>>() != names {
        return false;
    }
    let (lo, hi) = (counts.values().min(), counts.values().max());
    if hi.zip(lo).is_none_or(|(h, l)| h - l > 1) || c.values().any(|ns| ns.len() != 2) {
        return false;
    }
    c.iter().all(|(range, holders)| {
        let shard = format!("shards/{range}/db{sfx}");
        let l: Vec<_> = holders
            .iter()
            .map(|h| {
                let i = NAMES.iter().position(|n| n == h).expect("a member");
                try_leaves(at(nodes, i), &shard, secret)
            })
            .collect();
        l.iter().all(|x| x.is_some()) && l.windows(2).all(|w| w[0] == w[1])
    })
}

/// Every acknowledged write reads back through `s` with its revision.
fn all_readable(s: &Server, acked: &Acked) {
    let acked = acked.lock().expect("acked").clone();
    for (id, rev) in &acked {
        let r = s.admin("GET", &format!("/db/{id}"), None);
        assert_eq!(r.status, 200, "{id}: {r:?}");
        assert_eq!(r.json()["_rev"], json!(rev), "{id}");
    }
    let all = s.admin("GET", "/db/_all_docs?limit=0", None).json();
    assert_eq!(all["total_rows"], json!(acked.len()), "{all}");
}

/// A node holds no copy of a range the map does not give it.
fn no_stale_copies(nodes: &[Option<Server>], via: &Server, secret: &str, sfx: &str) -> bool {
    let c = copies(via, "db");
    c.iter().all(|(range, holders)| {
        let shard = format!("shards/{range}/db{sfx}");
        (0..3).filter(|i| nodes[*i].is_some()).all(|i| {
            holders.contains(&NAMES[i].to_string())
                || try_leaves(at(nodes, i), &shard, secret).is_none()
        })
    })
}

#[test]
fn a_joining_node_gets_its_share_a_lost_one_is_replaced_a_leaving_one_is_emptied() {
    let etcd = EtcdServer::start();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("tmp")).collect();
    let mut nodes: Vec<Option<Server>> = vec![
        Some(node_with(dirs[0].path(), &etcd, NAMES[0], &FLAGS)),
        Some(node_with(dirs[1].path(), &etcd, NAMES[1], &FLAGS)),
        None,
    ];
    let r = at(&nodes, 0).admin("PUT", "/db?q=4&n=2", None);
    assert_eq!(r.status, 201, "{r:?}");
    let sfx = suffix(at(&nodes, 0), "db");
    let secret = secret(&etcd);
    let acked: Acked = Arc::default();
    let docs: Vec<Value> = (0..200)
        .map(|i| json!({"_id": format!("seed{i:03}"), "i": i}))
        .collect();
    let r = at(&nodes, 0).admin(
        "POST",
        "/db/_bulk_docs",
        Some(&json!({"docs": docs}).to_string()),
    );
    assert_eq!(r.status, 201, "{r:?}");
    for row in r.json().as_array().expect("rows") {
        acked.lock().expect("acked").insert(
            row["id"].as_str().expect("id").into(),
            row["rev"].as_str().expect("rev").into(),
        );
    }
    eventually(Duration::from_secs(30), "two members balanced", || {
        settled(at(&nodes, 0), &nodes, &[0, 1], &secret, &sfx)
    });

    // Paused, a joining member gets nothing.
    let r = at(&nodes, 1).admin("POST", "/_cluster/rebalance", Some(r#"{"action":"pause"}"#));
    assert_eq!(r.status, 200, "{r:?}");
    let r = at(&nodes, 1).admin("POST", "/_cluster/rebalance", Some(r#"{"action":"twirl"}"#));
    assert_eq!(r.status, 400, "{r:?}");
    nodes[2] = Some(node_with(dirs[2].path(), &etcd, NAMES[2], &FLAGS));
    eventually(Duration::from_secs(15), "paused status", || {
        let st = status(at(&nodes, 2));
        st["paused"] == json!(true) && st["state"] == json!("paused")
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !per_node(&copies(at(&nodes, 0), "db")).contains_key(NAMES[2]),
        "moved while paused"
    );

    // Resumed, with writes going on: the new member gets its share.
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(
        at(&nodes, 0).port,
        "during-join-",
        2000,
        Arc::clone(&stop),
        Arc::clone(&acked),
    );
    let r = at(&nodes, 1).admin(
        "POST",
        "/_cluster/rebalance",
        Some(r#"{"action":"resume"}"#),
    );
    assert_eq!(r.status, 200, "{r:?}");
    eventually(Duration::from_secs(90), "three members balanced", || {
        settled(at(&nodes, 1), &nodes, &[0, 1, 2], &secret, &sfx)
    });
    stop.store(true, Ordering::Relaxed);
    assert!(w.join().expect("writer") > 0);
    let st = status(at(&nodes, 0));
    assert!(st["moves_done"].as_u64().unwrap_or(0) >= 2, "{st}");
    assert_eq!(st["in_flight"], json!([]), "{st}");
    eventually(Duration::from_secs(30), "given-away copies deleted", || {
        no_stale_copies(&nodes, at(&nodes, 0), &secret, &sfx)
    });
    // Writes that raced the last move reach every copy by the sweep.
    eventually(
        Duration::from_secs(30),
        "copies agree after the writes",
        || settled(at(&nodes, 2), &nodes, &[0, 1, 2], &secret, &sfx),
    );
    for i in 0..3 {
        all_readable(at(&nodes, i), &acked);
    }

    // The new member dies with writes going on; its copies are replaced.
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(
        at(&nodes, 1).port,
        "during-loss-",
        2000,
        Arc::clone(&stop),
        Arc::clone(&acked),
    );
    std::thread::sleep(Duration::from_millis(500));
    nodes[2].take().expect("c").kill9();
    eventually(
        Duration::from_secs(60),
        "the lost member's copies replaced",
        || settled(at(&nodes, 0), &nodes, &[0, 1], &secret, &sfx),
    );
    let st = status(at(&nodes, 0));
    assert_eq!(st["gone"], json!([NAMES[2]]), "{st}");
    stop.store(true, Ordering::Relaxed);
    assert!(w.join().expect("writer") > 0);
    eventually(
        Duration::from_secs(30),
        "copies agree after the writes",
        || settled(at(&nodes, 1), &nodes, &[0, 1], &secret, &sfx),
    );
    for i in 0..2 {
        all_readable(at(&nodes, i), &acked);
    }

    // It comes back on its old data: the stale copies go, its share returns.
    nodes[2] = Some(node_with(dirs[2].path(), &etcd, NAMES[2], &FLAGS));
    eventually(Duration::from_secs(90), "balanced again over three", || {
        settled(at(&nodes, 0), &nodes, &[0, 1, 2], &secret, &sfx)
    });
    eventually(Duration::from_secs(30), "no stale copy left", || {
        no_stale_copies(&nodes, at(&nodes, 0), &secret, &sfx)
    });
    for i in 0..3 {
        all_readable(at(&nodes, i), &acked);
    }

    // Decommission: c's copies move off while writes go on; c then holds
    // none, and the status says it can be stopped.
    let a = at(&nodes, 0);
    let path = format!("/_node/_local/_nodes/{}", NAMES[2]);
    let r = a.admin("GET", &path, None);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["state"], json!("live"), "{r:?}");
    assert!(r.json()["shard_copies"].as_u64() > Some(0), "{r:?}");
    let r = a.admin("GET", "/_node/_local/_nodes/nobody@127.0.0.1", None);
    assert_eq!(r.status, 404, "{r:?}");
    let r = a.admin("DELETE", "/_node/_local/_nodes/nobody@127.0.0.1", None);
    assert_eq!(r.status, 404, "{r:?}");
    let r = a.admin("PUT", &path, Some("[1]"));
    assert_eq!(r.status, 400, "{r:?}");
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(
        at(&nodes, 0).port,
        "during-leave-",
        2000,
        Arc::clone(&stop),
        Arc::clone(&acked),
    );
    let r = a.admin("DELETE", &path, None);
    assert_eq!(r.status, 202, "{r:?}");
    assert_eq!(
        a.admin("GET", &path, None).json()["state"],
        json!("leaving")
    );
    eventually(
        Duration::from_secs(90),
        "the leaving member emptied",
        || settled(at(&nodes, 0), &nodes, &[0, 1], &secret, &sfx),
    );
    let st = status(at(&nodes, 1));
    assert_eq!(st["decommissioned"], json!([NAMES[2]]), "{st}");
    assert_eq!(st["under_replicated"], json!([]), "{st}");
    assert_eq!(
        at(&nodes, 1).admin("GET", &path, None).json()["shard_copies"],
        json!(0)
    );
    stop.store(true, Ordering::Relaxed);
    assert!(w.join().expect("writer") > 0);
    eventually(
        Duration::from_secs(30),
        "copies agree after leaving",
        || {
            settled(at(&nodes, 1), &nodes, &[0, 1], &secret, &sfx)
                && no_stale_copies(&nodes, at(&nodes, 0), &secret, &sfx)
        },
    );
    for i in 0..3 {
        all_readable(at(&nodes, i), &acked);
    }
    // Taking the mark off gives it its share again.
    let r = a.admin("PUT", &path, Some("{}"));
    assert_eq!(r.status, 201, "{r:?}");
    eventually(Duration::from_secs(90), "readmitted and balanced", || {
        settled(at(&nodes, 0), &nodes, &[0, 1, 2], &secret, &sfx)
    });
}
