//! Power loss on a cluster (issue 44): three Settee members on a
//! three-member etcd, each member's data directory on its own LazyFS mount
//! (tests/lazyfs_support). Clients create, update and delete their own
//! documents through every member (the nemesis's clients,
//! tests/nemesis_support/load.rs: `w=2` or `w=1`). Each round power-cuts
//! one member while they write — SIGKILL, then `lazyfs::clear-cache`
//! drops every byte it had not fsynced — and restarts it on the same
//! directory. After the last round the cluster must settle (every copy of
//! every shard holding the same leaves), and then:
//! - every write acknowledged with `w=2` (200/201) is in its document's
//!   revision tree, read through each member, and a document's last such
//!   revision is a leaf on at least two copies;
//! - no deleted document is back, and every document the clients know the
//!   state of answers its last revision, through each member.
//!
//! Short form in `scripts/test` (3 rounds: each member cut once, about a
//! minute); `SETTEE_POWERLOSS_CLUSTER_ROUNDS=N` for more. Bounded: every
//! start 30 s, every client request 4 s, the settling 120 s; all traffic
//! is to 127.0.0.1.

mod cluster_support;
mod common;
#[path = "../../settee-cluster/tests/common/mod.rs"]
mod etcd_common;
mod lazyfs_support;
mod nemesis_support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lazyfs_support::Lazy;
use nemesis_support::check::{settled, verify};
use nemesis_support::etcd3::Etcd3;
use nemesis_support::load::{self, History};
use nemesis_support::members::Members;

const DB: &str = "pow";
const N: usize = 3;
/// A 2 s lease, as in the nemesis; no shard moves (every member holds a
/// copy of every shard already).
const FLAGS: [&str; 6] = [
    "--lease-ttl-s",
    "2",
    "--sync-interval-ms",
    "1000",
    "--heal-after-s",
    "600",
];
const START_LIMIT: Duration = Duration::from_secs(30);

#[test]
fn a_power_cut_of_one_member_loses_no_quorum_write() {
    let rounds: usize = std::env::var("SETTEE_POWERLOSS_CLUSTER_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let lazies: Vec<Lazy> = (0..N).map(|_| Lazy::mount_with_cache(256)).collect();
    let etcd = Etcd3::start();
    let mut m = Members::new(&etcd, N, &FLAGS);
    for (i, lazy) in lazies.iter().enumerate() {
        m.slots[i].dir = lazy.dir.join("data");
        m.start(i, START_LIMIT).expect("first start");
    }
    let secret =
        cluster_support::secret_at(&format!("http://127.0.0.1:{}", etcd.client_ports()[0]));
    let r = m.server(0).admin("PUT", &format!("/{DB}?q=2&n={N}"), None);
    assert_eq!(r.status, 201, "{r:?}");

    let ports = Arc::new(Mutex::new(m.ports()));
    let history = Arc::new(Mutex::new(History::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(30 + rounds as u64 * 40);
    let clients = load::start(
        4,
        DB,
        ports.clone(),
        history.clone(),
        stop.clone(),
        4404,
        deadline,
    );
    std::thread::sleep(Duration::from_secs(2));
    let mut restarts = Vec::new();
    for round in 0..rounds {
        let victim = round % N;
        let before = history.lock().unwrap().quorum_acks;
        m.kill(victim);
        lazies[victim].clear_cache();
        *ports.lock().unwrap() = m.ports();
        std::thread::sleep(Duration::from_secs(1));
        let t = Instant::now();
        // Retried until etcd lets the name go (the killed process's lease).
        m.start(victim, START_LIMIT).expect("restart after the cut");
        restarts.push(t.elapsed());
        *ports.lock().unwrap() = m.ports();
        std::thread::sleep(Duration::from_secs(2));
        let after = history.lock().unwrap().quorum_acks;
        eprintln!(
            "round {round}: power cut of {}, back in {:?}; {} quorum acknowledgements meanwhile",
            m.slots[victim].name,
            restarts[round],
            after - before
        );
    }
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().expect("client thread");
    }

    let settle_deadline = Instant::now() + Duration::from_secs(120);
    let mut last = String::new();
    let mut compared = 0;
    while Instant::now() < settle_deadline {
        match settled(&m, DB, N, &secret) {
            Ok(ranges) => {
                compared = ranges;
                last.clear();
                break;
            }
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        last.is_empty(),
        "the cluster did not settle within 120 s: {last}"
    );

    let h = history.lock().unwrap();
    assert!(h.quorum_acks > 0, "no write was acknowledged with w=2");
    let (mut lost_quorum, mut lost_w1) = (0, 0);
    for i in 0..N {
        let v = verify(m.server(i), DB, &h);
        lost_quorum += v.lost_quorum.len();
        lost_w1 += v.lost_other.len();
        eprintln!("read through {}: {v:?}", m.slots[i].name);
        assert!(
            v.lost_quorum.is_empty(),
            "w=2 writes lost: {:?}",
            v.lost_quorum
        );
        assert!(
            v.resurrected.is_empty(),
            "deleted documents back: {:?}",
            v.resurrected
        );
        assert!(
            v.wrong_winner.is_empty(),
            "documents not at their last revision: {:?}",
            v.wrong_winner
        );
    }
    // Each document's last w=2 revision, where it is the last edit the
    // client knows of: a leaf on at least two copies (all three, settled).
    let sfx = cluster_support::suffix(m.server(0), DB);
    let mut copies: Vec<BTreeMap<String, Vec<String>>> = vec![BTreeMap::new(); N];
    for range in cluster_support::copies(m.server(0), DB).keys() {
        let shard = format!("shards/{range}/{DB}{sfx}");
        for (i, c) in copies.iter_mut().enumerate() {
            c.extend(cluster_support::leaves(m.server(i), &shard, &secret));
        }
    }
    let mut checked = 0;
    for (id, log) in &h.docs {
        let Some(ack) = log.acks.last() else { continue };
        if !ack.quorum || log.uncertain || log.known.as_ref() != Some(&ack.rev) {
            continue;
        }
        let holders = copies
            .iter()
            .filter(|c| c.get(id).is_some_and(|l| l.contains(&ack.rev)))
            .count();
        assert!(holders >= 2, "{id} {} on {holders} copies", ack.rev);
        checked += 1;
    }
    restarts.sort();
    eprintln!(
        "power cuts: {rounds} (one member each); acknowledged: {} with w=2, {} with w=1, {} partial (202); \
         {} requests without answer; lost (summed over the {N} members read through): {lost_quorum} w=2, \
         {lost_w1} w=1; {checked} documents' last w=2 revision on >= 2 copies; \
         {compared} shards with identical copies; restart after the cut: median {:?}, max {:?}",
        h.quorum_acks,
        h.w1_acks,
        h.partial_acks,
        h.failures,
        restarts[restarts.len() / 2],
        restarts[restarts.len() - 1]
    );
}
