//! The nemesis (issue 39): Settee members and a three-member etcd on
//! loopback, clients writing through every member, and faults injected at
//! random — SIGKILL and restart, SIGSTOP/SIGCONT past the lease, a member
//! cut off from the others or from etcd (refused or blackholed, through
//! TCP proxies the harness controls), two members cut from each other, an
//! etcd member killed, two faults at once, a member added and one
//! decommissioned mid-run. After the last fault is healed the checker
//! waits for the cluster to settle (balanced, every copy of every shard
//! holding the same leaves) and verifies the clients' history: no
//! quorum-acknowledged write lost, no deleted document back.
//!
//! Short form in `scripts/test` (`SETTEE_NEMESIS_ROUNDS`, default 10); the
//! long form for the figures in bench/RESULTS.md:
//! `SETTEE_NEMESIS_ROUNDS=100 cargo test --release -p settee --test nemesis -- --nocapture`.
//! `SETTEE_NEMESIS_SEED` repeats a run's choices (the seed is printed);
//! `SETTEE_NEMESIS_FAULTS=CutPair,Kill` limits the faults to those kinds;
//! `SETTEE_NEMESIS_REPORT=FILE` writes the figures as JSON.
//!
//! Bounded: every fault is held at most 5 s, every start 30 s, every
//! client request 4 s, the whole run by rounds and a deadline; all traffic
//! is to 127.0.0.1. Disks filling up are not among the faults yet.

mod cluster_support;
mod common;
#[path = "../../settee-cluster/tests/common/mod.rs"]
mod etcd_common;
mod nemesis_support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster_support::eventually;
use nemesis_support::check::{quantile, settled, verify};
use nemesis_support::etcd3::Etcd3;
use nemesis_support::load::{self, History};
use nemesis_support::members::Members;
use nemesis_support::proxy::Cut;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

const DB: &str = "nem";
const N: usize = 3;
const LEASE_S: u64 = 2;
const FLAGS: [&str; 8] = [
    "--lease-ttl-s",
    "2",
    "--sync-interval-ms",
    "1000",
    "--heal-after-s",
    "6",
    "--rebalance-max-moves",
    "2",
];
const START_LIMIT: Duration = Duration::from_secs(30);

/// A fault as injected (slots of members, etcd members).
#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill(usize),
    Pause(usize),
    Isolate(usize, Cut),
    CutPair(usize, usize, Cut),
    CutEtcd(usize, Cut),
    KillEtcd(usize),
    KillAndIsolate(usize, usize),
}

impl Fault {
    /// The members a client's request to would fail or wait because of
    /// the fault itself.
    fn members(&self) -> Vec<usize> {
        match *self {
            Fault::Kill(a) | Fault::Pause(a) | Fault::Isolate(a, _) | Fault::CutEtcd(a, _) => {
                vec![a]
            }
            Fault::KillAndIsolate(a, b) => vec![a, b],
            Fault::CutPair(..) | Fault::KillEtcd(_) => vec![],
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Fault::Kill(_) => "kill -9 + restart",
            Fault::Pause(_) => "SIGSTOP/SIGCONT",
            Fault::Isolate(..) => "member cut from members",
            Fault::CutPair(..) => "two members cut apart",
            Fault::CutEtcd(..) => "member cut from etcd",
            Fault::KillEtcd(_) => "etcd member killed",
            Fault::KillAndIsolate(..) => "kill one + cut another",
        }
    }
}

fn pick<T: Copy>(rng: &mut StdRng, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())]
}

/// A random fault, of the kinds `SETTEE_NEMESIS_FAULTS` names (a comma
/// list of variant names, e.g. `CutPair,Kill`) when it is set.
fn choose(rng: &mut StdRng, running: &[usize]) -> Fault {
    let only = std::env::var("SETTEE_NEMESIS_FAULTS").unwrap_or_default();
    let allowed = |f: &Fault| {
        let name = format!("{f:?}");
        only.is_empty()
            || only
                .split(',')
                .any(|k| name.split('(').next() == Some(k.trim()))
    };
    for _ in 0..1000 {
        let f = choose_any(rng, running);
        if allowed(&f) {
            return f;
        }
    }
    panic!("SETTEE_NEMESIS_FAULTS={only} names no fault");
}

fn choose_any(rng: &mut StdRng, running: &[usize]) -> Fault {
    let cut = if rng.random_bool(0.5) {
        Cut::Refuse
    } else {
        Cut::Blackhole
    };
    let a = pick(rng, running);
    let others: Vec<usize> = running.iter().copied().filter(|x| *x != a).collect();
    match rng.random_range(0..10) {
        0 | 1 => Fault::Kill(a),
        2 | 3 => Fault::Pause(a),
        4 => Fault::Isolate(a, cut),
        5 => Fault::CutPair(a, pick(rng, &others), cut),
        6 | 7 => Fault::CutEtcd(a, cut),
        8 => Fault::KillEtcd(rng.random_range(0..3)),
        _ => Fault::KillAndIsolate(a, pick(rng, &others)),
    }
}

fn inject(m: &mut Members, etcd: &mut Etcd3, f: Fault) {
    match f {
        Fault::Kill(a) => m.kill(a),
        Fault::Pause(a) => m.pause(a, true),
        Fault::Isolate(a, c) => m.isolate(a, Some(c)),
        Fault::CutPair(a, b, c) => m.link(a, b, Some(c)),
        Fault::CutEtcd(a, c) => m.etcd_link(a, Some(c)),
        Fault::KillEtcd(e) => etcd.kill(e),
        Fault::KillAndIsolate(a, b) => {
            m.kill(a);
            m.isolate(b, Some(Cut::Blackhole));
        }
    }
}

fn heal(m: &mut Members, etcd: &mut Etcd3, f: Fault) {
    match f {
        Fault::Kill(a) => m.start(a, START_LIMIT).expect("restart"),
        Fault::Pause(a) => m.pause(a, false),
        Fault::Isolate(a, _) => m.isolate(a, None),
        Fault::CutPair(a, b, _) => m.link(a, b, None),
        Fault::CutEtcd(a, _) => m.etcd_link(a, None),
        Fault::KillEtcd(e) => etcd.restart(e),
        Fault::KillAndIsolate(a, b) => {
            m.isolate(b, None);
            m.start(a, START_LIMIT).expect("restart");
        }
    }
}

/// A fault as it happened: when, and the ports of the members it hit.
struct Injected {
    kind: &'static str,
    t0: Instant,
    t1: Instant,
    faulted: Vec<u16>,
}

struct Availability {
    baseline_p99_ms: f64,
    failed_elsewhere: usize,
    disrupted: BTreeMap<&'static str, (f64, f64)>,
}

/// How writes sent to members a fault did not hit fared while it was held:
/// the p99 latency of quorum writes before the first fault; how many such
/// writes failed; and per kind of fault (median, max over its rounds) how
/// long after the injection the last of them failed or took more than
/// twice that p99 (0: none did).
fn availability(timings: &[load::Timing], injected: &[Injected], first: Instant) -> Availability {
    let mut before: Vec<f64> = timings
        .iter()
        .filter(|t| t.sent < first && t.quorum_ok)
        .map(|t| t.took.as_secs_f64())
        .collect();
    let p99 = quantile(&mut before, 0.99).unwrap_or(0.0);
    let mut failed_elsewhere = 0;
    let mut per_kind: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    for (k, f) in injected.iter().enumerate() {
        let (mut worst, mut failed, mut slow) = (0.0f64, 0, 0);
        let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
        for t in timings
            .iter()
            .filter(|t| t.sent >= f.t0 && t.sent <= f.t1 && !f.faulted.contains(&t.port))
        {
            failed += usize::from(t.failed);
            if t.failed {
                *statuses.entry(t.status).or_default() += 1;
            }
            slow += usize::from(!t.failed && t.took.as_secs_f64() > 2.0 * p99);
            if t.failed || t.took.as_secs_f64() > 2.0 * p99 {
                worst = worst.max((t.sent + t.took - f.t0).as_secs_f64());
            }
        }
        if failed + slow > 0 {
            println!(
                "fault {} ({}): through unfaulted members {failed} writes failed \
                 (status: count, 0 = no answer: {statuses:?}), {slow} slow, \
                 the last {worst:.2} s after the injection",
                k + 1,
                f.kind
            );
        }
        failed_elsewhere += failed;
        per_kind.entry(f.kind).or_default().push(worst);
    }
    let disrupted = per_kind
        .into_iter()
        .map(|(k, mut xs)| {
            let med = quantile(&mut xs, 0.5).unwrap_or(0.0);
            (k, (med, quantile(&mut xs, 1.0).unwrap_or(0.0)))
        })
        .collect();
    Availability {
        baseline_p99_ms: p99 * 1000.0,
        failed_elsewhere,
        disrupted,
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Decommissions member `i` through member `via` and stops it once it
/// holds no copy (at most 120 s).
fn decommission(m: &mut Members, i: usize, via: usize) {
    let path = format!("/_node/_local/_nodes/{}", m.slots[i].name);
    let r = m.server(via).admin("DELETE", &path, None);
    assert_eq!(r.status, 202, "{r:?}");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = m.server(via).admin("GET", &path, None);
        if r.status == 200 && r.json()["shard_copies"] == json!(0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} not emptied: {r:?}",
            m.slots[i].name
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    m.stop(i);
    m.slots[i].retired = true;
}

#[test]
fn no_acknowledged_write_is_lost_under_faults() {
    let rounds = env_u64("SETTEE_NEMESIS_ROUNDS").unwrap_or(10) as usize;
    let seed = env_u64("SETTEE_NEMESIS_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    println!("nemesis: seed {seed}, {rounds} rounds");
    let mut rng = StdRng::seed_from_u64(seed);
    // A member added every `every` rounds, one decommissioned between.
    let every = (rounds / 4).max(3);
    let events: Vec<usize> = (1..)
        .map(|k| k * every)
        .take_while(|r| *r < rounds)
        .collect();
    let adds = events.len().div_ceil(2);

    let mut etcd = Etcd3::start();
    let mut m = Members::new(&etcd, N + adds, &FLAGS);
    for i in 0..N {
        m.start(i, START_LIMIT).expect("first start");
    }
    let secret =
        cluster_support::secret_at(&format!("http://127.0.0.1:{}", etcd.client_ports()[0]));
    let r = m.server(0).admin("PUT", &format!("/{DB}?q=4&n={N}"), None);
    assert_eq!(r.status, 201, "{r:?}");

    let ports = Arc::new(Mutex::new(m.ports()));
    let history = Arc::new(Mutex::new(History::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let run_deadline = Instant::now() + Duration::from_secs(60 + rounds as u64 * 40);
    let clients = load::start(
        4,
        DB,
        ports.clone(),
        history.clone(),
        stop.clone(),
        seed,
        run_deadline,
    );
    std::thread::sleep(Duration::from_secs(2));

    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    // For the availability figures.
    let mut injected: Vec<Injected> = Vec::new();
    let first_fault = Instant::now();
    let mut next_slot = N;
    for round in 1..=rounds {
        assert!(Instant::now() < run_deadline, "the run took too long");
        if let Some(k) = events.iter().position(|r| *r == round) {
            if k % 2 == 0 {
                m.start(next_slot, START_LIMIT).expect("a new member");
                println!("round {round}: added {}", m.slots[next_slot].name);
                next_slot += 1;
                *counts.entry("member added").or_default() += 1;
            } else {
                let members = m.members();
                let i = pick(&mut rng, &members);
                let via = *members.iter().find(|x| **x != i).expect("another member");
                decommission(&mut m, i, via);
                println!("round {round}: decommissioned {}", m.slots[i].name);
                *counts.entry("member decommissioned").or_default() += 1;
            }
            *ports.lock().expect("ports") = m.ports();
            continue;
        }
        let fault = choose(&mut rng, &m.running());
        let hold = Duration::from_millis(rng.random_range(1000..5000));
        let faulted: Vec<u16> = fault
            .members()
            .iter()
            .filter_map(|i| m.slots[*i].server.as_ref().map(|s| s.port))
            .collect();
        let t0 = Instant::now();
        inject(&mut m, &mut etcd, fault);
        std::thread::sleep(hold);
        heal(&mut m, &mut etcd, fault);
        let t1 = Instant::now();
        *ports.lock().expect("ports") = m.ports();
        println!(
            "round {round}: {fault:?} held {:.1} s, healed in {:.1} s",
            hold.as_secs_f64(),
            (t1 - t0 - hold).as_secs_f64()
        );
        *counts.entry(fault.kind()).or_default() += 1;
        injected.push(Injected {
            kind: fault.kind(),
            t0,
            t1,
            faulted,
        });
        std::thread::sleep(Duration::from_millis(rng.random_range(200..1500)));
    }
    m.heal_all();
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().expect("client thread");
    }
    let faults_done = Instant::now();

    let mut last = String::new();
    let mut compared = 0;
    let settle_deadline = faults_done + Duration::from_secs(180);
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
        "the cluster did not settle within 180 s: {last}"
    );
    let heal_s = faults_done.elapsed().as_secs_f64();

    let h = history.lock().expect("history");
    let via = m.server(m.members()[0]);
    let verdict = verify(via, DB, &h);

    let avail = availability(&h.timings, &injected, first_fault);
    let report = json!({
        "seed": seed,
        "rounds": rounds,
        "lease_s": LEASE_S,
        "faults": counts,
        "documents": verdict.docs,
        "writes_acknowledged_quorum": h.quorum_acks,
        "writes_acknowledged_w1": h.w1_acks,
        "writes_acknowledged_partial_202": h.partial_acks,
        "requests_without_answer": h.failures,
        "write_p99_before_faults_ms": avail.baseline_p99_ms,
        "writes_failed_through_unfaulted_members_while_held": avail.failed_elsewhere,
        "revisions_checked": verdict.revisions_checked,
        "lost_quorum_writes": verdict.lost_quorum.len(),
        "lost_other_writes": verdict.lost_other.len(),
        "deleted_documents_back": verdict.resurrected.len(),
        "documents_not_at_their_last_revision": verdict.wrong_winner.len(),
        "documents_left_uncertain": verdict.uncertain,
        "shards_with_identical_copies_after_heal": compared,
        "seconds_to_heal": heal_s,
        "seconds_disrupted_through_unfaulted_members_median_max": avail.disrupted,
    });
    println!("{}", serde_json::to_string_pretty(&report).expect("json"));
    if let Ok(path) = std::env::var("SETTEE_NEMESIS_REPORT") {
        std::fs::write(&path, serde_json::to_vec_pretty(&report).expect("json")).expect("report");
    }
    assert!(h.quorum_acks > 0, "no write was acknowledged at all");
    assert!(verdict.clean(), "{verdict:#?}");
}

#[test]
fn a_member_cut_from_etcd_refuses_writes_and_rejoins_as_does_a_paused_one() {
    let etcd = Etcd3::start();
    let mut m = Members::new(&etcd, 2, &FLAGS);
    m.start(0, START_LIMIT).expect("a");
    m.start(1, START_LIMIT).expect("b");
    let r = m.server(0).admin("PUT", "/cut?q=2&n=2", None);
    assert_eq!(r.status, 201, "{r:?}");
    let put = |m: &Members, i: usize, id: &str| {
        m.server(i)
            .admin("PUT", &format!("/cut/{id}"), Some(r#"{"v":1}"#))
    };
    assert_eq!(put(&m, 1, "before").status, 201);

    m.etcd_link(1, Some(Cut::Refuse));
    eventually(
        Duration::from_secs(4 * LEASE_S),
        "b still says it is up",
        || m.server(1).admin("GET", "/_up", None).status == 503,
    );
    let r = put(&m, 1, "while-cut");
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.error(), "unavailable");
    // It still answers reads, and the other member takes writes.
    let r = m.server(1).admin("GET", "/cut/before", None);
    assert_eq!(r.status, 200, "{r:?}");
    let r = put(&m, 0, "through-a");
    assert!(r.status == 201 || r.status == 202, "{r:?}");

    m.etcd_link(1, None);
    eventually(
        Duration::from_secs(10),
        "b did not rejoin after the link healed",
        || m.server(1).admin("GET", "/_up", None).status == 200,
    );
    eventually(
        Duration::from_secs(10),
        "b does not take writes after rejoining",
        || put(&m, 1, "after-cut").status == 201,
    );

    // Paused past its lease: counted out, then back by itself.
    m.pause(1, true);
    std::thread::sleep(Duration::from_secs(2 * LEASE_S + 1));
    let members = m.server(0).admin("GET", "/_membership", None).json();
    assert_eq!(members["all_nodes"], json!(["n0@127.0.0.1"]), "{members}");
    m.pause(1, false);
    eventually(
        Duration::from_secs(10),
        "b did not rejoin after SIGCONT",
        || {
            m.server(0).admin("GET", "/_membership", None).json()["all_nodes"]
                == json!(["n0@127.0.0.1", "n1@127.0.0.1"])
        },
    );
    eventually(
        Duration::from_secs(10),
        "b does not take writes after the pause",
        || put(&m, 1, "after-pause").status == 201,
    );
    for id in ["before", "through-a", "after-cut", "after-pause"] {
        let r = m.server(0).admin("GET", &format!("/cut/{id}"), None);
        assert_eq!(r.status, 200, "{id}: {r:?}");
    }
}
