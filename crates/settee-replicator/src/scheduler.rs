//! The replication jobs of one server: `POST /_replicate` runs one-shot
//! jobs (answering when they end) and starts continuous ones (answering at
//! once with the job id); `cancel` stops one; `_scheduler/jobs` and
//! `_active_tasks` list them.
//!
//! A continuous job that fails is retried with exponential backoff
//! ([`BACKOFF_FIRST`] doubling to [`BACKOFF_MAX`]) from its last
//! checkpoint until it is cancelled, as CouchDB's scheduler retries
//! crashing jobs.
//!
//! Invariants: at most `max_jobs` jobs run at once ([`JOBS_MAX`] unless
//! set from `[replicator] max_jobs`): a further `_replicate` is refused, a
//! further `_replicator` document waits (`pending`, looked at again every
//! second) — nothing is queued without bound; a job id names at most one
//! running job; cancelling stops the job's reader and writer before the
//! answer (its last checkpoint is written on the way out).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::job::{self, unix_now, Status};
use crate::spec::Spec;
use crate::RepError;

/// Jobs running at once on one server, by default (CouchDB's `max_jobs`).
pub const JOBS_MAX: usize = 500;
/// How often a pending `_replicator` document looks for a free slot.
pub const PENDING_POLL: Duration = Duration::from_secs(1);
pub const BACKOFF_FIRST: Duration = Duration::from_secs(5);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

#[derive(Debug)]
struct Entry {
    /// The replication document (database, id) that runs the job, if one does.
    doc_id: Option<(String, String)>,
    spec: Spec,
    continuous: bool,
    user: Option<String>,
    started: String,
    status: Arc<Mutex<Status>>,
    stop: tokio::sync::watch::Sender<bool>,
    done: tokio::sync::watch::Receiver<bool>,
}

/// Told of a document job's state changes: (state, replication id,
/// error).
pub type StateReport<'a> = dyn Fn(&str, Option<&str>, Option<&str>) + Send + Sync + 'a;

/// Removes a job's entry when dropped.
struct Remove<'a>(&'a Scheduler, String);

impl Drop for Remove<'_> {
    fn drop(&mut self) {
        self.0.jobs.lock().remove(&self.1);
    }
}

/// The server's running replications.
#[derive(Debug)]
pub struct Scheduler {
    server_uuid: String,
    node: String,
    jobs: Mutex<BTreeMap<String, Entry>>,
    max_jobs: std::sync::atomic::AtomicUsize,
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
            jobs: Mutex::new(BTreeMap::new()),
            max_jobs: std::sync::atomic::AtomicUsize::new(JOBS_MAX),
        }
    }

    /// Sets how many jobs may run at once (`[replicator] max_jobs`).
    pub fn set_max_jobs(&self, n: usize) {
        self.max_jobs
            .store(n.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    fn max_jobs(&self) -> usize {
        self.max_jobs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `POST /_replicate` with a checked spec: cancels, starts a continuous
    /// job, or runs a one-shot job to its end.
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
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (done_tx, done_rx) = tokio::sync::watch::channel(false);
        let status = Arc::new(Mutex::new(Status::default()));
        {
            let mut jobs = self.jobs.lock();
            if jobs.contains_key(&id) {
                if spec.continuous {
                    return Ok(json!({"ok": true, "_local_id": id}));
                }
                return Err(RepError::Failed(format!(
                    "replication {id} is already running"
                )));
            }
            let max = self.max_jobs();
            if jobs.len() >= max {
                return Err(RepError::Failed(format!(
                    "too many replications running ({max}, [replicator] max_jobs)"
                )));
            }
            jobs.insert(
                id.clone(),
                Entry {
                    doc_id: None,
                    spec: spec.clone(),
                    continuous: spec.continuous,
                    user,
                    started: iso_now(),
                    status: status.clone(),
                    stop: stop_tx,
                    done: done_rx,
                },
            );
        }
        if !spec.continuous {
            // Removed however the run ends (also when the client goes away
            // and this future is dropped).
            let _entry = Remove(self, id.clone());
            let result = job::run(&spec, &prepared, stop_rx, &status).await;
            let _ = done_tx.send(true);
            return result;
        }
        let me = Arc::clone(self);
        let job_id = id.clone();
        tokio::spawn(async move {
            let mut backoff = BACKOFF_FIRST;
            let mut stop = stop_rx;
            loop {
                match job::run(&spec, &prepared, stop.clone(), &status).await {
                    Ok(_) => break,
                    Err(e) => {
                        tracing::warn!(job = %job_id, error = %e, "replication crashed; retrying");
                        {
                            let mut st = status.lock();
                            st.state = "crashing";
                            st.error = Some(e.to_string());
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = stop.changed() => break,
                        }
                        if *stop.borrow() {
                            break;
                        }
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                    }
                }
            }
            me.jobs.lock().remove(&job_id);
            let _ = done_tx.send(true);
        });
        Ok(json!({"ok": true, "_local_id": id}))
    }

    /// Runs the job of a `_replicator` document until it ends (one-shot)
    /// or `stop` turns true; `report(state, replication id, error)` is told
    /// of every change of state. Failures to start or of a continuous job
    /// are retried with backoff (state `crashing`); an invalid definition
    /// or a failed one-shot run is the result.
    pub async fn run_doc_job(
        &self,
        spec: Spec,
        user: Option<String>,
        doc_id: (String, String),
        mut stop: tokio::sync::watch::Receiver<bool>,
        report: &StateReport<'_>,
    ) -> Result<Value, RepError> {
        let mut backoff = BACKOFF_FIRST;
        let mut registered: Option<String> = None;
        let status = Arc::new(Mutex::new(Status::default()));
        let (done_tx, done_rx) = tokio::sync::watch::channel(false);
        let result = loop {
            if *stop.borrow() {
                break Err(RepError::Failed("stopped".into()));
            }
            let attempt = async {
                let client = job::client_for(&spec)?;
                job::prepare(&spec, &client, &self.server_uuid).await
            }
            .await;
            let err = match attempt {
                Ok(prepared) => {
                    if registered.is_none() {
                        let taken = {
                            let mut jobs = self.jobs.lock();
                            if jobs.contains_key(&prepared.full_id) {
                                Some("crashing")
                            } else if jobs.len() >= self.max_jobs() {
                                Some("pending")
                            } else {
                                // The scheduler's stop signal is the document's.
                                let (own_stop, _) = tokio::sync::watch::channel(false);
                                jobs.insert(
                                    prepared.full_id.clone(),
                                    Entry {
                                        doc_id: Some(doc_id.clone()),
                                        spec: spec.clone(),
                                        continuous: spec.continuous,
                                        user: user.clone(),
                                        started: iso_now(),
                                        status: status.clone(),
                                        stop: own_stop,
                                        done: done_rx.clone(),
                                    },
                                );
                                None
                            }
                        };
                        match taken {
                            // Waits for a free slot; not an error.
                            Some("pending") => {
                                report("pending", Some(&prepared.full_id), None);
                                tokio::select! {
                                    _ = tokio::time::sleep(PENDING_POLL) => {}
                                    _ = stop.changed() => {}
                                }
                                continue;
                            }
                            // The same replication already runs (another
                            // document or `_replicate`).
                            Some(_) => {
                                report(
                                    "crashing",
                                    Some(&prepared.full_id),
                                    Some("the same replication is already running"),
                                );
                                tokio::select! {
                                    _ = tokio::time::sleep(backoff) => {}
                                    _ = stop.changed() => {}
                                }
                                backoff = (backoff * 2).min(BACKOFF_MAX);
                                continue;
                            }
                            None => {}
                        }
                        registered = Some(prepared.full_id.clone());
                    }
                    report("running", Some(&prepared.full_id), None);
                    match job::run(&spec, &prepared, stop.clone(), &status).await {
                        Ok(out) => break Ok(out),
                        Err(e) if !spec.continuous => break Err(e),
                        Err(e) => e,
                    }
                }
                Err(e @ (RepError::BadRequest(_) | RepError::LocalEndpoint)) => break Err(e),
                Err(e) => e,
            };
            report("crashing", None, Some(&err.to_string()));
            status.lock().state = "crashing";
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.changed() => {}
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        };
        if let Some(id) = registered {
            self.jobs.lock().remove(&id);
        }
        let _ = done_tx.send(true);
        result
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
            let jobs = self.jobs.lock();
            // A `_replicator` document's job stops with its document.
            jobs.iter()
                .filter(|(_, e)| e.doc_id.is_none())
                .find(|(k, _)| **k == id || k.split('+').next() == Some(id.as_str()))
                .map(|(k, e)| (k.clone(), e.stop.clone(), e.done.clone()))
        };
        let Some((key, stop, mut done)) = found else {
            return Err(RepError::NotFound("missing".into()));
        };
        let _ = stop.send(true);
        // Wait (bounded) for the job to write its last checkpoint.
        let _ = tokio::time::timeout(Duration::from_secs(30), done.wait_for(|d| *d)).await;
        Ok(json!({"ok": true, "_local_id": key}))
    }

    /// `GET /_scheduler/jobs`: the running jobs.
    pub fn jobs_json(&self) -> Value {
        let jobs = self.jobs.lock();
        let list: Vec<Value> = jobs
            .iter()
            .map(|(id, e)| {
                let st = e.status.lock();
                let mut history = vec![json!({"timestamp": e.started, "type": "started"})];
                if let Some(err) = &st.error {
                    history.insert(
                        0,
                        json!({"timestamp": iso_now(), "type": "crashed", "reason": err}),
                    );
                }
                json!({
                    "database": e.doc_id.as_ref().map(|(db, _)| db),
                    "doc_id": e.doc_id.as_ref().map(|(_, id)| id),
                    "id": id,
                    "pid": null,
                    "source": e.spec.source.display(),
                    "target": e.spec.target.display(),
                    "user": e.user,
                    "info": null,
                    "history": history,
                    "node": self.node,
                    "start_time": e.started,
                })
            })
            .collect();
        json!({"total_rows": list.len(), "offset": 0, "jobs": list})
    }

    /// The `_active_tasks` entries of the running jobs.
    pub fn active_tasks(&self) -> Vec<Value> {
        let jobs = self.jobs.lock();
        jobs.iter()
            .map(|(id, e)| {
                let st = e.status.lock();
                json!({
                    "node": self.node,
                    "pid": null,
                    "process_status": if st.state == "crashing" { "waiting" } else { "running" },
                    "type": "replication",
                    "replication_id": id,
                    "source": e.spec.source.display(),
                    "target": e.spec.target.display(),
                    "continuous": e.continuous,
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
            let jobs = self.jobs.lock();
            jobs.values()
                .map(|e| {
                    let _ = e.stop.send(true);
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

#[cfg(test)]
mod tests {
    #[test]
    fn iso_dates() {
        let s = super::iso_now();
        assert_eq!(s.len(), 20);
        assert!(s.starts_with("20") && s.ends_with('Z'));
    }
}
