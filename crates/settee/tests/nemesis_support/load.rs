//! The nemesis's clients: threads that create, update and delete their own
//! documents through any member (`w=2`, a quorum of three copies, or
//! `w=1`), recording what was acknowledged.
//!
//! A document's life: created (`{"s":0}`), updated a few times (`{"s":k}`),
//! deleted; one client owns it, so its history is a line. A request that
//! got no answer (a member killed, paused or cut off) is sent again through
//! another member: revisions are computed from the parent and the body, so
//! the same edit sent twice is the same revision, never a conflict. When
//! the answers leave the outcome unknown the client reads the document's
//! leaves to learn it; a document it cannot learn about is left alone
//! (`uncertain`) and only its acknowledged revisions are checked.
//!
//! Invariants: every request is bounded (1 s to connect, 4 s in all);
//! every client stops at its deadline or after `max_ops` operations; the
//! history holds at most one entry per document and one timing per
//! operation ([`MAX_OPS`] at most).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// Operations per client at most.
pub const MAX_OPS: usize = 200_000;

/// One acknowledged write.
#[derive(Clone, Debug)]
pub struct Ack {
    pub rev: String,
    pub deleted: bool,
    /// 200/201 with `w=2`: a quorum of copies had it.
    pub quorum: bool,
}

/// What a client knows of one of its documents.
#[derive(Clone, Debug, Default)]
pub struct DocLog {
    pub acks: Vec<Ack>,
    /// The revision the document is at, as far as the client knows.
    pub known: Option<String>,
    /// Whether `known` is a deletion.
    pub deleted: bool,
    /// The outcome of an edit could not be learned: only `acks` count.
    pub uncertain: bool,
}

/// One write's timing: when it was sent, how long it took, whether it was
/// acknowledged by a quorum.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// The member it was sent to.
    pub port: u16,
    /// The answer's status (0: none came).
    pub status: u16,
    pub sent: Instant,
    pub took: Duration,
    pub quorum_ok: bool,
    pub failed: bool,
}

/// Everything the clients recorded.
#[derive(Default)]
pub struct History {
    pub docs: BTreeMap<String, DocLog>,
    pub timings: Vec<Timing>,
    pub quorum_acks: u64,
    pub w1_acks: u64,
    pub partial_acks: u64,
    pub failures: u64,
}

pub type Shared = Arc<Mutex<History>>;

/// The ports clients may send to (the nemesis updates it).
pub type Ports = Arc<Mutex<Vec<u16>>>;

enum Edit {
    Put { s: u64 },
    Delete,
}

enum Sent {
    Acked {
        rev: String,
        status: u16,
    },
    /// 409/404: the edit's parent is not a leaf where it was sent.
    Refused,
    /// No answer (0), or 5xx: unknown whether it was applied.
    Unknown(u16),
}

struct Client {
    agent: ureq::Agent,
    db: String,
    ports: Ports,
    rng: StdRng,
    auth: String,
}

impl Client {
    fn port(&mut self) -> Option<u16> {
        let ports = self.ports.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (!ports.is_empty()).then(|| ports[self.rng.random_range(0..ports.len())])
    }

    fn send(&mut self, port: u16, id: &str, parent: Option<&str>, edit: &Edit, w: u8) -> Sent {
        let base = format!("http://127.0.0.1:{port}/{}/{id}?w={w}", self.db);
        let result = match (edit, parent) {
            (Edit::Put { s }, parent) => {
                let mut body = json!({"s": s});
                if let Some(p) = parent {
                    body["_rev"] = json!(p);
                }
                self.agent
                    .put(&base)
                    .set("Authorization", &self.auth)
                    .set("Content-Type", "application/json")
                    .send_string(&body.to_string())
            }
            (Edit::Delete, Some(p)) => self
                .agent
                .delete(&format!("{base}&rev={p}"))
                .set("Authorization", &self.auth)
                .call(),
            (Edit::Delete, None) => return Sent::Refused,
        };
        match result {
            Ok(r) => {
                let status = r.status();
                let v: Value = r.into_json().unwrap_or(Value::Null);
                match v["rev"].as_str() {
                    Some(rev) => Sent::Acked {
                        rev: rev.to_string(),
                        status,
                    },
                    None => Sent::Unknown(status),
                }
            }
            Err(ureq::Error::Status(409 | 404, _)) => Sent::Refused,
            Err(ureq::Error::Status(s, _)) => Sent::Unknown(s),
            Err(_) => Sent::Unknown(0),
        }
    }

    /// The document's leaves (`open_revs=all`) through some member: `None`
    /// if no member answered.
    fn leaves(&mut self, id: &str) -> Option<Vec<Value>> {
        for _ in 0..4 {
            let port = self.port()?;
            let url = format!("http://127.0.0.1:{port}/{}/{id}?open_revs=all", self.db);
            if let Ok(r) = self
                .agent
                .get(&url)
                .set("Authorization", &self.auth)
                .set("Accept", "application/json")
                .call()
            {
                if let Ok(Value::Array(rows)) = r.into_json::<Value>() {
                    return Some(
                        rows.into_iter()
                            .filter_map(|r| r.get("ok").cloned())
                            .collect(),
                    );
                }
            }
        }
        None
    }

    /// Learns whether `edit` was applied: the leaf it made, if any.
    fn learn(&mut self, id: &str, edit: &Edit) -> Option<Option<(String, bool)>> {
        let leaves = self.leaves(id)?;
        let made = leaves.iter().find(|d| match edit {
            Edit::Put { s } => d["s"] == json!(s) && d["_deleted"] != json!(true),
            Edit::Delete => d["_deleted"] == json!(true),
        });
        Some(made.and_then(|d| {
            d["_rev"]
                .as_str()
                .map(|r| (r.to_string(), d["_deleted"] == json!(true)))
        }))
    }
}

/// Starts `clients` threads on `db`, each until `stop`, its deadline, or
/// `max_ops` operations; returns their handles.
pub fn start(
    clients: usize,
    db: &str,
    ports: Ports,
    history: Shared,
    stop: Arc<AtomicBool>,
    seed: u64,
    deadline: Instant,
) -> Vec<std::thread::JoinHandle<()>> {
    let auth = crate::common::basic_auth(crate::common::ADMIN.0, crate::common::ADMIN.1);
    (0..clients)
        .map(|t| {
            let mut c = Client {
                agent: ureq::AgentBuilder::new()
                    .timeout_connect(Duration::from_secs(1))
                    .timeout(Duration::from_secs(4))
                    .build(),
                db: db.to_string(),
                ports: ports.clone(),
                rng: StdRng::seed_from_u64(seed.wrapping_add(t as u64 * 7919)),
                auth: auth.clone(),
            };
            let (history, stop) = (history.clone(), stop.clone());
            std::thread::spawn(move || run(&mut c, t, &history, &stop, deadline))
        })
        .collect()
}

fn run(c: &mut Client, t: usize, history: &Shared, stop: &AtomicBool, deadline: Instant) {
    let mut doc_no = 0usize;
    let mut ops = 0usize;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && ops < MAX_OPS {
        let id = format!("c{t}-{doc_no:05}");
        doc_no += 1;
        let updates = c.rng.random_range(0..4u64);
        let mut known: Option<String> = None;
        let mut edits: Vec<Edit> = (0..=updates).map(|s| Edit::Put { s }).collect();
        edits.push(Edit::Delete);
        record(history, &id, |_| {});
        for edit in &edits {
            if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
                break;
            }
            ops += 1;
            let w: u8 = if c.rng.random_bool(0.5) { 2 } else { 1 };
            match edit_once(c, history, &id, known.as_deref(), edit, w) {
                Some(rev) => known = Some(rev),
                None => {
                    record(history, &id, |d| d.uncertain = true);
                    break;
                }
            }
        }
    }
}

/// Sends one edit (again through other members while the outcome is
/// unknown, at most 4 times) and returns the revision the document is at
/// after it, or `None` when that cannot be learned.
fn edit_once(
    c: &mut Client,
    history: &Shared,
    id: &str,
    parent: Option<&str>,
    edit: &Edit,
    w: u8,
) -> Option<String> {
    for _ in 0..4 {
        let Some(port) = c.port() else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let sent = Instant::now();
        let outcome = c.send(port, id, parent, edit, w);
        let took = sent.elapsed();
        let mut h = history.lock().unwrap_or_else(|p| p.into_inner());
        // 201 for an update, 200 for a deletion: `w` copies had it; 202:
        // fewer.
        let quorum_ok = matches!(
            outcome,
            Sent::Acked {
                status: 200 | 201,
                ..
            }
        ) && w == 2;
        let failed = matches!(outcome, Sent::Unknown(_));
        let status = match &outcome {
            Sent::Acked { status, .. } | Sent::Unknown(status) => *status,
            Sent::Refused => 409,
        };
        if h.timings.len() < MAX_OPS {
            h.timings.push(Timing {
                port,
                status,
                sent,
                took,
                quorum_ok,
                failed,
            });
        }
        match outcome {
            Sent::Acked { rev, status } => {
                match (status, w) {
                    (202, _) => h.partial_acks += 1,
                    (_, 2) => h.quorum_acks += 1,
                    _ => h.w1_acks += 1,
                }
                let deleted = matches!(edit, Edit::Delete);
                let d = h.docs.entry(id.to_string()).or_default();
                d.acks.push(Ack {
                    rev: rev.clone(),
                    deleted,
                    quorum: quorum_ok,
                });
                d.known = Some(rev.clone());
                d.deleted = deleted;
                return Some(rev);
            }
            Sent::Unknown(_) => {
                h.failures += 1;
                drop(h);
                std::thread::sleep(Duration::from_millis(50));
            }
            Sent::Refused => {
                drop(h);
                // The edit may have been applied by an earlier try whose
                // answer was lost.
                // Or the member asked lacks the parent yet (it was
                // acknowledged by fewer copies): try again a moment later.
                if let Some(Some((rev, deleted))) = c.learn(id, edit) {
                    record(history, id, |d| {
                        d.known = Some(rev.clone());
                        d.deleted = deleted;
                    });
                    return Some(rev);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    match c.learn(id, edit) {
        Some(Some((rev, deleted))) => {
            record(history, id, |d| {
                d.known = Some(rev.clone());
                d.deleted = deleted;
            });
            Some(rev)
        }
        _ => None,
    }
}

fn record(history: &Shared, id: &str, f: impl FnOnce(&mut DocLog)) {
    let mut h = history.lock().unwrap_or_else(|p| p.into_inner());
    f(h.docs.entry(id.to_string()).or_default());
}
