//! The progress of the shard moves this node is filling (issue 39): what
//! `_active_tasks` lists (`"type": "shard_move"`) and what the decider
//! puts beside each move in `GET /_cluster/rebalance` (documents and
//! bytes done, an ETA).
//!
//! Totals are the source copy's `doc_count + doc_del_count` and
//! `sizes.external` when the fill started: the figures are estimates (the
//! shard keeps taking writes while it is filled), capped at 100%.
//!
//! Invariants: an entry exists only while its fill runs (the guard
//! returned by [`Registry::start`] removes it when dropped); readers get a
//! copy, never a lock held across an await.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::layout::Move;

/// One move's figures at a moment.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct MoveProgress {
    /// Documents (revisions' documents) read from the sources so far.
    pub docs_done: u64,
    /// Documents in the source copy when the fill started.
    pub docs_total: u64,
    /// `bytes_total` scaled by the share of documents done.
    pub bytes_done: u64,
    /// The source copy's external size when the fill started.
    pub bytes_total: u64,
    /// Percent done (0–100).
    pub progress: u64,
    /// Seconds until done at the rate so far (absent before any progress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_s: Option<u64>,
    pub started_on: u64,
    pub updated_on: u64,
}

struct Entry {
    db: String,
    mv: Move,
    docs_total: u64,
    bytes_total: u64,
    started_on: u64,
    /// Documents read by the fills from earlier sources.
    docs_before: u64,
    /// The running fill's status (the replicator updates it).
    status: Arc<Mutex<settee_replicator::Status>>,
}

type Key = (String, String, String);

fn key(db: &str, mv: &Move) -> Key {
    (db.to_string(), mv.range.to_string(), mv.to.clone())
}

/// The moves this node fills now.
#[derive(Clone, Default)]
pub struct Registry {
    entries: Arc<Mutex<BTreeMap<Key, Entry>>>,
}

/// Removes its entry when dropped.
pub struct Tracked {
    registry: Registry,
    key: Key,
}

impl Tracked {
    /// A fresh status for the fill from the next source (the documents
    /// the previous one read are kept in the total).
    pub fn next_source(&self) -> Arc<Mutex<settee_replicator::Status>> {
        let mut entries = self.registry.entries.lock();
        let fresh = Arc::new(Mutex::new(settee_replicator::Status::default()));
        if let Some(e) = entries.get_mut(&self.key) {
            e.docs_before += e.status.lock().stats.docs_read;
            e.status = Arc::clone(&fresh);
        }
        fresh
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.registry.entries.lock().remove(&self.key);
    }
}

impl Registry {
    /// Starts tracking `mv`'s fill with the source's totals.
    pub fn start(&self, db: &str, mv: &Move, docs_total: u64, bytes_total: u64) -> Tracked {
        let k = key(db, mv);
        self.entries.lock().insert(
            k.clone(),
            Entry {
                db: db.to_string(),
                mv: mv.clone(),
                docs_total,
                bytes_total,
                started_on: settee_replicator::job::unix_now(),
                docs_before: 0,
                status: Arc::new(Mutex::new(settee_replicator::Status::default())),
            },
        );
        Tracked {
            registry: self.clone(),
            key: k,
        }
    }

    /// The figures of `mv`'s fill, if this node runs it.
    pub fn of(&self, db: &str, mv: &Move) -> Option<MoveProgress> {
        self.entries.lock().get(&key(db, mv)).map(figures)
    }

    /// `_active_tasks` entries, one per fill running here.
    pub fn active_tasks(&self, node: &str) -> Vec<Value> {
        self.entries
            .lock()
            .values()
            .map(|e| {
                let p = figures(e);
                json!({
                    "type": "shard_move",
                    "node": node,
                    "pid": "<settee>",
                    "database": e.db,
                    "range": e.mv.range.to_string(),
                    "source": e.mv.from,
                    "target": e.mv.to,
                    "changes_done": p.docs_done,
                    "total_changes": p.docs_total,
                    "progress": p.progress,
                    "bytes_done": p.bytes_done,
                    "bytes_total": p.bytes_total,
                    "eta_s": p.eta_s,
                    "started_on": p.started_on,
                    "updated_on": p.updated_on,
                })
            })
            .collect()
    }
}

fn figures(e: &Entry) -> MoveProgress {
    let now = settee_replicator::job::unix_now();
    let done = e.docs_before + e.status.lock().stats.docs_read;
    estimate(done, e.docs_total, e.bytes_total, e.started_on, now)
}

/// The figures for `done` of `total` documents after `started_on..now`.
pub fn estimate(
    done: u64,
    total: u64,
    bytes_total: u64,
    started_on: u64,
    now: u64,
) -> MoveProgress {
    let total = total.max(1);
    let share = (done as f64 / total as f64).min(1.0);
    let elapsed = now.saturating_sub(started_on) as f64;
    let eta_s = (done > 0).then(|| (elapsed * (1.0 - share) / share).round() as u64);
    MoveProgress {
        docs_done: done,
        docs_total: total,
        bytes_done: (bytes_total as f64 * share) as u64,
        bytes_total,
        progress: (share * 100.0).floor() as u64,
        eta_s,
        started_on,
        updated_on: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Range;

    #[test]
    fn estimates_scale_with_the_share_done() {
        let p = estimate(25, 100, 4000, 1000, 1010);
        assert_eq!((p.progress, p.bytes_done, p.eta_s), (25, 1000, Some(30)));
        // Nothing read yet: no ETA.
        assert_eq!(estimate(0, 100, 4000, 1000, 1010).eta_s, None);
        // Writes during the fill can take it past the start's total.
        let p = estimate(150, 100, 4000, 1000, 1010);
        assert_eq!((p.progress, p.bytes_done, p.eta_s), (100, 4000, Some(0)));
    }

    #[test]
    fn an_entry_lives_as_long_as_its_guard() {
        let r = Registry::default();
        let mv = Move {
            range: Range::new(0, 0x7fff_ffff).expect("a range"),
            to: "b".into(),
            from: Some("a".into()),
        };
        let t = r.start("db", &mv, 10, 100);
        let s = t.next_source();
        s.lock().stats.docs_read = 4;
        let s2 = t.next_source();
        s2.lock().stats.docs_read = 1;
        assert_eq!(r.of("db", &mv).map(|p| p.docs_done), Some(5));
        let tasks = r.active_tasks("n1");
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0]["type"], "shard_move");
        assert_eq!(tasks[0]["changes_done"], 5);
        drop(t);
        assert!(r.of("db", &mv).is_none() && r.active_tasks("n1").is_empty());
    }
}
