//! Internal replication: a shard copy brought up to date from another
//! copy of the same shard, with the replicator's core (settee-replicator:
//! changes since the checkpoint, the revisions the target lacks, written
//! with `new_edits=false`, checkpoints on both copies), then the source's
//! `_security` written to the target when it differs.
//!
//! When it runs: a write a copy missed (it failed, or its node was down)
//! schedules the shard at once; a read that found copies disagreeing
//! schedules it (read repair); a member that (re)joins has every shard it
//! shares with this node pushed to it; `_sync_shards` schedules a whole
//! database; and a sweep every [`crate::NodeConfig::sync_interval`]
//! pushes each of this node's copies to the other live copies, so nothing
//! depends on a trigger having been seen.
//!
//! Invariants: a job is queued once however often it is asked for until
//! it starts (the queue is bounded, [`QUEUE_MAX`]; a full queue drops the
//! job, which the next sweep queues again); at most [`WORKERS`] jobs run
//! at once, each bounded by [`JOB_TIMEOUT`]; a job whose either node is
//! not live is skipped.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::mpsc;

use crate::coordinator::Coordinator;
use crate::fabric::{SECRET_HEADER, USER_HEADER};
use crate::layout::{Range, ShardMap};

/// Most jobs waiting.
pub const QUEUE_MAX: usize = 4096;
/// Most jobs running at once.
pub const WORKERS: usize = 2;
/// The longest one job may run.
pub const JOB_TIMEOUT: Duration = Duration::from_secs(600);

/// Bring copy `shard` on node `to` up to date from the copy on `from`.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Job {
    pub shard: String,
    pub from: String,
    pub to: String,
}

/// The queue of internal replication jobs.
#[derive(Debug)]
pub struct SyncQueue {
    tx: mpsc::Sender<Job>,
    pending: Mutex<HashSet<Job>>,
    done: std::sync::atomic::AtomicU64,
}

impl SyncQueue {
    /// A queue and the receiver its worker reads.
    pub fn new() -> (SyncQueue, mpsc::Receiver<Job>) {
        let (tx, rx) = mpsc::channel(QUEUE_MAX);
        (
            SyncQueue {
                tx,
                pending: Mutex::new(HashSet::new()),
                done: std::sync::atomic::AtomicU64::new(0),
            },
            rx,
        )
    }

    /// Queues a job unless it is already waiting.
    pub fn schedule(&self, job: Job) {
        if job.from == job.to || !self.pending.lock().insert(job.clone()) {
            return;
        }
        if self.tx.try_send(job.clone()).is_err() {
            self.pending.lock().remove(&job);
            tracing::warn!(
                ?job,
                "internal replication queue full; the next sweep retries"
            );
        }
    }

    /// Queues every ordered pair of live copies of `range`.
    pub fn schedule_range(&self, c: &Coordinator, map: &ShardMap, range: Range) {
        let shard = map.shard_name(range);
        let copies = c.live_copies(map, range);
        for a in &copies {
            for b in &copies {
                self.schedule(Job {
                    shard: shard.clone(),
                    from: a.name.clone(),
                    to: b.name.clone(),
                });
            }
        }
    }

    /// How many jobs have finished (successfully or not).
    pub fn finished(&self) -> u64 {
        self.done.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many jobs wait or run.
    pub fn pending(&self) -> usize {
        self.pending.lock().len()
    }
}

/// Runs queued jobs, [`WORKERS`] at a time, until the queue closes or
/// `stop` turns true.
pub async fn worker(
    c: Arc<Coordinator>,
    mut rx: mpsc::Receiver<Job>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(WORKERS));
    loop {
        let job = tokio::select! {
            j = rx.recv() => match j { Some(j) => j, None => return },
            _ = stop.changed() => return,
        };
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        let c = Arc::clone(&c);
        tokio::spawn(async move {
            // Taken off the pending set as it starts: a write arriving
            // meanwhile queues it again.
            c.sync().pending.lock().remove(&job);
            match tokio::time::timeout(JOB_TIMEOUT, run(&c, &job)).await {
                Ok(Ok(())) => tracing::debug!(?job, "shard copy synchronised"),
                Ok(Err(e)) => tracing::warn!(?job, error = %e, "internal replication failed"),
                Err(_) => tracing::warn!(?job, "internal replication timed out"),
            }
            c.sync()
                .done
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            drop(permit);
        });
    }
}

/// Pushes each of this node's copies to the other live copies of its
/// shard every `interval`, until `stop` turns true.
pub async fn sweeper(
    c: Arc<Coordinator>,
    interval: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if tokio::time::timeout(interval, stop.changed()).await.is_ok() {
            return;
        }
        for db in c.view().dbs() {
            if let Some(map) = c.view().map(&db) {
                push_shared(&c, &map, None);
                crate::mover::spawn_drain(&c, (*map).clone());
            }
        }
    }
}

/// Queues a push of every copy this node holds of `map` to the other live
/// copies (only to `only` when given: a member that just joined).
pub fn push_shared(c: &Coordinator, map: &ShardMap, only: Option<&str>) {
    let me = c.node_name().to_string();
    for &range in map.ranges_of(&me) {
        for peer in c.live_copies(map, range) {
            if peer.name != me && only.is_none_or(|o| o == peer.name) {
                c.sync().schedule(Job {
                    shard: map.shard_name(range),
                    from: me.clone(),
                    to: peer.name,
                });
            }
        }
    }
}

/// One job: replicate, then carry `_security` over.
pub(crate) async fn run(c: &Coordinator, job: &Job) -> Result<(), String> {
    run_tracked(c, job, &parking_lot::Mutex::new(Default::default()), None).await
}

/// [`run`], its progress kept in `status` (a move's fill shows it), its
/// bandwidth held to `limit` when given.
pub(crate) async fn run_tracked(
    c: &Coordinator,
    job: &Job,
    status: &parking_lot::Mutex<settee_replicator::Status>,
    limit: Option<settee_replicator::job::Limit<'_>>,
) -> Result<(), String> {
    let (Some(from), Some(to)) = (c.view().member(&job.from), c.view().member(&job.to)) else {
        return Ok(());
    };
    let user = serde_json::to_string(&crate::fabric::User::internal()).unwrap_or_default();
    let headers = json!({SECRET_HEADER: c.secret(), USER_HEADER: user});
    let src = crate::fabric::call::shard_url(&from.advertise, &job.shard);
    let dst = crate::fabric::call::shard_url(&to.advertise, &job.shard);
    let body = json!({
        "source": {"url": src, "headers": headers},
        "target": {"url": dst, "headers": headers},
    });
    let spec = settee_replicator::Spec::parse(&body, None).map_err(|e| e.to_string())?;
    let client = settee_replicator::job::client_for(&spec).map_err(|e| e.to_string())?;
    let prepared = settee_replicator::job::prepare(&spec, &client, c.node_name())
        .await
        .map_err(|e| e.to_string())?;
    let (_keep, stop) = tokio::sync::watch::channel(false);
    settee_replicator::job::run_limited(&spec, &prepared, stop, status, limit)
        .await
        .map_err(|e| e.to_string())?;
    copy_security(c, job, &from, &to).await
}

/// Writes the source copy's `_security` to the target copy if it differs.
async fn copy_security(
    c: &Coordinator,
    job: &Job,
    from: &crate::NodeInfo,
    to: &crate::NodeInfo,
) -> Result<(), String> {
    use crate::fabric::call::Call;
    let admin = crate::fabric::User::internal();
    let get = Call::get(&["_security"]);
    let (Some(a), Some(b)) = (
        c.call_copy(from, &job.shard, &get, &admin).await,
        c.call_copy(to, &job.shard, &get, &admin).await,
    ) else {
        return Err("a copy did not answer for _security".into());
    };
    if !a.ok() || !b.ok() || a.json() == b.json() {
        return Ok(());
    }
    let put = Call::json(http::Method::PUT, &["_security"], Vec::new(), &a.json());
    match c.call_copy(to, &job.shard, &put, &admin).await {
        Some(r) if r.ok() => Ok(()),
        _ => Err("the target copy refused _security".into()),
    }
}
