//! The background purger: one thread that, every `interval`, visits every
//! database with a TTL (its own `_auto_purge` setting, else the server's
//! default) and purges, through the database's normal purge path, the
//! documents whose every leaf is deleted and whose last change is older
//! than the TTL.
//!
//! Invariants:
//! - A document is purged only if its last change is at most the sequence
//!   [`Database::seq_made_by`] gives for `now - TTL` (never a younger
//!   change), and at most the sequence every [`Holds`] reader has read
//!   (view and Mango indexes, replications from this database): whoever
//!   must see a deletion sees it before its tombstone goes.
//! - An index's purge history is never outrun: a batch is cut so that no
//!   index that has applied purges up to `p` falls more than half the
//!   database's `purged_infos_limit` behind (it would have to be rebuilt).
//! - Only leaves named by the purge go, and only if they are still leaves
//!   when the writer applies it: a document written again since it was
//!   scanned keeps its new revision.
//! - Bounded: at most `max_batch_size` documents per purge request, at
//!   most [`SCAN_ROWS_MAX`] changes read per step, `max_docs_per_sec`
//!   documents per second, [`DB_STEP_BUDGET`] of work on one database
//!   before the next gets its turn.
//! - Where it got to in a database (the highest sequence it has examined)
//!   is kept in memory only: after a restart it scans again from the start
//!   and purges what is still due; a purge request is atomic, so a restart
//!   in the middle of one leaves it done or not done.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};
use serde_json::{json, Value};
use settee_core::rev::Rev;
use settee_db::{Database, Engine};

use crate::props::ttl_of;
use crate::ttl::Ttl;

/// Most changes read per step before the purger looks up again.
pub const SCAN_ROWS_MAX: usize = 10_000;

/// Longest the purger works on one database before going on to the next.
pub const DB_STEP_BUDGET: Duration = Duration::from_secs(2);

/// Pause between passes while some database still has work due.
const BUSY_PAUSE: Duration = Duration::from_millis(20);

/// The purger's settings (`[couch_auto_purge_plugin]`), changed live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `deleted_document_ttl`: the TTL of databases that set none.
    pub default_ttl: Option<Ttl>,
    /// `max_batch_size`: most documents per purge request (CouchDB's 500).
    pub max_batch_size: usize,
    /// `check_interval`: time between passes over the databases.
    pub interval: Duration,
    /// `max_docs_per_sec`: most documents purged per second.
    pub max_docs_per_sec: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            default_ttl: None,
            max_batch_size: 500,
            interval: Duration::from_secs(60),
            max_docs_per_sec: 5000,
        }
    }
}

/// How far the readers of a database that must see its deletions have read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hold {
    /// The lowest sequence any of them has processed up to; None when none
    /// holds the database back.
    pub seq: Option<u64>,
    /// The lowest purge sequence an index of the database has applied;
    /// None when it has no built index.
    pub purge_seq: Option<u64>,
    /// Who holds at `seq` (for the task status and logs).
    pub by: Option<String>,
}

/// What holds the purger back: asked for every database before every
/// purge request (settee-http answers from the views and the replicator).
pub trait Holds: Send + Sync + 'static {
    fn hold(&self, db: &Database) -> Hold;
}

/// Counters for `_stats`.
#[derive(Debug, Default)]
pub struct Stats {
    /// Documents purged.
    pub docs_purged: AtomicU64,
    /// Purge requests made.
    pub purge_requests: AtomicU64,
    /// Passes over the databases.
    pub passes: AtomicU64,
    /// Steps that stopped because an index or a replication had not read
    /// the deletions due yet.
    pub held: AtomicU64,
    /// Purge requests or reads that failed (logged).
    pub failures: AtomicU64,
}

/// The database being worked on, for `_active_tasks`.
#[derive(Debug, Clone)]
struct Task {
    database: String,
    start_seq: u64,
    limit: u64,
    done_seq: u64,
    purged: u64,
    started_on: u64,
    updated_on: u64,
}

struct Inner {
    engine: Engine,
    holds: Arc<dyn Holds>,
    settings: Mutex<Settings>,
    stats: Stats,
    stop: Mutex<bool>,
    wake: Condvar,
    /// Highest sequence examined, per database incarnation.
    cursors: Mutex<HashMap<(String, u64), u64>>,
    task: Mutex<Option<Task>>,
}

/// The running purger; dropping it stops its thread and waits for it.
pub struct Purger {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Purger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Purger").finish_non_exhaustive()
    }
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Purger {
    /// Starts the purger's thread.
    pub fn start(
        engine: Engine,
        holds: Arc<dyn Holds>,
        settings: Settings,
    ) -> std::io::Result<Purger> {
        let inner = Arc::new(Inner {
            engine,
            holds,
            settings: Mutex::new(settings),
            stats: Stats::default(),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            cursors: Mutex::new(HashMap::new()),
            task: Mutex::new(None),
        });
        let worker = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name("auto-purge".into())
            .spawn(move || worker.run())?;
        Ok(Purger {
            inner,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// New settings, in effect from the next step (a shorter interval at
    /// once).
    pub fn set_settings(&self, settings: Settings) {
        let mut s = self.inner.settings.lock();
        if *s != settings {
            *s = settings;
            drop(s);
            self.inner.wake.notify_all();
        }
    }

    pub fn settings(&self) -> Settings {
        self.inner.settings.lock().clone()
    }

    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    /// The `_active_tasks` entry of the database being purged, if any.
    pub fn active(&self) -> Option<Value> {
        let t = self.inner.task.lock().clone()?;
        let total = t.limit.saturating_sub(t.start_seq);
        let done = t.done_seq.saturating_sub(t.start_seq);
        let progress = (done * 100).checked_div(total).unwrap_or(100);
        Some(json!({
            "type": "auto_purge",
            "database": t.database,
            "changes_done": done,
            "total_changes": total,
            "progress": progress,
            "docs_purged": t.purged,
            "started_on": t.started_on,
            "updated_on": t.updated_on,
        }))
    }

    /// Stops the thread and waits for it (a purge request under way
    /// finishes first).
    pub fn stop(&self) {
        *self.inner.stop.lock() = true;
        self.inner.wake.notify_all();
        let mut slot = self.thread.lock();
        // Stopped from its own thread (the last owner let go there): it
        // ends by itself once this returns.
        if slot
            .as_ref()
            .is_some_and(|t| t.thread().id() == std::thread::current().id())
        {
            return;
        }
        if let Some(t) = slot.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Purger {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Inner {
    fn stopping(&self) -> bool {
        *self.stop.lock()
    }

    /// Waits `d` or until stopped or woken; true when stopping.
    fn pause(&self, d: Duration) -> bool {
        let mut stop = self.stop.lock();
        if !*stop {
            self.wake.wait_for(&mut stop, d);
        }
        *stop
    }

    fn run(&self) {
        loop {
            let interval = self.settings.lock().interval;
            let busy = self.pass();
            self.stats.passes.fetch_add(1, Ordering::Relaxed);
            if self.pause(if busy { BUSY_PAUSE } else { interval }) {
                return;
            }
        }
    }

    /// One pass over the databases; true when some database still has
    /// work due (its step ran out of budget).
    fn pass(&self) -> bool {
        let names = match self.engine.list_dbs() {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "auto purge: cannot list databases");
                return false;
            }
        };
        let mut busy = false;
        let mut live = Vec::with_capacity(names.len());
        for name in names {
            if self.stopping() {
                return false;
            }
            let Ok(db) = self.engine.db(&name) else {
                continue;
            };
            live.push((name, db.created_us()));
            busy |= self.step(&db);
        }
        // Forget databases that are gone.
        self.cursors.lock().retain(|k, _| live.contains(k));
        busy
    }

    /// Works on one database for at most [`DB_STEP_BUDGET`]; true when
    /// work is left.
    fn step(&self, db: &Database) -> bool {
        let settings = self.settings.lock().clone();
        let ttl = match ttl_of(db.auto_purge().as_deref()).or(settings.default_ttl) {
            Some(Ttl::Secs(s)) => s,
            None | Some(Ttl::Infinity) => return false,
        };
        let cutoff = i64::try_from(unix_secs())
            .unwrap_or(i64::MAX)
            .saturating_sub(ttl);
        let Ok(cutoff) = u64::try_from(cutoff) else {
            return false;
        };
        let Some(end) = db.seq_made_by(cutoff) else {
            return false;
        };
        let key = (db.name().to_string(), db.created_us());
        let start = self.cursors.lock().get(&key).copied().unwrap_or(0);
        if end <= start {
            return false;
        }
        let began = Instant::now();
        let mut cursor = start;
        let mut purged_here = 0u64;
        let left = loop {
            if self.stopping() {
                break false;
            }
            let hold = self.holds.hold(db);
            let limit = end.min(hold.seq.unwrap_or(u64::MAX));
            if limit <= cursor {
                if limit < end {
                    self.stats.held.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(db = %db.name(), by = ?hold.by, "auto purge waits");
                }
                break false;
            }
            let room = match hold.purge_seq {
                Some(p) => {
                    let lag = db.seqs().1.saturating_sub(p);
                    (db.purged_infos_limit() / 2).saturating_sub(lag)
                }
                None => u64::MAX,
            };
            if room == 0 {
                self.stats.held.fetch_add(1, Ordering::Relaxed);
                break false;
            }
            let max = settings
                .max_batch_size
                .max(1)
                .min(usize::try_from(room).unwrap_or(usize::MAX));
            let (batch, examined) = match due(db, cursor, limit, max) {
                Ok(found) => found,
                Err(e) => {
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(db = %db.name(), error = %e, "auto purge: cannot read changes");
                    break false;
                }
            };
            self.show(db.name(), start, limit, cursor, purged_here);
            if !batch.is_empty() {
                let n = batch.len() as u64;
                let reqs = batch.into_iter().map(|(_, id, revs)| (id, revs)).collect();
                match db.purge(reqs) {
                    Ok(outcome) => {
                        let done =
                            outcome.purged.iter().filter(|(_, r)| !r.is_empty()).count() as u64;
                        purged_here += done;
                        self.stats.docs_purged.fetch_add(done, Ordering::Relaxed);
                        self.stats.purge_requests.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        self.stats.failures.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(db = %db.name(), error = %e, "auto purge failed");
                        break false;
                    }
                }
                let rate = settings.max_docs_per_sec.max(1);
                let wait = Duration::from_secs_f64(n as f64 / rate as f64);
                if self.pause(wait) {
                    break false;
                }
            }
            cursor = examined;
            self.cursors.lock().insert(key.clone(), cursor);
            self.show(db.name(), start, limit, cursor, purged_here);
            if cursor >= end {
                break false;
            }
            if began.elapsed() >= DB_STEP_BUDGET {
                break true;
            }
        };
        *self.task.lock() = None;
        if purged_here > 0 {
            tracing::info!(db = %db.name(), purged = purged_here, "auto purge");
        }
        left
    }

    fn show(&self, database: &str, start: u64, limit: u64, done: u64, purged: u64) {
        let now = unix_secs();
        let mut task = self.task.lock();
        match task.as_mut() {
            Some(t) if t.database == database => {
                t.limit = limit;
                t.done_seq = done;
                t.purged = purged;
                t.updated_on = now;
            }
            _ => {
                *task = Some(Task {
                    database: database.to_string(),
                    start_seq: start,
                    limit,
                    done_seq: done,
                    purged,
                    started_on: now,
                    updated_on: now,
                });
            }
        }
    }
}

/// A batch due: the documents after `cursor`, up to `limit`, whose every
/// leaf is deleted (at most `max`, each with its sequence and leaves), and
/// the highest sequence examined (every change up to it was looked at).
type Due = (Vec<(u64, String, Vec<Rev>)>, u64);

fn due(db: &Database, cursor: u64, limit: u64, max: usize) -> settee_db::Result<Due> {
    let reader = db.reader()?;
    let mut batch = Vec::new();
    let mut examined = cursor;
    let mut rows = 0usize;
    let mut reached_limit = true;
    reader.changes(cursor, false, u64::MAX, &mut |row| {
        if row.seq > limit {
            return false;
        }
        rows += 1;
        if row.leaves.iter().all(|(_, deleted)| *deleted) {
            let revs = row.leaves.into_iter().map(|(r, _)| r).collect();
            batch.push((row.seq, row.id, revs));
        }
        examined = row.seq;
        if batch.len() >= max || rows >= SCAN_ROWS_MAX {
            reached_limit = false;
            return false;
        }
        true
    })?;
    // Every change up to `limit` was seen: nothing between the last one
    // and the limit is left to look at.
    if reached_limit {
        examined = limit;
    }
    Ok((batch, examined))
}
