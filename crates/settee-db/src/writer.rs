//! The single writer of one database, with group commit.
//!
//! Invariants:
//! - **One writer per database.** Every mutation of the database's keys
//!   (documents, local docs, purge, compaction, revs_limit) is a
//!   [`Request`] executed by this thread; nothing else writes them.
//! - **Group commit, pipelined.** The writer takes every queued request (up
//!   to `group_docs_max` documents, never splitting a request), applies them
//!   in arrival order to one storage batch and hands it to the database's
//!   committer ([`crate::committer`]), which writes it atomically, fsyncs
//!   once if any request needs it, and only then answers: a full-commit
//!   reply means durable. While group n is written and fsynced, the writer
//!   computes group n+1.
//! - **Caller commits.** The writer's state is behind a lock that its
//!   thread holds only while it applies a group. A caller whose update
//!   (or `_local` write) finds the queue empty and the lock free applies
//!   the request itself, as a group of one, with the same code — and,
//!   the pipeline being empty, writes and fsyncs it on its own thread —
//!   so a lone request wakes no writer thread and is not woken back (one
//!   client writing one document at a time pays for no hand-off).
//!   Requests that meet a busy writer queue as before and form groups.
//!   Still one writer at a time: the lock is the writer. A panic while a
//!   caller applies marks the writer broken; its thread stops and the
//!   next request starts a new writer from the published state.
//! - **The writer reads its own writes.** The batches of groups still in
//!   the pipeline are kept and indexed by document id ([`Inflight`]); what
//!   they hold wins over storage, which may not have it yet. They are
//!   released once their group is written.
//!   Requests that read storage directly (purge, compaction) first wait
//!   for the pipeline to drain.
//! - **Local documents are written blind.** As in CouchDB 3, a `_local`
//!   write does no revision check: its new revision follows from the one it
//!   names alone ([`next_local_rev`]), a delete is `0-0` (absent or not),
//!   so the writer never reads them and later writes win. They get no
//!   sequence number and never appear in changes.
//! - **An upper bound of the ids.** The writer knows an id at least as
//!   large as every id the database holds (read once from storage when
//!   the writer starts, raised by every group); ids above it are new
//!   without a read. Only raising it is ever needed: nothing but this
//!   writer adds ids, and purge only removes them.
//! - **One sequence per document per request.** Every change a request
//!   makes takes the next `update_seq`, except that a document changed
//!   again by the same request keeps the sequence it took earlier in it
//!   (CouchDB gives a document one sequence per batch, and replication
//!   with `new_edits=false` often sends several revisions of one document
//!   together). A request is never split across groups, so the reused
//!   sequence was never visible to a reader.
//! - **By-seq counts.** Besides the by-seq rows, the writer keeps per
//!   bucket of [`keys::SEQ_BUCKET`] sequences how many rows the bucket
//!   has, in the same batch as the rows: the highest bucket's in the state
//!   record (written by every group anyway, so a group that only adds rows
//!   writes no extra key), every other one under its Meta key. The writer
//!   caches every count it read or wrote (the latest value, whatever the
//!   pipeline still holds) and forgets them only with an empty pipeline.
//!   A database written before the counts existed gets them built (one
//!   scan) by the first group of its first writer. The changes feed's
//!   `pending` costs one bucket plus one count per later bucket instead of
//!   one row per change.
//! - **Purge bookkeeping as in CouchDB.** Every id of a `_purge` request
//!   takes the next `purge_seq` and is recorded in the purge history with
//!   the revisions it named, purged or not; a partially purged document
//!   takes one new sequence per remaining leaf (it keeps the last); a
//!   request that gave no document a new sequence advances `update_seq`
//!   by one (so indexes see the purge), an empty one changes nothing.
//!   The history keeps the newest `purged_infos_limit` entries: older
//!   ones are deleted as new ones arrive (CouchDB drops them at
//!   compaction, once its indexes have seen them; Settee has no indexes
//!   yet, and keeps the history bounded without one).
//! - Setting `revs_limit` or `purged_infos_limit` advances `update_seq`
//!   (CouchDB counts both as updates).
//! - **Durability modes** (see [`Durability`]): delayed-commit groups are
//!   fsynced within `delayed_flush_ms` (by the committer); batch-mode
//!   documents wait in the database's batch buffer ([`crate::batch_buffer`])
//!   and the writer applies them (with an fsync) within `batch_flush_ms`
//!   of noticing the first, or at `batch_docs_max`. It looks at the
//!   buffer after every group and when woken by [`Request::Buffered`].
//! - **Design documents are noticed.** A group that writes or purges a
//!   `_design/` document says so in its commit; the committer then
//!   advances the database's design generation (see
//!   `Database::design_generation`).
//! - **Stop on the first storage error.** A failed write or fsync poisons the
//!   engine; the whole group fails and nothing is retried.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use settee_core::att::AttKind;
use settee_core::doc::{next_local_rev, Body, Doc, DocError};
use settee_core::name::{DESIGN_PREFIX, LOCAL_PREFIX};
use settee_core::rev::Rev;
use settee_core::revtree::RevTree;
use settee_store::{Batch, Keyspace};
use tokio::sync::oneshot;

use crate::atts;
use crate::committer::{Commit, Pipe, Reply};
use crate::database::Shared;
use crate::error::{DocFailure, Error, Result};
use crate::id_blocks::{Deltas, IdBlocks};
use crate::inflight::Inflight;
use crate::keys::{self, DbId};
use crate::options::Durability;
use crate::records::{decode, encode, DbState, DocRecord, LocalRecord, PurgeRecord};
use crate::records_fast;
use crate::update::{self, Edit};

/// The outcome of one document of an update: its new (or existing) rev.
pub type DocResult = std::result::Result<Rev, DocFailure>;

/// What `purge` did: the new purge_seq and, per document, the revisions removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeOutcome {
    pub purge_seq: u64,
    pub purged: Vec<(String, Vec<Rev>)>,
}

pub(crate) struct UpdateReq {
    pub docs: Vec<Doc>,
    pub new_edits: bool,
    pub all_or_nothing: bool,
    pub durability: Durability,
    /// None for batch mode: nobody waits.
    pub reply: Option<oneshot::Sender<Result<Vec<DocResult>>>>,
}

pub(crate) enum Request {
    Update(UpdateReq),
    Local {
        id: String,
        rev: Option<String>,
        /// None deletes the document.
        body: Option<Body>,
        durability: Durability,
        reply: oneshot::Sender<Result<std::result::Result<String, DocFailure>>>,
    },
    /// Apply buffered batch-mode updates and fsync everything (`_ensure_full_commit`).
    Flush(oneshot::Sender<Result<()>>),
    /// The batch buffer has become non-empty or due.
    Buffered,
    SetRevsLimit(u64, oneshot::Sender<Result<()>>),
    /// A new security object (JSON text), visible to readers once committed.
    SetSecurity(Arc<str>, oneshot::Sender<Result<()>>),
    SetPurgedInfosLimit(u64, oneshot::Sender<Result<()>>),
    /// New automatic purge settings (JSON text), visible once committed.
    SetAutoPurge(Arc<str>, oneshot::Sender<Result<()>>),
    Purge(
        Vec<(String, Vec<Rev>)>,
        oneshot::Sender<Result<PurgeOutcome>>,
    ),
    /// Drop the bodies of non-leaf revisions of these documents.
    Compact(Vec<String>, oneshot::Sender<Result<()>>),
    /// Flush everything and stop (the sender joins the thread).
    Shutdown,
}

impl Request {
    fn doc_count(&self) -> usize {
        match self {
            Request::Update(u) => u.docs.len(),
            Request::Purge(p, _) => p.len(),
            Request::Compact(ids, _) => ids.len(),
            _ => 1,
        }
    }
}

pub(crate) struct Writer {
    shared: Arc<Shared>,
    rx: Receiver<Request>,
    state: DbState,
    /// When the writer first saw the batch buffer non-empty (since it last
    /// took it): the buffer is due `batch_flush_ms` later.
    buffered_since: Option<Instant>,
    /// The committer (it numbers the groups handed to it).
    pipe: Pipe,
    /// Batches of groups still in the pipeline, indexed by document id.
    inflight: Inflight,
    /// An upper bound of the ids of every document of the database (stored
    /// or in flight): `Some(None)` when it has none, `None` until read
    /// from storage. Ids above it need no lookup: with increasing ids
    /// (CouchDB's default `sequential` uuids, replication in id order)
    /// most new documents skip the by-id read.
    max_id: Option<Option<Box<[u8]>>>,
    /// By-seq counts (bucket → rows) this writer read or wrote: the latest
    /// values, including what groups in the pipeline wrote.
    seq_counts: FxHashMap<u64, u64>,
    /// The live counts per block of ids (see [`crate::id_blocks`]): `None`
    /// until read (or built) by this writer's first group, and after a
    /// group that changed them failed before it was sent.
    blocks: Option<IdBlocks>,
    /// A caller's request panicked while applied on its thread: the
    /// writer's state may be half-updated, so it takes no more requests.
    broken: bool,
}

/// Buckets of by-seq counts a writer keeps before it forgets them (once
/// its pipeline is empty): 16 bytes each.
const SEQ_COUNTS_CACHED_MAX: usize = 1 << 16;

impl Writer {
    pub(crate) fn new(
        shared: Arc<Shared>,
        rx: Receiver<Request>,
        state: DbState,
        pipe: Pipe,
    ) -> Writer {
        Writer {
            shared,
            rx,
            state,
            buffered_since: None,
            pipe,
            inflight: Inflight::default(),
            max_id: None,
            seq_counts: FxHashMap::default(),
            blocks: None,
            broken: false,
        }
    }

    /// Makes the id blocks ready for a group: read from storage (or built,
    /// for a database that has none) by the first group, oversized ones
    /// cut. Both read storage, so the pipeline is drained first. What they
    /// write goes to `batch`, the group's.
    fn prepare_blocks(&mut self, batch: &mut Batch) -> Result<()> {
        let needs_storage = self.blocks.as_ref().is_none_or(IdBlocks::needs_cut);
        if !needs_storage {
            return Ok(());
        }
        self.pipe.drain();
        self.inflight.clear();
        let (db, poison) = (self.shared.db, &self.shared.poison);
        let view = self.shared.store.latest();
        match &mut self.blocks {
            Some(blocks) => {
                let cuts = blocks.cut(&*view, poison)?;
                blocks.apply_cuts(batch, cuts);
            }
            None => {
                self.blocks = Some(match IdBlocks::load(&*view, poison, db)? {
                    Some(blocks) => blocks,
                    None => IdBlocks::build(&*view, poison, db, batch)?,
                });
                // Loaded blocks may be due a cut too.
                let blocks = self.blocks.as_mut().expect("just set");
                if blocks.needs_cut() {
                    let cuts = blocks.cut(&*view, poison)?;
                    blocks.apply_cuts(batch, cuts);
                }
            }
        }
        Ok(())
    }

    /// Counts the by-seq rows of every bucket, from storage (for a database
    /// written before the counts existed; the pipeline must be empty).
    fn count_seqs(&self) -> Result<FxHashMap<u64, u64>> {
        let (lo, hi) = keys::db_range(self.shared.db);
        let mut counts: FxHashMap<u64, u64> = FxHashMap::default();
        let view = self.shared.store.latest();
        self.shared
            .poison
            .guard(view.scan(Keyspace::Seqs, &lo, &hi, false, &mut |k, _| {
                *counts
                    .entry(keys::seq_of(k) / keys::SEQ_BUCKET)
                    .or_default() += 1;
                true
            }))?;
        Ok(counts)
    }

    /// The stored by-seq count of `bucket` (cached after the first read).
    fn seq_count(&mut self, bucket: u64) -> Result<u64> {
        if let Some(n) = self.seq_counts.get(&bucket) {
            return Ok(*n);
        }
        let v = self.shared.poison.guard(
            self.shared
                .store
                .get(Keyspace::Meta, &keys::seq_count(self.shared.db, bucket)),
        )?;
        let n = v.map(|b| decode::<u64>(&b, "by-seq count")).transpose()?;
        Ok(n.unwrap_or(0))
    }

    /// Applies a group's by-seq count changes: the head bucket's in the
    /// state record, the others' under their keys in the batch.
    fn write_seq_counts(
        &mut self,
        batch: &mut Batch,
        state: &mut DbState,
        deltas: FxHashMap<u64, i64>,
    ) -> Result<()> {
        let mut deltas: Vec<(u64, i64)> = deltas.into_iter().filter(|d| d.1 != 0).collect();
        deltas.sort_unstable_by_key(|d| d.0);
        let corrupt = |bucket| Error::Corrupt(format!("by-seq count of bucket {bucket}"));
        for (bucket, delta) in deltas {
            if bucket > state.head_bucket {
                // Rows past the head: the head's count goes under its key.
                let head = state.head_bucket;
                self.put_seq_count(batch, head, state.head_count);
                state.head_bucket = bucket;
                state.head_count = 0;
            }
            if bucket == state.head_bucket {
                state.head_count = state
                    .head_count
                    .checked_add_signed(delta)
                    .ok_or_else(|| corrupt(bucket))?;
            } else {
                let n = self
                    .seq_count(bucket)?
                    .checked_add_signed(delta)
                    .ok_or_else(|| corrupt(bucket))?;
                self.put_seq_count(batch, bucket, n);
            }
        }
        Ok(())
    }

    /// Writes (or, at zero, deletes) the stored count of a bucket.
    fn put_seq_count(&mut self, batch: &mut Batch, bucket: u64, n: u64) {
        let key = keys::seq_count(self.shared.db, bucket);
        if n == 0 {
            batch.delete(Keyspace::Meta, key);
        } else {
            batch.put(Keyspace::Meta, key, encode(&n));
        }
        self.seq_counts.insert(bucket, n);
    }

    /// The largest document id in storage (read once per writer: after
    /// that, every new id passes through this writer).
    fn read_max_id(&self) -> Result<Option<Box<[u8]>>> {
        let (lo, hi) = keys::db_range(self.shared.db);
        let mut max = None;
        let view = self.shared.store.latest();
        self.shared
            .poison
            .guard(view.scan(Keyspace::Docs, &lo, &hi, true, &mut |k, _| {
                max = Some(keys::doc_id(k).into());
                false
            }))?;
        Ok(max)
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.buffered_since
            .map(|t| t + Duration::from_millis(self.shared.opts.batch_flush_ms))
    }

    /// Whether a caller may apply `req` itself: an update that waits for
    /// its answer, or a local document write, on a writer that is sound.
    pub(crate) fn takes_from_caller(&self, req: &Request) -> bool {
        !self.broken
            && match req {
                Request::Update(u) => u.reply.is_some() && u.durability != Durability::Batch,
                Request::Local { .. } => true,
                _ => false,
            }
    }

    /// Applies one request on the caller's thread, as its own group (see
    /// "Caller commits" in the module doc). Should it panic, the writer is
    /// marked broken: its thread stops and the next request starts a new
    /// writer from the published state.
    pub(crate) fn apply_for_caller(&mut self, req: Request) {
        struct Unwinding<'a>(&'a mut bool);
        impl Drop for Unwinding<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    *self.0 = true;
                }
            }
        }
        let mut broken = false;
        {
            let _mark = Unwinding(&mut broken);
            self.process(vec![req], false);
        }
        self.broken |= broken;
    }

    /// Called by the idle writer thread with the writer locked: retires it
    /// (after its committer has written and fsynced everything) when its
    /// queue and the batch buffer are empty.
    fn retire(&mut self) -> bool {
        self.pipe.drain();
        if self.shared.retire_if_idle(&self.rx) {
            self.pipe.finish();
            true
        } else {
            false
        }
    }

    /// Whether a panic left this writer unusable.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken
    }

    /// Applies one group: commits its requests and, when due, the batch
    /// buffer's updates in one storage batch.
    fn process(&mut self, group: Vec<Request>, stop: bool) {
        let now = Instant::now();
        let mut todo = Vec::with_capacity(group.len());
        let mut flush_all = stop;
        for req in group {
            match req {
                // The buffer is looked at below, whatever woke the writer.
                Request::Buffered => {}
                Request::Flush(_) | Request::Shutdown => {
                    flush_all = true;
                    todo.push(req);
                }
                other => todo.push(other),
            }
        }
        let opts = &self.shared.opts;
        let buffered = {
            let mut batch = self.shared.batch.lock();
            if batch.is_empty() {
                self.buffered_since = None;
                Vec::new()
            } else {
                let since = *self.buffered_since.get_or_insert(now);
                let due = batch.docs() >= opts.batch_docs_max
                    || now >= since + Duration::from_millis(opts.batch_flush_ms);
                if due || flush_all {
                    self.buffered_since = None;
                    batch.take()
                } else {
                    Vec::new()
                }
            }
        };
        if todo.is_empty() && buffered.is_empty() {
            return;
        }
        self.commit(buffered, todo, flush_all);
    }

    fn commit(&mut self, buffered: Vec<UpdateReq>, todo: Vec<Request>, force_sync: bool) {
        if let Err(e) = self.shared.poison.check() {
            fail_all(buffered, todo, &e);
            return;
        }
        let reads_storage = todo
            .iter()
            .any(|r| matches!(r, Request::Purge(..) | Request::Compact(..)));
        if self.seq_counts.len() > SEQ_COUNTS_CACHED_MAX || !self.state.seq_index {
            // Forgotten (or built) only with nothing in the pipeline.
            self.pipe.drain();
            self.inflight.clear();
            self.seq_counts.clear();
        }
        if reads_storage {
            self.pipe.drain();
            self.inflight.clear();
        } else {
            self.inflight.release_through(self.pipe.progress.done());
        }
        if self.max_id.is_none() {
            match self.read_max_id() {
                Ok(max) => self.max_id = Some(max),
                Err(e) => {
                    fail_all(buffered, todo, &e);
                    return;
                }
            }
        }
        let built = if self.state.seq_index {
            None
        } else {
            match self.count_seqs() {
                Ok(counts) => Some(counts),
                Err(e) => {
                    fail_all(buffered, todo, &e);
                    return;
                }
            }
        };
        let docs: usize = buffered.iter().map(|u| u.docs.len()).sum::<usize>()
            + todo.iter().map(Request::doc_count).sum::<usize>();
        // Two records per document, ~100 bytes each for small documents.
        let mut batch = Batch::with_capacity(2 * docs + 4, 128 * docs + 160);
        if let Err(e) = self.prepare_blocks(&mut batch) {
            self.blocks = None;
            fail_all(buffered, todo, &e);
            return;
        }
        let max_id = self.max_id.as_ref().and_then(Option::as_deref);
        let mut ctx = Ctx::new(&self.shared, &self.inflight, self.state.clone());
        ctx.batch = batch;
        if let Some(counts) = built {
            let head = counts.keys().copied().max().unwrap_or(0);
            for (bucket, n) in counts {
                if bucket == head {
                    ctx.state.head_bucket = head;
                    ctx.state.head_count = n;
                } else {
                    ctx.batch
                        .put(Keyspace::Meta, keys::seq_count(ctx.db, bucket), encode(&n));
                    self.seq_counts.insert(bucket, n);
                }
            }
            ctx.state.seq_index = true;
            ctx.state_dirty = true;
        }
        let mut replies = Vec::with_capacity(todo.len());
        let mut sync = force_sync || !buffered.is_empty();
        let load = ctx.preload(
            buffered.iter().chain(todo.iter().filter_map(|r| match r {
                Request::Update(u) => Some(u),
                _ => None,
            })),
            max_id,
        );
        match load {
            Ok(Some(largest)) => {
                if let Some(bound) = &mut self.max_id {
                    if bound.as_ref().is_none_or(|m| largest > *m) {
                        *bound = Some(largest);
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                fail_all(buffered, todo, &e);
                return;
            }
        }
        for u in buffered {
            // Nobody waits for batch-mode results; failures are only logged.
            let ids: Vec<String> = u.docs.iter().map(|d| d.id.clone()).collect();
            for (id, r) in ids.iter().zip(ctx.update(u.docs, u.new_edits)) {
                if let Err(f) = r {
                    tracing::warn!(db = %self.shared.name, %id, error = %f, "batch=ok update failed");
                }
            }
        }
        for req in todo {
            match req {
                Request::Update(u) => {
                    sync |= u.durability == Durability::Full;
                    let results = ctx.update_request(u.docs, u.new_edits, u.all_or_nothing);
                    if let Some(tx) = u.reply {
                        replies.push(Reply::Update(tx, results));
                    }
                }
                Request::Local {
                    id,
                    rev,
                    body,
                    durability,
                    reply,
                } => {
                    sync |= durability == Durability::Full;
                    match ctx.local(&id, rev.as_deref(), body) {
                        Ok(rev) => replies.push(Reply::Local(reply, Ok(rev))),
                        // Nothing written: no need to wait for the group.
                        Err(refused) => drop(reply.send(Ok(Err(refused)))),
                    }
                }
                Request::Flush(tx) => {
                    sync = true;
                    replies.push(Reply::Unit(tx));
                }
                Request::SetRevsLimit(n, tx) => {
                    sync = true;
                    ctx.state.revs_limit = n;
                    ctx.state.update_seq += 1;
                    ctx.state_dirty = true;
                    replies.push(Reply::Unit(tx));
                }
                Request::SetSecurity(text, tx) => {
                    sync = true;
                    ctx.batch.put(
                        Keyspace::Meta,
                        keys::security(self.shared.db),
                        text.as_bytes(),
                    );
                    ctx.state.update_seq += 1;
                    ctx.state_dirty = true;
                    replies.push(Reply::Setting(tx, text, Arc::clone(&self.shared.security)));
                }
                Request::SetPurgedInfosLimit(n, tx) => {
                    sync = true;
                    ctx.set_purged_infos_limit(n);
                    replies.push(Reply::Unit(tx));
                }
                Request::SetAutoPurge(text, tx) => {
                    sync = true;
                    ctx.batch.put(
                        Keyspace::Meta,
                        keys::auto_purge(self.shared.db),
                        text.as_bytes(),
                    );
                    replies.push(Reply::Setting(
                        tx,
                        text,
                        Arc::clone(&self.shared.auto_purge),
                    ));
                }
                Request::Purge(reqs, tx) => {
                    sync = true;
                    match ctx.purge(reqs) {
                        Ok(outcome) => replies.push(Reply::Purge(tx, outcome)),
                        Err(e) => drop(tx.send(Err(e))),
                    }
                }
                Request::Compact(ids, tx) => match ctx.compact(&ids) {
                    Ok(()) => replies.push(Reply::Unit(tx)),
                    Err(e) => drop(tx.send(Err(e))),
                },
                Request::Shutdown => sync = true,
                Request::Buffered => {}
            }
        }
        let Ctx {
            mut state,
            state_dirty,
            mut batch,
            records,
            seq_deltas,
            id_deltas,
            design_changed,
            ..
        } = ctx;
        let counted = self
            .write_seq_counts(&mut batch, &mut state, seq_deltas)
            .and_then(|()| match &mut self.blocks {
                Some(blocks) => blocks.apply(&mut batch, &id_deltas),
                None => Err(Error::Corrupt("id blocks not loaded".into())),
            });
        if let Err(e) = counted {
            // The blocks may hold changes this batch would have written.
            self.blocks = None;
            for reply in replies {
                reply.send(Some(&e));
            }
            return;
        }
        if !batch.is_empty() || state_dirty {
            batch.put(Keyspace::Meta, keys::state(self.shared.db), encode(&state));
            // At most once a second, the time of this group's changes.
            let now = crate::engine::unix_secs_ceil();
            let mut time_seq = self.shared.time_seq.lock();
            if time_seq.record(now, state.update_seq) {
                batch.put(
                    Keyspace::Meta,
                    keys::time_seq(self.shared.db),
                    encode(&*time_seq),
                );
            }
        }
        // The group's records are in its batch; the decoded ones go now,
        // while they are still in the cache.
        drop(records);
        let group = self.pipe.sent + 1;
        // Encoded here, not by the committer: this thread has time to spare
        // while the committer writes the previous group.
        let prepared = self.shared.store.prepare(&batch);
        let batch = Arc::new(batch);
        self.inflight.add(group, Arc::clone(&batch));
        self.state = state.clone();
        // Nothing queued behind this group: nothing to overlap its write
        // with, so the writer may write it itself.
        let alone = self.rx.is_empty();
        self.pipe.send(
            Commit {
                group,
                batch,
                prepared,
                sync,
                state,
                replies,
                design_changed,
            },
            alone,
        );
    }
}

/// The writer thread's loop over the writer `core` (shared with callers
/// that apply lone requests themselves, see "Caller commits"). Returns
/// when shut down (after applying and fsyncing everything it holds), when
/// idle for `writer_idle_ms` with nothing buffered or queued (after its
/// committer has written and fsynced everything), or when a caller's
/// panic left the writer broken.
pub(crate) fn run(core: Arc<Mutex<Writer>>) {
    let (rx, shared) = {
        let w = core.lock();
        (w.rx.clone(), Arc::clone(&w.shared))
    };
    loop {
        let idle_deadline = Instant::now() + Duration::from_millis(shared.opts.writer_idle_ms);
        let deadline = core.lock().next_deadline();
        let first = match deadline {
            Some(d) => rx.recv_deadline(d),
            None => match rx.recv_deadline(idle_deadline) {
                // Nothing buffered, nothing queued for a while: give the
                // thread back, once the pipeline is empty (a successor
                // must find everything in storage).
                Err(RecvTimeoutError::Timeout) if core.lock().retire() => return,
                other => other,
            },
        };
        let mut group = Vec::new();
        let disconnected = match first {
            Ok(req) => {
                group.push(req);
                false
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => true,
        };
        let mut docs: usize = group.iter().map(Request::doc_count).sum();
        while docs < shared.opts.group_docs_max {
            match rx.try_recv() {
                Ok(req) => {
                    docs += req.doc_count();
                    group.push(req);
                }
                Err(_) => break,
            }
        }
        let stop = disconnected || group.iter().any(|r| matches!(r, Request::Shutdown));
        let mut w = core.lock();
        if w.broken {
            // Answered `Closed` as the slot replaces this writer.
            return;
        }
        w.process(group, stop);
        if stop {
            w.pipe.finish();
            return;
        }
    }
}

fn fail_all(buffered: Vec<UpdateReq>, todo: Vec<Request>, e: &Error) {
    drop(buffered);
    for req in todo {
        match req {
            Request::Update(u) => {
                if let Some(tx) = u.reply {
                    drop(tx.send(Err(e.clone())));
                }
            }
            Request::Local { reply, .. } => drop(reply.send(Err(e.clone()))),
            Request::Flush(tx)
            | Request::SetRevsLimit(_, tx)
            | Request::SetSecurity(_, tx)
            | Request::SetPurgedInfosLimit(_, tx)
            | Request::SetAutoPurge(_, tx)
            | Request::Compact(_, tx) => drop(tx.send(Err(e.clone()))),
            Request::Purge(_, tx) => drop(tx.send(Err(e.clone()))),
            Request::Shutdown | Request::Buffered => {}
        }
    }
}

/// The inline (leaf) bodies of a record, by revision, moved out of it.
fn take_inline_bodies(rec: &mut DocRecord) -> Vec<(Rev, String)> {
    let nodes = rec.tree.nodes();
    rec.inline
        .drain(..)
        .map(|(i, body)| (nodes[i as usize].rev.clone(), body))
        .collect()
}

/// The state of one group commit being assembled.
struct Ctx<'a> {
    shared: &'a Shared,
    inflight: &'a Inflight,
    db: DbId,
    state: DbState,
    state_dirty: bool,
    /// Every document record read or written in this group (None: absent).
    records: FxHashMap<String, Option<DocRecord>>,
    /// `update_seq` before the request being applied: a document whose
    /// sequence is above it was changed earlier in the same request.
    req_base: u64,
    /// Changes of the by-seq counts, by bucket.
    seq_deltas: FxHashMap<u64, i64>,
    /// Changes of the id blocks' counts, by document.
    id_deltas: Deltas,
    batch: Batch,
    /// A design document was written or purged in this group (see
    /// `Database::design_generation`).
    design_changed: bool,
}

/// Where a document stands for the doc counts.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Presence {
    Absent,
    Live,
    Deleted,
}

fn presence(tree: Option<&RevTree>) -> Presence {
    match tree.and_then(RevTree::winner_node) {
        None => Presence::Absent,
        Some(w) if w.deleted => Presence::Deleted,
        Some(_) => Presence::Live,
    }
}

/// Undo information for an all_or_nothing request.
struct Checkpoint {
    state: DbState,
    ops: usize,
    records: Vec<(String, Option<DocRecord>)>,
    seq_deltas: FxHashMap<u64, i64>,
    id_deltas: usize,
}

impl<'a> Ctx<'a> {
    fn new(shared: &'a Shared, inflight: &'a Inflight, state: DbState) -> Ctx<'a> {
        Ctx {
            shared,
            inflight,
            db: shared.db,
            state,
            state_dirty: false,
            records: FxHashMap::default(),
            req_base: 0,
            seq_deltas: FxHashMap::default(),
            id_deltas: Deltas::default(),
            batch: Batch::new(),
            design_changed: false,
        }
    }

    /// Counts a by-seq row added (+1) or removed (-1).
    fn count_seq(&mut self, seq: u64, delta: i64) {
        *self.seq_deltas.entry(seq / keys::SEQ_BUCKET).or_default() += delta;
    }

    /// Loads the records of every document the group's updates touch, in
    /// one batched read.
    ///
    /// `max_id` bounds the ids of the database's documents from above: ids
    /// beyond it are absent without a read. Returns the new bound's
    /// candidate, the group's largest id (raising the bound by it keeps it
    /// a bound, whatever happens to the group's documents).
    fn preload<'u>(
        &mut self,
        updates: impl Iterator<Item = &'u UpdateReq>,
        max_id: Option<&[u8]>,
    ) -> Result<Option<Box<[u8]>>> {
        let mut ids: Vec<&str> = Vec::new();
        for u in updates {
            ids.extend(u.docs.iter().map(|d| d.id.as_str()));
        }
        ids.sort_unstable();
        ids.dedup();
        self.records.reserve(ids.len());
        let largest = ids.last().map(|id| Box::<[u8]>::from(id.as_bytes()));
        let known = ids.partition_point(|id| max_id.is_some_and(|m| id.as_bytes() <= m));
        for id in ids.drain(known..) {
            self.records.insert(id.to_string(), None);
        }
        if !self.inflight.is_empty() {
            let mut missing = Vec::with_capacity(ids.len());
            for id in ids {
                match self.inflight.get(id)? {
                    Some(rec) => {
                        self.records.insert(id.to_string(), rec);
                    }
                    None => missing.push(id),
                }
            }
            ids = missing;
        }
        let keys: Vec<Vec<u8>> = ids.iter().map(|id| keys::doc(self.db, id)).collect();
        let key_refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let values = self
            .shared
            .poison
            .guard(self.shared.store.multi_get(Keyspace::Docs, &key_refs))?;
        for (id, v) in ids.into_iter().zip(values) {
            let rec = v.map(|b| DocRecord::decode(&b)).transpose()?;
            self.records.insert(id.to_string(), rec);
        }
        Ok(largest)
    }

    fn load(&mut self, id: &str) -> Result<Option<DocRecord>> {
        if let Some(r) = self.records.get(id) {
            return Ok(r.clone());
        }
        if let Some(r) = self.inflight.get(id)? {
            self.records.insert(id.to_string(), r.clone());
            return Ok(r);
        }
        let v = self.shared.poison.guard(
            self.shared
                .store
                .get(Keyspace::Docs, &keys::doc(self.db, id)),
        )?;
        let rec = v.map(|b| DocRecord::decode(&b)).transpose()?;
        self.records.insert(id.to_string(), rec.clone());
        Ok(rec)
    }

    /// One update request, honouring all_or_nothing.
    fn update_request(
        &mut self,
        docs: Vec<Doc>,
        new_edits: bool,
        all_or_nothing: bool,
    ) -> Result<Vec<DocResult>> {
        if !all_or_nothing {
            return Ok(self.update(docs, new_edits));
        }
        let ids: Vec<String> = docs.iter().map(|d| d.id.clone()).collect();
        let cp = Checkpoint {
            state: self.state.clone(),
            ops: self.batch.len(),
            records: ids
                .iter()
                .map(|id| (id.clone(), self.records.get(id).cloned().flatten()))
                .collect(),
            seq_deltas: self.seq_deltas.clone(),
            id_deltas: self.id_deltas.len(),
        };
        let results = self.update(docs, new_edits);
        let failures: Vec<(String, DocFailure)> = ids
            .into_iter()
            .zip(&results)
            .filter_map(|(id, r)| r.as_ref().err().map(|f| (id, f.clone())))
            .collect();
        if failures.is_empty() {
            return Ok(results);
        }
        self.state = cp.state;
        self.seq_deltas = cp.seq_deltas;
        self.id_deltas.truncate(cp.id_deltas);
        self.batch.truncate(cp.ops);
        for (id, rec) in cp.records {
            self.records.insert(id, rec);
        }
        Err(Error::AllOrNothingFailed(failures))
    }

    /// Applies each document of a request; failures affect only their document.
    fn update(&mut self, docs: Vec<Doc>, new_edits: bool) -> Vec<DocResult> {
        self.req_base = self.state.update_seq;
        docs.into_iter()
            .map(|doc| self.update_doc(doc, new_edits))
            .collect()
    }

    /// Puts a record taken out of `records` back (its slot exists: it was
    /// loaded before the group started).
    fn put_back(&mut self, id: &str, rec: Option<DocRecord>) {
        match self.records.get_mut(id) {
            Some(slot) => *slot = rec,
            None => {
                self.records.insert(id.to_string(), rec);
            }
        }
    }

    fn update_doc(&mut self, doc: Doc, new_edits: bool) -> DocResult {
        if doc.id.starts_with(LOCAL_PREFIX) {
            // Local documents have no revision tree; they go through `put_local`.
            return Err(DocFailure::Bad(DocError::BadRequest(
                "_local documents cannot be written as revisioned documents".into(),
            )));
        }
        if doc.body.len() > self.shared.opts.max_document_bytes {
            return Err(DocFailure::TooLarge(doc.body.len()));
        }
        // Take the record out (instead of cloning it); every path below puts
        // it or its successor back.
        let mut old = self.records.get_mut(&doc.id).and_then(Option::take);
        let mut doc = doc;
        if let Some(atts) = &doc.atts {
            let foreign = atts.iter().any(|a| match &a.kind {
                AttKind::Stored(_, w) => !crate::blobs::writes_belong_to(self.db, w),
                _ => false,
            });
            if foreign {
                self.put_back(&doc.id, old.take());
                return Err(DocFailure::Bad(DocError::BadRequest(
                    "attachment writes for another database".into(),
                )));
            }
            match self.resolve_attachments(&doc, old.as_ref(), new_edits) {
                Ok(Some(body)) => doc.body = body,
                Ok(None) => {}
                Err(f) => {
                    self.put_back(&doc.id, old.take());
                    return Err(f);
                }
            }
        }
        let limit = usize::try_from(self.state.revs_limit).unwrap_or(usize::MAX);
        let edit = update::apply(old.as_ref().map(|r| &r.tree), &doc, new_edits, limit);
        let (tree, rev, stemmed) = match edit {
            Ok(Edit::Changed { tree, rev, stemmed }) => (tree, rev, stemmed),
            Ok(Edit::Unchanged { rev }) => {
                self.put_back(&doc.id, old);
                return Ok(rev);
            }
            Err(f) => {
                self.put_back(&doc.id, old);
                return Err(f);
            }
        };
        let Doc { id, body, atts, .. } = doc;
        // Small attachments' bytes go in the same write as the revision
        // that names them (see `crate::atts`).
        for a in atts.into_iter().flatten() {
            if let AttKind::Stored(_, writes) = a.kind {
                for (k, v) in writes.0 {
                    self.batch.put(Keyspace::Blobs, k, v);
                }
            }
        }
        for n in stemmed.iter().filter(|n| n.has_body) {
            self.batch
                .delete(Keyspace::Bodies, keys::body(self.db, &id, &n.rev));
        }
        self.put_record(&id, old, tree, Some((rev.clone(), body.into_string())));
        Ok(rev)
    }

    /// The stored body of `doc`'s new revision with its attachments
    /// resolved against its parent's (see `crate::atts`). A new edit whose
    /// parent is not a leaf is left to `update::apply` to refuse.
    fn resolve_attachments(
        &self,
        doc: &Doc,
        old: Option<&DocRecord>,
        new_edits: bool,
    ) -> std::result::Result<Option<Body>, DocFailure> {
        let tree = old.map(|r| &r.tree);
        let (parent, pos) = if new_edits {
            match atts::new_edit_parent(tree, doc) {
                Some(found) => found,
                // A conflict: `update::apply` refuses it.
                None => return Ok(None),
            }
        } else {
            let Some(rev) = &doc.rev else { return Ok(None) };
            // The nearest ancestor this database has a body of.
            let path = doc.revisions.as_deref().unwrap_or_default();
            let parent = path
                .iter()
                .skip(1)
                .find(|r| tree.is_some_and(|t| t.find(r).is_some()))
                .cloned();
            (parent, rev.pos)
        };
        let parent_body = match (&parent, old) {
            (Some(p), Some(rec)) => match rec.inline_body(p) {
                Some(b) => Some(b.to_string()),
                None => self
                    .shared
                    .store
                    .get(Keyspace::Bodies, &keys::body(self.db, &doc.id, p))
                    .ok()
                    .flatten()
                    .and_then(|b| String::from_utf8(b).ok()),
            },
            _ => None,
        };
        atts::resolve(doc, pos, parent_body.as_deref())
    }

    /// Writes a document's new record and change row, and maintains the
    /// counters. The candidate bodies by revision are the old record's
    /// leaves' (moved out of it, not copied) and `new`: leaves of `tree`
    /// keep theirs inline, revisions that stopped being leaves move theirs
    /// to the Bodies keyspace, and revisions no longer in the tree drop
    /// theirs.
    fn put_record(
        &mut self,
        id: &str,
        old: Option<DocRecord>,
        tree: RevTree,
        new: Option<(Rev, String)>,
    ) {
        let db = self.db;
        self.design_changed |= id.starts_with(DESIGN_PREFIX);
        // What the counters need of the old record, before its bodies move.
        let old_seq = old.as_ref().map(|r| r.seq);
        let old_presence = presence(old.as_ref().map(|r| &r.tree));
        let old_winner_bytes = old.as_ref().map_or(0, DocRecord::winner_bytes);
        // No vector for a new document's one body.
        let bodies = old
            .map(|mut r| take_inline_bodies(&mut r))
            .unwrap_or_default();
        let mut inline = Vec::with_capacity(1);
        for (rev, body) in bodies.into_iter().chain(new) {
            match tree.find(&rev) {
                Some(i) if tree.is_leaf(&rev) => inline.push((i as u32, body)),
                Some(_) => self.batch.put(
                    Keyspace::Bodies,
                    keys::body(db, id, &rev),
                    body.into_bytes(),
                ),
                None => {}
            }
        }
        self.count(id, old_presence, presence(Some(&tree)));
        let seq = match old_seq {
            // Changed earlier in this request: the same sequence.
            Some(old_seq) if old_seq > self.req_base => old_seq,
            _ => {
                if let Some(old_seq) = old_seq {
                    self.batch.delete(Keyspace::Seqs, keys::seq(db, old_seq));
                    self.count_seq(old_seq, -1);
                }
                self.state.update_seq += 1;
                self.count_seq(self.state.update_seq, 1);
                self.state.update_seq
            }
        };
        // A new document's one leaf without a vector.
        let one;
        let many: Vec<(Rev, bool)>;
        let leaves: &[(Rev, bool)] = match tree.nodes() {
            [only] => {
                one = [(only.rev.clone(), only.deleted)];
                &one
            }
            _ => {
                many = tree
                    .leaves()
                    .into_iter()
                    .map(|l| (l.rev, l.deleted))
                    .collect();
                &many
            }
        };
        self.batch.put_with(
            Keyspace::Seqs,
            |k| keys::seq_into(k, db, seq),
            |v| records_fast::seq_record_into(v, id, leaves),
        );
        let rec = DocRecord { seq, tree, inline };
        self.state.external_bytes = self
            .state
            .external_bytes
            .saturating_sub(old_winner_bytes)
            .saturating_add(rec.winner_bytes());
        self.batch.put_with(
            Keyspace::Docs,
            |k| keys::doc_into(k, db, id),
            |v| records_fast::doc_record_into(v, &rec),
        );
        match self.records.get_mut(id) {
            Some(slot) => *slot = Some(rec),
            None => {
                self.records.insert(id.to_string(), Some(rec));
            }
        }
    }

    /// Counts a document's change of presence (in the database's counters
    /// and its id block's).
    fn count(&mut self, id: &str, before: Presence, after: Presence) {
        let records = i64::from(after != Presence::Absent) - i64::from(before != Presence::Absent);
        let live = i64::from(after == Presence::Live) - i64::from(before == Presence::Live);
        if records != 0 || live != 0 {
            self.id_deltas.push(id, records, live);
        }
        let s = &mut self.state;
        match before {
            Presence::Live => s.doc_count -= 1,
            Presence::Deleted => s.doc_del_count -= 1,
            Presence::Absent => {}
        }
        match after {
            Presence::Live => s.doc_count += 1,
            Presence::Deleted => s.doc_del_count += 1,
            Presence::Absent => {}
        }
    }

    /// Writes or deletes a `_local` document: no revision check (see the
    /// module doc); the answer is the new revision, `0-N`.
    fn local(
        &mut self,
        id: &str,
        rev: Option<&str>,
        body: Option<Body>,
    ) -> std::result::Result<String, DocFailure> {
        let n = next_local_rev(rev, body.is_none()).map_err(DocFailure::Bad)?;
        let key = keys::doc(self.db, id);
        match body {
            Some(body) => {
                if body.len() > self.shared.opts.max_document_bytes {
                    return Err(DocFailure::TooLarge(body.len()));
                }
                let rec = LocalRecord {
                    rev: n,
                    body: body.into_string(),
                };
                self.batch.put(Keyspace::Local, key, encode(&rec));
            }
            None => self.batch.delete(Keyspace::Local, key),
        }
        Ok(format!("0-{n}"))
    }

    /// Removes the given leaf revisions (and their unshared ancestors), and
    /// keeps CouchDB's purge bookkeeping (see the module doc).
    fn purge(&mut self, reqs: Vec<(String, Vec<Rev>)>) -> Result<PurgeOutcome> {
        let db = self.db;
        self.req_base = self.state.update_seq;
        let first_purge_seq = self.state.purge_seq;
        let mut purged = Vec::with_capacity(reqs.len());
        for (id, revs) in reqs {
            self.state.purge_seq += 1;
            self.batch.put(
                Keyspace::Purges,
                keys::seq(db, self.state.purge_seq),
                encode(&PurgeRecord {
                    id: id.clone(),
                    revs: revs.clone(),
                }),
            );
            let Some(old) = self.load(&id)? else {
                purged.push((id, vec![]));
                continue;
            };
            let mut tree = old.tree.clone();
            let mut removed_revs = Vec::new();
            for rev in &revs {
                if !tree.is_leaf(rev) {
                    continue;
                }
                for n in tree.purge_leaf(rev) {
                    if n.has_body {
                        self.batch
                            .delete(Keyspace::Bodies, keys::body(db, &id, &n.rev));
                    }
                    if n.rev == *rev {
                        removed_revs.push(n.rev);
                    }
                }
            }
            if !removed_revs.is_empty() {
                if tree.is_empty() {
                    self.design_changed |= id.starts_with(DESIGN_PREFIX);
                    self.batch.delete(Keyspace::Seqs, keys::seq(db, old.seq));
                    self.count_seq(old.seq, -1);
                    self.batch.delete(Keyspace::Docs, keys::doc(db, &id));
                    self.count(&id, presence(Some(&old.tree)), Presence::Absent);
                    self.state.external_bytes =
                        self.state.external_bytes.saturating_sub(old.winner_bytes());
                    self.records.insert(id.clone(), None);
                } else {
                    // CouchDB gives every remaining leaf a new sequence; the
                    // document keeps the last one.
                    let leaves = tree.leaves().len() as u64;
                    self.state.update_seq += leaves.saturating_sub(1);
                    self.put_record(&id, Some(old), tree, None);
                }
            }
            purged.push((id, removed_revs));
        }
        if self.state.purge_seq > first_purge_seq {
            // CouchDB's rule: the request advances update_seq by one unless
            // a partially purged document already did.
            if self.state.update_seq == self.req_base {
                self.state.update_seq += 1;
            }
            // Entries that fall out of the newest `purged_infos_limit`.
            let limit = self.state.purged_infos_limit;
            let from = first_purge_seq.saturating_sub(limit) + 1;
            for seq in from..=self.state.purge_seq.saturating_sub(limit) {
                self.batch.delete(Keyspace::Purges, keys::seq(db, seq));
            }
        }
        self.state_dirty = true;
        Ok(PurgeOutcome {
            purge_seq: self.state.purge_seq,
            purged,
        })
    }

    /// Sets how many purge requests the history keeps, dropping the
    /// entries beyond it.
    fn set_purged_infos_limit(&mut self, limit: u64) {
        let old_cut = self
            .state
            .purge_seq
            .saturating_sub(self.state.purged_infos_limit);
        let cut = self.state.purge_seq.saturating_sub(limit);
        if cut > old_cut {
            // One range deletion (a lowered limit may drop many entries).
            self.batch.delete_range(
                Keyspace::Purges,
                keys::seq(self.db, 0),
                keys::seq(self.db, cut + 1),
            );
        }
        self.state.purged_infos_limit = limit;
        self.state.update_seq += 1;
        self.state_dirty = true;
    }

    /// Drops the stored bodies of non-leaf revisions of these documents.
    fn compact(&mut self, ids: &[String]) -> Result<()> {
        let db = self.db;
        for id in ids {
            let Some(mut rec) = self.load(id)? else {
                continue;
            };
            let doomed = rec.tree.non_leaf_bodies();
            if doomed.is_empty() {
                continue;
            }
            for rev in &doomed {
                self.batch.delete(Keyspace::Bodies, keys::body(db, id, rev));
                rec.tree.drop_body(rev);
            }
            self.batch
                .put(Keyspace::Docs, keys::doc(db, id), encode(&rec));
            self.records.insert(id.clone(), Some(rec));
        }
        Ok(())
    }
}
