//! The replication jobs of one server and the slots they run in, as
//! CouchDB's scheduling replicator: `POST /_replicate` runs one-shot jobs
//! (answering when they end) and starts continuous ones (answering at once
//! with the job id); `_replicator` documents run as jobs too; `cancel`
//! stops one; `_scheduler/jobs` and `_active_tasks` list them.
//!
//! - At most `max_jobs` jobs run at once ([`JOBS_MAX`] unless set from
//!   `[replicator] max_jobs`); the others wait `pending`, first come first
//!   served, and take a slot as soon as one is free.
//! - Every `interval` ([`INTERVAL`]) the scheduler rotates: while jobs
//!   wait, it stops up to `max_churn` ([`CHURN_MAX`]) of the continuous
//!   jobs that have run longest (each writes its checkpoint and queues
//!   again), so every job makes progress; jobs above a lowered `max_jobs`
//!   are stopped the same way. One-shot jobs run to their end.
//! - A continuous job that fails is retried with exponential backoff
//!   ([`BACKOFF_FIRST`] doubling to [`BACKOFF_MAX`]) from its last
//!   checkpoint, holding no slot meanwhile, until it is cancelled.
//!
//! Invariants: the slots taken (`running`) are exactly the registered jobs
//! whose run holds one (a job's [`Registration`] gives its slot back
//! however its future ends, dropped included); at most
//! [`REGISTERED_MAX`] jobs are known at once — a further `_replicate` is
//! refused — so nothing is queued without bound; a job id names at most
//! one job; cancelling stops the job's reader and writer before the
//! answer (its last checkpoint is written on the way out).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::{oneshot, watch};

use crate::job::{self, unix_now, Outcome, Prepared, Status};
use crate::spec::Spec;
use crate::RepError;

/// Jobs running at once on one server, by default (CouchDB's `max_jobs`).
pub const JOBS_MAX: usize = 500;
/// Jobs stopped per rotation, by default (CouchDB's `max_churn`).
pub const CHURN_MAX: usize = 20;
/// Time between rotations, by default (CouchDB's `interval`).
pub const INTERVAL: Duration = Duration::from_secs(60);
/// Jobs known at once, running or not.
pub const REGISTERED_MAX: usize = 100_000;
/// Events kept per job (CouchDB's `max_history`).
pub const HISTORY_MAX: usize = 20;
pub const BACKOFF_FIRST: Duration = Duration::from_secs(5);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobState {
    Pending,
    Running,
    Crashing,
}

#[derive(Debug)]
struct Entry {
    /// The replication document (database, id) that runs the job, if one does.
    doc_id: Option<(String, String)>,
    spec: Spec,
    user: Option<String>,
    state: JobState,
    /// When the job's current run started, if one runs.
    started_at: Option<Instant>,
    /// Events, newest first (≤ [`HISTORY_MAX`]).
    history: VecDeque<Value>,
    status: Arc<Mutex<Status>>,
    /// Stops a `_replicate` job for good (cancel); a document's job is
    /// stopped through its document.
    stop: Option<watch::Sender<bool>>,
    /// Stops the current run only (rotation); None while not running.
    run_stop: Option<watch::Sender<bool>>,
    /// The current run was stopped by rotation: the job queues again.
    preempted: bool,
    done: watch::Receiver<bool>,
}

impl Entry {
    fn event(&mut self, kind: &str, reason: Option<&str>) {
        let mut e = json!({"timestamp": iso_now(), "type": kind});
        if let Some(r) = reason {
            e["reason"] = json!(r);
        }
        self.history.push_front(e);
        self.history.truncate(HISTORY_MAX);
    }
}

/// Told of a document job's state changes: (state, replication id,
/// error).
pub type StateReport<'a> = dyn Fn(&str, Option<&str>, Option<&str>) + Send + Sync + 'a;

#[derive(Debug, Default)]
struct Inner {
    jobs: BTreeMap<String, Entry>,
    /// Slots taken.
    running: usize,
    /// Jobs waiting for a slot, first come first served; a grant is a
    /// send on the waiter's channel (a waiter gone is skipped).
    queue: VecDeque<(String, oneshot::Sender<()>)>,
    /// The server is stopping: no run starts.
    stopping: bool,
}

/// The server's replication jobs.
#[derive(Debug)]
pub struct Scheduler {
    server_uuid: String,
    node: String,
    inner: Mutex<Inner>,
    max_jobs: AtomicUsize,
    max_churn: AtomicUsize,
    interval_ms: AtomicU64,
}

/// A registered job; dropping it forgets the job (and frees its slot if
/// it holds one), however the job's future ends.
struct Registration {
    sched: Arc<Scheduler>,
    key: String,
    holds_slot: bool,
    done: watch::Sender<bool>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        {
            let mut inner = self.sched.inner.lock();
            inner.jobs.remove(&self.key);
            if self.holds_slot {
                inner.running = inner.running.saturating_sub(1);
                self.sched.grant(&mut inner);
            }
        }
        let _ = self.done.send(true);
    }
}

/// Why a job could not be registered.
enum Refused {
    /// The same replication is already a job.
    Duplicate,
    /// [`REGISTERED_MAX`] jobs are known.
    Full,
}

fn stopped() -> RepError {
    RepError::Failed("stopped".into())
}

/// Now as CouchDB's scheduler writes times (`2026-11-25T07:20:36Z`).
pub fn iso_now() -> String {
    let secs = unix_now();
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

impl Scheduler {
    pub fn new(server_uuid: String, node: String) -> Scheduler {
        Scheduler {
            server_uuid,
            node,
            inner: Mutex::new(Inner::default()),
            max_jobs: AtomicUsize::new(JOBS_MAX),
            max_churn: AtomicUsize::new(CHURN_MAX),
            interval_ms: AtomicU64::new(INTERVAL.as_millis() as u64),
        }
    }

    /// Sets how many jobs may run at once (`[replicator] max_jobs`); a
    /// raised limit starts waiting jobs at once, a lowered one stops the
    /// excess at the next rotation.
    pub fn set_max_jobs(&self, n: usize) {
        self.max_jobs.store(n.max(1), Ordering::Relaxed);
        self.grant(&mut self.inner.lock());
    }

    /// Sets how many jobs one rotation stops (`[replicator] max_churn`).
    pub fn set_max_churn(&self, n: usize) {
        self.max_churn.store(n, Ordering::Relaxed);
    }

    /// Sets the time between rotations (`[replicator] interval`, in
    /// milliseconds); read before each wait.
    pub fn set_interval(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
        self.interval_ms.store(ms, Ordering::Relaxed);
    }

    fn max_jobs(&self) -> usize {
        self.max_jobs.load(Ordering::Relaxed)
    }

    /// Starts the rotation task; it ends when the scheduler is dropped.
    pub fn spawn_rescheduler(self: &Arc<Self>) {
        let weak: Weak<Scheduler> = Arc::downgrade(self);
        tokio::spawn(async move {
            // Looks at least every second, so a changed interval applies
            // without waiting out the old one.
            let mut last = Instant::now();
            loop {
                let interval = match weak.upgrade() {
                    Some(s) => Duration::from_millis(s.interval_ms.load(Ordering::Relaxed)),
                    None => return,
                };
                let due = interval.saturating_sub(last.elapsed());
                tokio::time::sleep(due.min(Duration::from_secs(1))).await;
                if last.elapsed() < interval {
                    continue;
                }
                match weak.upgrade() {
                    Some(s) => s.reschedule(),
                    None => return,
                }
                last = Instant::now();
            }
        });
    }

    /// Gives free slots to waiting jobs, in order.
    fn grant(&self, inner: &mut Inner) {
        let max = self.max_jobs();
        while inner.running < max && !inner.stopping {
            let Some((_, tx)) = inner.queue.pop_front() else {
                break;
            };
            if tx.send(()).is_ok() {
                inner.running += 1;
            }
        }
    }

    /// One rotation: stops the jobs above `max_jobs`, then, while jobs
    /// wait, up to `max_churn` more — continuous ones, longest running
    /// first. Each stopped job checkpoints and queues again; the slots it
    /// frees go to the jobs that waited longest.
    pub fn reschedule(&self) {
        let mut inner = self.inner.lock();
        if inner.stopping {
            return;
        }
        inner.queue.retain(|(_, tx)| !tx.is_closed());
        self.grant(&mut inner);
        let excess = inner.running.saturating_sub(self.max_jobs());
        let churn = self
            .max_churn
            .load(Ordering::Relaxed)
            .min(inner.queue.len());
        let mut candidates: Vec<(Instant, String)> = inner
            .jobs
            .iter()
            .filter(|(_, e)| {
                e.state == JobState::Running
                    && e.spec.continuous
                    && e.run_stop.is_some()
                    && !e.preempted
            })
            .filter_map(|(k, e)| Some((e.started_at?, k.clone())))
            .collect();
        candidates.sort();
        for (_, key) in candidates.into_iter().take(excess + churn) {
            if let Some(e) = inner.jobs.get_mut(&key) {
                e.preempted = true;
                if let Some(tx) = &e.run_stop {
                    let _ = tx.send(true);
                }
            }
        }
    }

    /// Registers job `key` (pending until it takes a slot).
    fn register(
        self: &Arc<Self>,
        key: &str,
        doc_id: Option<(String, String)>,
        spec: &Spec,
        user: Option<String>,
        status: &Arc<Mutex<Status>>,
        stop: Option<watch::Sender<bool>>,
    ) -> Result<Registration, Refused> {
        let (done_tx, done_rx) = watch::channel(false);
        let mut inner = self.inner.lock();
        if inner.jobs.contains_key(key) {
            return Err(Refused::Duplicate);
        }
        if inner.jobs.len() >= REGISTERED_MAX {
            return Err(Refused::Full);
        }
        let mut entry = Entry {
            doc_id,
            spec: spec.clone(),
            user,
            state: JobState::Pending,
            started_at: None,
            history: VecDeque::new(),
            status: Arc::clone(status),
            stop,
            run_stop: None,
            preempted: false,
            done: done_rx,
        };
        entry.event("added", None);
        inner.jobs.insert(key.to_string(), entry);
        Ok(Registration {
            sched: Arc::clone(self),
            key: key.to_string(),
            holds_slot: false,
            done: done_tx,
        })
    }

    /// `POST /_replicate` with a checked spec: cancels, starts a continuous
    /// job, or runs a one-shot job to its end (waiting for a slot first).
    pub async fn replicate(
        self: &Arc<Self>,
        spec: Spec,
        user: Option<String>,
    ) -> Result<Value, RepError> {
        if spec.cancel {
            return self.cancel(&spec).await;
        }
        let client = job::client_for(&spec)?;
        let prepared = job::prepare(&spec, &client, &self.server_uuid).await?;
        let id = prepared.full_id.clone();
        let (stop_tx, stop_rx) = watch::channel(false);
        let status = Arc::new(Mutex::new(Status::default()));
        let mut reg = match self.register(&id, None, &spec, user, &status, Some(stop_tx)) {
            Ok(reg) => reg,
            Err(Refused::Duplicate) if spec.continuous => {
                return Ok(json!({"ok": true, "_local_id": id}));
            }
            Err(Refused::Duplicate) => {
                return Err(RepError::Failed(format!(
                    "replication {id} is already running"
                )));
            }
            Err(Refused::Full) => {
                return Err(RepError::Failed(format!(
                    "too many replications ({REGISTERED_MAX})"
                )));
            }
        };
        if !spec.continuous {
            return reg
                .drive(&spec, Some(prepared), stop_rx, &status, &|_, _, _| {})
                .await;
        }
        tokio::spawn(async move {
            let _ = reg
                .drive(&spec, Some(prepared), stop_rx, &status, &|_, _, _| {})
                .await;
        });
        Ok(json!({"ok": true, "_local_id": id}))
    }

    /// Runs the job of a `_replicator` document until it ends (one-shot)
    /// or `stop` turns true; `report(state, replication id, error)` is told
    /// of every change of state (`pending`, `running`, `crashing`).
    /// Failures to start or of a continuous job are retried with backoff;
    /// an invalid definition or a failed one-shot run is the result.
    pub async fn run_doc_job(
        self: &Arc<Self>,
        spec: Spec,
        user: Option<String>,
        doc_id: (String, String),
        mut stop: watch::Receiver<bool>,
        report: &StateReport<'_>,
    ) -> Result<Value, RepError> {
        let mut backoff = BACKOFF_FIRST;
        let status = Arc::new(Mutex::new(Status::default()));
        let (mut reg, prepared) = loop {
            if *stop.borrow() {
                return Err(stopped());
            }
            let attempt = async {
                let client = job::client_for(&spec)?;
                job::prepare(&spec, &client, &self.server_uuid).await
            }
            .await;
            let (id, reason) = match attempt {
                Ok(p) => {
                    match self.register(
                        &p.full_id,
                        Some(doc_id.clone()),
                        &spec,
                        user.clone(),
                        &status,
                        None,
                    ) {
                        Ok(reg) => break (reg, p),
                        Err(Refused::Duplicate) => (
                            Some(p.full_id),
                            "the same replication is already running".to_string(),
                        ),
                        Err(Refused::Full) => (Some(p.full_id), "too many replications".into()),
                    }
                }
                Err(
                    e @ (RepError::BadRequest(_)
                    | RepError::InvalidReplication(_)
                    | RepError::LocalEndpoint),
                ) => return Err(e),
                Err(e) => (None, e.to_string()),
            };
            report("crashing", id.as_deref(), Some(&reason));
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.changed() => {}
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        };
        reg.drive(&spec, Some(prepared), stop, &status, report)
            .await
    }

    fn with_entry(&self, key: &str, f: impl FnOnce(&mut Entry)) {
        if let Some(e) = self.inner.lock().jobs.get_mut(key) {
            f(e);
        }
    }

    /// Stops the job named by `replication_id` or by the same definition.
    async fn cancel(&self, spec: &Spec) -> Result<Value, RepError> {
        let id = match &spec.replication_id {
            Some(id) => id.replace(' ', "+"),
            None => {
                let client = job::client_for(spec)?;
                job::ids(spec, &client, &self.server_uuid).await?.1
            }
        };
        let found = {
            let inner = self.inner.lock();
            // A `_replicator` document's job stops with its document.
            inner
                .jobs
                .iter()
                .filter(|(_, e)| e.doc_id.is_none())
                .find(|(k, _)| **k == id || k.split('+').next() == Some(id.as_str()))
                .and_then(|(k, e)| Some((k.clone(), e.stop.clone()?, e.done.clone())))
        };
        let Some((key, stop, mut done)) = found else {
            return Err(RepError::NotFound("missing".into()));
        };
        let _ = stop.send(true);
        // Wait (bounded) for the job to write its last checkpoint.
        let _ = tokio::time::timeout(Duration::from_secs(30), done.wait_for(|d| *d)).await;
        Ok(json!({"ok": true, "_local_id": key}))
    }

    /// `GET /_scheduler/jobs`: the jobs, running or waiting.
    pub fn jobs_json(&self) -> Value {
        let inner = self.inner.lock();
        let list: Vec<Value> = inner
            .jobs
            .iter()
            .map(|(id, e)| {
                // When the job was added (its oldest event), as CouchDB.
                let start = e.history.back().map(|h| h["timestamp"].clone());
                json!({
                    "database": e.doc_id.as_ref().map(|(db, _)| db),
                    "doc_id": e.doc_id.as_ref().map(|(_, id)| id),
                    "id": id,
                    "pid": null,
                    "source": e.spec.source.display(),
                    "target": e.spec.target.display(),
                    "user": e.user,
                    "info": null,
                    "history": e.history,
                    "node": self.node,
                    "start_time": start,
                })
            })
            .collect();
        json!({"total_rows": list.len(), "offset": 0, "jobs": list})
    }

    /// Every job's source URL and the source sequence it has checkpointed
    /// (0 before its first checkpoint): how far each has certainly read its
    /// source, whatever its state (a pending or crashing job resumes from
    /// its checkpoint).
    pub fn source_checkpoints(&self) -> Vec<(url::Url, Value)> {
        let inner = self.inner.lock();
        inner
            .jobs
            .values()
            .map(|e| {
                (
                    e.spec.source.url.clone(),
                    e.status.lock().checkpointed_seq.clone(),
                )
            })
            .collect()
    }

    /// The `_active_tasks` entries of the running jobs.
    pub fn active_tasks(&self) -> Vec<Value> {
        let inner = self.inner.lock();
        inner
            .jobs
            .iter()
            .filter(|(_, e)| e.state == JobState::Running)
            .map(|(id, e)| {
                let st = e.status.lock();
                json!({
                    "node": self.node,
                    "pid": null,
                    "process_status": "running",
                    "type": "replication",
                    "replication_id": id,
                    "source": e.spec.source.display(),
                    "target": e.spec.target.display(),
                    "continuous": e.spec.continuous,
                    "user": e.user,
                    "database": e.doc_id.as_ref().map(|(db, _)| db),
                    "doc_id": e.doc_id.as_ref().map(|(_, id)| id),
                    "docs_read": st.stats.docs_read,
                    "docs_written": st.stats.docs_written,
                    "doc_write_failures": st.stats.doc_write_failures,
                    "missing_revisions_found": st.stats.missing_found,
                    "revisions_checked": st.stats.missing_checked,
                    "bulk_get_attempts": st.stats.bulk_get_attempts,
                    "bulk_get_docs": st.stats.bulk_get_docs,
                    "checkpoint_interval": e.spec.checkpoint_interval.as_millis() as u64,
                    "checkpointed_source_seq": st.checkpointed_seq,
                    "source_seq": st.source_seq,
                    "started_on": st.started_on,
                    "updated_on": st.updated_on,
                })
            })
            .collect()
    }

    /// Stops every job (server shutdown); each writes its last checkpoint.
    pub async fn stop_all(&self) {
        let waits: Vec<_> = {
            let mut inner = self.inner.lock();
            inner.stopping = true;
            // Waiting jobs see their grant channel close.
            inner.queue.clear();
            inner
                .jobs
                .values()
                .map(|e| {
                    for tx in e.stop.iter().chain(e.run_stop.iter()) {
                        let _ = tx.send(true);
                    }
                    e.done.clone()
                })
                .collect()
        };
        let all = futures_util::future::join_all(waits.into_iter().map(|mut d| async move {
            let _ = d.wait_for(|x| *x).await;
        }));
        let _ = tokio::time::timeout(Duration::from_secs(5), all).await;
    }
}

impl Registration {
    /// Runs the job: waits for a slot, runs, and goes on as its kind
    /// wants — a one-shot job ends with its run, a continuous one queues
    /// again when rotated out and retries with backoff when it fails.
    async fn drive(
        &mut self,
        spec: &Spec,
        mut prepared: Option<Prepared>,
        mut stop: watch::Receiver<bool>,
        status: &Arc<Mutex<Status>>,
        report: &StateReport<'_>,
    ) -> Result<Outcome, RepError> {
        let sched = Arc::clone(&self.sched);
        let mut backoff = BACKOFF_FIRST;
        loop {
            if *stop.borrow() {
                return Err(stopped());
            }
            // A run that failed prepares again (the target may be gone and
            // be created again, credentials may have changed).
            let p = match prepared.take() {
                Some(p) => p,
                None => {
                    let attempt = async {
                        let client = job::client_for(spec)?;
                        job::prepare(spec, &client, &sched.server_uuid).await
                    }
                    .await;
                    match attempt {
                        Ok(p) => p,
                        Err(e) => {
                            if !self.back_off(&mut stop, &mut backoff, &e, report).await {
                                return Err(stopped());
                            }
                            continue;
                        }
                    }
                }
            };
            if !self.acquire(&mut stop, report).await {
                return Err(stopped());
            }
            let (run_tx, run_rx) = watch::channel(false);
            sched.with_entry(&self.key, |e| {
                e.state = JobState::Running;
                e.started_at = Some(Instant::now());
                e.run_stop = Some(run_tx.clone());
                e.event("started", None);
            });
            report("running", Some(&self.key), None);
            let out = run_once(spec, &p, &mut stop, run_rx, &run_tx, status).await;
            let preempted = self.release();
            if *stop.borrow() || sched.inner.lock().stopping {
                return out;
            }
            match out {
                Ok(_) if preempted => {
                    sched.with_entry(&self.key, |e| e.event("stopped", None));
                    prepared = Some(p);
                }
                Err(e) if spec.continuous => {
                    if !self.back_off(&mut stop, &mut backoff, &e, report).await {
                        return Err(stopped());
                    }
                }
                other => return other,
            }
        }
    }

    /// Waits for a slot (reporting `pending` when it must); false when the
    /// job was stopped meanwhile.
    async fn acquire(
        &mut self,
        stop: &mut watch::Receiver<bool>,
        report: &StateReport<'_>,
    ) -> bool {
        let sched = Arc::clone(&self.sched);
        let mut rx = {
            let mut inner = sched.inner.lock();
            if inner.stopping {
                return false;
            }
            if inner.queue.is_empty() && inner.running < sched.max_jobs() {
                inner.running += 1;
                self.holds_slot = true;
                return true;
            }
            let (tx, rx) = oneshot::channel();
            inner.queue.push_back((self.key.clone(), tx));
            if let Some(e) = inner.jobs.get_mut(&self.key) {
                e.state = JobState::Pending;
            }
            rx
        };
        report("pending", Some(&self.key), None);
        loop {
            tokio::select! {
                granted = &mut rx => {
                    self.holds_slot = granted.is_ok();
                    return granted.is_ok();
                }
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        // A grant sent before the close is ours to give back.
                        rx.close();
                        self.holds_slot = rx.try_recv().is_ok();
                        return false;
                    }
                }
            }
        }
    }

    /// Gives the slot back; whether the run was stopped by rotation.
    fn release(&mut self) -> bool {
        let mut inner = self.sched.inner.lock();
        if self.holds_slot {
            inner.running = inner.running.saturating_sub(1);
            self.holds_slot = false;
        }
        let preempted = match inner.jobs.get_mut(&self.key) {
            Some(e) => {
                e.state = JobState::Pending;
                e.started_at = None;
                e.run_stop = None;
                std::mem::take(&mut e.preempted)
            }
            None => false,
        };
        self.sched.grant(&mut inner);
        preempted
    }

    /// A failure: `crashing` for the backoff time (no slot held); false
    /// when the job was stopped meanwhile.
    async fn back_off(
        &mut self,
        stop: &mut watch::Receiver<bool>,
        backoff: &mut Duration,
        e: &RepError,
        report: &StateReport<'_>,
    ) -> bool {
        let reason = e.to_string();
        tracing::warn!(job = %self.key, error = %reason, "replication crashed; retrying");
        self.sched.with_entry(&self.key, |entry| {
            entry.state = JobState::Crashing;
            entry.event("crashed", Some(&reason));
        });
        report("crashing", Some(&self.key), Some(&reason));
        tokio::select! {
            _ = tokio::time::sleep(*backoff) => {}
            _ = stop.changed() => {}
        }
        *backoff = (*backoff * 2).min(BACKOFF_MAX);
        !*stop.borrow()
    }
}

/// One run of a job, stopped by `stop` (the job's) or by `run_tx` (this
/// run's; rotation), whichever comes first.
async fn run_once(
    spec: &Spec,
    p: &Prepared,
    stop: &mut watch::Receiver<bool>,
    run_rx: watch::Receiver<bool>,
    run_tx: &watch::Sender<bool>,
    status: &Mutex<Status>,
) -> Result<Outcome, RepError> {
    let run = job::run(spec, p, run_rx, status);
    tokio::pin!(run);
    let mut listening = true;
    loop {
        tokio::select! {
            out = &mut run => return out,
            changed = stop.changed(), if listening => {
                if changed.is_err() || *stop.borrow() {
                    let _ = run_tx.send(true);
                    listening = false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso_dates() {
        let s = super::iso_now();
        assert_eq!(s.len(), 20);
        assert!(s.starts_with("20") && s.ends_with('Z'));
    }
}
