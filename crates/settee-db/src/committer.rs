//! The second stage of a database's write pipeline: it writes the storage
//! batches the writer computed, fsyncs them, publishes the new state and
//! answers the callers.
//!
//! The writer (see [`crate::writer`]) turns a group of requests into a
//! [`Commit`] — one storage batch, the state after it, the replies — and
//! hands it over; while the committer writes and fsyncs group n, the
//! writer already computes group n+1. Commits that queue up while a write
//! or fsync is in progress are merged into one storage write with at most
//! one fsync (group commit across groups).
//!
//! Invariants:
//! - **In order.** Commits are written, published and answered in the
//!   order the writer made them; a caller is answered only after its
//!   commit is written (and fsynced when any merged commit asked for it).
//!   A synced write is visible to readers only once it is durable (the
//!   store's write-ahead log is synced before the write is applied).
//! - **Bounded.** At most `PIPELINE_DEPTH` commits wait here; the writer
//!   blocks beyond that.
//! - **Stop on the first storage error.** A failed write or fsync poisons
//!   the engine; that commit and every later one fail, nothing is retried.
//! - **Delayed commits** are fsynced within `delayed_flush_ms`, and before
//!   the committer exits (when its writer retires or shuts down).
//! - **No hand-off when alone.** When the pipe is empty and no request
//!   waits behind the group, the writer commits it on its own thread
//!   (same code, same lock) — which is the caller's own thread when the
//!   caller applied its request itself (`crate::writer`, "Caller
//!   commits"): a lone request does not pay a thread wake-up.
//! - **Design generation.** A commit that wrote or purged a design
//!   document advances the database's design generation after it is
//!   written and before its callers are answered
//!   (`Database::design_generation`).
//! - [`Progress`] tells the writer which commits are done, so it can drop
//!   the in-flight records it keeps for them and wait for an empty pipe.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::{Condvar, Mutex};
use settee_store::{Batch, Prepared};
use tokio::sync::oneshot;

use crate::database::Shared;
use crate::error::{DocFailure, Error, Result};
use crate::records::DbState;
use crate::writer::{DocResult, PurgeOutcome};

/// Commits that may wait for the committer (besides the one it works on):
/// deep enough for the writer to keep computing through an fsync or two.
pub(crate) const PIPELINE_DEPTH: usize = 8;

/// A reply to send once its commit is durable (or failed).
pub(crate) enum Reply {
    Update(
        oneshot::Sender<Result<Vec<DocResult>>>,
        Result<Vec<DocResult>>,
    ),
    Local(
        oneshot::Sender<Result<std::result::Result<String, DocFailure>>>,
        std::result::Result<String, DocFailure>,
    ),
    Unit(oneshot::Sender<Result<()>>),
    /// A setting kept as JSON text (the security object, the automatic
    /// purge settings) committed: published to readers, then answered.
    Setting(
        oneshot::Sender<Result<()>>,
        Arc<str>,
        crate::database::SettingSlot,
    ),
    Purge(oneshot::Sender<Result<PurgeOutcome>>, PurgeOutcome),
}

impl Reply {
    pub(crate) fn send(self, failure: Option<&Error>) {
        // A caller that gave up waiting dropped its receiver; that is fine.
        match (self, failure) {
            (Reply::Update(tx, r), None) => drop(tx.send(r)),
            (Reply::Update(tx, _), Some(e)) => drop(tx.send(Err(e.clone()))),
            (Reply::Local(tx, r), None) => drop(tx.send(Ok(r))),
            (Reply::Local(tx, _), Some(e)) => drop(tx.send(Err(e.clone()))),
            (Reply::Unit(tx), None) => drop(tx.send(Ok(()))),
            (Reply::Unit(tx), Some(e)) => drop(tx.send(Err(e.clone()))),
            (Reply::Setting(tx, text, slot), None) => {
                *slot.lock() = Some(text);
                drop(tx.send(Ok(())));
            }
            (Reply::Setting(tx, _, _), Some(e)) => drop(tx.send(Err(e.clone()))),
            (Reply::Purge(tx, r), None) => drop(tx.send(Ok(r))),
            (Reply::Purge(tx, _), Some(e)) => drop(tx.send(Err(e.clone()))),
        }
    }
}

/// One group's outcome, on its way to the disk.
pub(crate) struct Commit {
    /// The writer's group number (increasing by one per commit).
    pub group: u64,
    /// Empty when the group changed nothing (e.g. only a flush).
    pub batch: Arc<Batch>,
    /// The batch in the store's own format, encoded by the writer.
    pub prepared: Option<Prepared>,
    /// Fsync before answering.
    pub sync: bool,
    /// The database's state after this group, published once written.
    pub state: DbState,
    pub replies: Vec<Reply>,
    /// The group wrote or purged a design document: the database's design
    /// generation advances once it is written, before anyone is answered.
    pub design_changed: bool,
}

/// The highest group number written (or failed) so far.
#[derive(Default)]
pub(crate) struct Progress {
    done: Mutex<u64>,
    changed: Condvar,
}

impl Progress {
    pub(crate) fn done(&self) -> u64 {
        *self.done.lock()
    }

    fn advance(&self, group: u64) {
        let mut d = self.done.lock();
        if group > *d {
            *d = group;
            self.changed.notify_all();
        }
    }

    /// Blocks until group `group` is done.
    pub(crate) fn wait_for(&self, group: u64) {
        let mut d = self.done.lock();
        while *d < group {
            self.changed.wait(&mut d);
        }
    }
}

/// The writer's end of the pipe: the queue and the committer thread.
pub(crate) struct Pipe {
    tx: Option<Sender<Commit>>,
    thread: Option<std::thread::JoinHandle<()>>,
    core: Arc<Mutex<Core>>,
    pub progress: Arc<Progress>,
    /// The last group handed over.
    pub sent: u64,
}

impl Pipe {
    /// Starts the committer thread of a database (named after its writer).
    pub(crate) fn start(shared: Arc<Shared>) -> std::io::Result<Pipe> {
        let (tx, rx) = crossbeam_channel::bounded(PIPELINE_DEPTH);
        let progress = Arc::new(Progress::default());
        let core = Arc::new(Mutex::new(Core {
            shared: shared.clone(),
            progress: progress.clone(),
            unsynced_since: None,
        }));
        let committer = Committer {
            rx,
            core: core.clone(),
            tick: Duration::from_millis((shared.opts.delayed_flush_ms / 10).max(1)),
        };
        let thread = std::thread::Builder::new()
            .name(format!("commit-{}", shared.db))
            .spawn(move || committer.run())?;
        Ok(Pipe {
            tx: Some(tx),
            thread: Some(thread),
            core,
            progress,
            sent: 0,
        })
    }

    /// Hands a commit over (blocks while `PIPELINE_DEPTH` wait already).
    /// With `inline` and nothing in the pipe, the calling thread commits it
    /// itself: a lone request then skips a thread hand-off.
    pub(crate) fn send(&mut self, commit: Commit, inline: bool) {
        let previous = self.sent;
        self.sent = commit.group;
        if inline && self.progress.done() == previous {
            // Drained: no commit can be ahead of this one.
            return self.core.lock().commit(vec![commit]);
        }
        let Some(tx) = &self.tx else {
            return fail(vec![commit], &Error::Closed);
        };
        if let Err(e) = tx.send(commit) {
            // The committer only exits when this sender is dropped.
            fail(vec![e.into_inner()], &Error::Closed);
        }
    }

    /// Blocks until every commit handed over is done.
    pub(crate) fn drain(&self) {
        self.progress.wait_for(self.sent);
    }

    /// Stops the committer after it has written and fsynced everything.
    pub(crate) fn finish(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            drop(t.join());
        }
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.finish();
    }
}

fn fail(commits: Vec<Commit>, e: &Error) {
    for c in commits {
        for r in c.replies {
            r.send(Some(e));
        }
    }
}

/// The committer thread: takes commits off the queue and flushes delayed
/// commits in time.
struct Committer {
    rx: Receiver<Commit>,
    core: Arc<Mutex<Core>>,
    /// How often an idle committer checks for a due delayed-commit fsync
    /// (the writer may have written one inline meanwhile).
    tick: Duration,
}

impl Committer {
    fn run(self) {
        loop {
            match self.rx.recv_timeout(self.tick) {
                Ok(first) => {
                    let mut commits = vec![first];
                    commits.extend(self.rx.try_iter());
                    let mut core = self.core.lock();
                    core.commit(commits);
                    // A steady stream of delayed commits never lets the
                    // receive time out: the flush deadline is checked here
                    // too, or they would stay unsynced for as long as it lasts.
                    core.sync_if_due(self.tick);
                }
                Err(RecvTimeoutError::Timeout) => self.core.lock().sync_if_due(self.tick),
                Err(RecvTimeoutError::Disconnected) => {
                    self.core.lock().sync_if_due(Duration::MAX);
                    return;
                }
            }
        }
    }
}

/// Writing, fsyncing, publishing and answering: done by the committer
/// thread, or by the writer itself when the pipe is empty (one at a time).
struct Core {
    shared: Arc<Shared>,
    progress: Arc<Progress>,
    /// When the oldest write not yet fsynced was made.
    unsynced_since: Option<Instant>,
}

impl Core {
    /// Fsyncs unsynced writes that are due within `slack` (all of them
    /// with `Duration::MAX`), so a delayed commit is durable within
    /// `delayed_flush_ms`.
    fn sync_if_due(&mut self, slack: Duration) {
        let Some(since) = self.unsynced_since else {
            return;
        };
        let flush_after = Duration::from_millis(self.shared.opts.delayed_flush_ms);
        if since.elapsed().saturating_add(slack) < flush_after {
            return;
        }
        if self.shared.poison.check().is_err() {
            // Nothing more reaches the disk; there is nothing to wait for.
            self.unsynced_since = None;
            return;
        }
        if self.shared.poison.guard(self.shared.store.sync()).is_ok() {
            self.unsynced_since = None;
        }
    }

    /// Writes the commits as one storage batch, fsyncs if any asks, then
    /// publishes and answers them in order.
    fn commit(&mut self, mut commits: Vec<Commit>) {
        let last = commits.last().map_or(0, |c| c.group);
        if let Err(e) = self.shared.poison.check() {
            fail(commits, &e);
            self.progress.advance(last);
            return;
        }
        let sync = commits.iter().any(|c| c.sync);
        // One commit is written as it is; queued ones are merged into one
        // batch (one write, one fsync).
        let merged;
        let (batch, prepared): (&Batch, Option<Prepared>) = match commits.as_mut_slice() {
            [only] => (&only.batch, only.prepared.take()),
            _ => {
                let ops = commits.iter().map(|c| c.batch.len()).sum();
                let bytes = commits.iter().map(|c| c.batch.data_bytes()).sum();
                let mut all = Batch::with_capacity(ops, bytes);
                let mut prepared: Option<Prepared> = None;
                let mut complete = true;
                for c in &mut commits {
                    all.append(&c.batch);
                    match (&mut prepared, c.prepared.take()) {
                        (_, None) => complete = false,
                        (None, Some(p)) => prepared = Some(p),
                        (Some(acc), Some(p)) => acc.append(&p),
                    }
                }
                merged = all;
                (&merged, prepared.filter(|_| complete))
            }
        };
        let wrote = !batch.is_empty();
        let store = &self.shared.store;
        let result = if wrote {
            self.shared.poison.guard(match prepared {
                Some(p) => store.write_prepared(batch, p, sync),
                None => store.write(batch, sync),
            })
        } else if sync && self.unsynced_since.is_some() {
            self.shared.poison.guard(self.shared.store.sync())
        } else {
            Ok(())
        };
        match result {
            Ok(()) => {
                if sync {
                    self.unsynced_since = None;
                } else if wrote {
                    self.unsynced_since.get_or_insert_with(Instant::now);
                }
                let mut replies = Vec::new();
                let mut state = None;
                let mut design_changed = false;
                for c in commits {
                    replies.extend(c.replies);
                    state = Some(c.state);
                    design_changed |= c.design_changed;
                }
                if let Some(state) = state {
                    self.shared.publish(state);
                }
                if design_changed {
                    // After the write (a reader that sees the new
                    // generation finds the new design documents), before
                    // the replies (a caller answered for a design document
                    // write is never validated by the old functions).
                    self.shared.advance_design_generation();
                }
                self.progress.advance(last);
                for r in replies {
                    r.send(None);
                }
            }
            Err(e) => {
                fail(commits, &e);
                self.progress.advance(last);
            }
        }
    }
}
