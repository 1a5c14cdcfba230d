//! A database handle: the embedded API for one database.
//!
//! Reads go straight to a storage snapshot ([`Reader`]); every mutation is
//! sent to the database's single writer thread (see [`crate::writer`]) over a
//! bounded queue, and the call waits for the group commit that carries it.
//!
//! Blocking methods must not be called from inside an async runtime; use the
//! `*_async` variants there (the HTTP layer does).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};
use parking_lot::{Condvar, Mutex, MutexGuard};
use settee_core::doc::{Body, Doc};
use settee_core::rev::Rev;
use settee_store::{Keyspace, Store};
use tokio::sync::{oneshot, watch};

use crate::batch_buffer::{Append, BatchBuffer};
use crate::committer::Pipe;
use crate::error::{DocFailure, Error, Result};
use crate::index_space::IndexSpace;
use crate::keys::{self, DbId};
use crate::options::{Durability, EngineOptions};
use crate::poison::Poison;
use crate::reader::Reader;
use crate::records::{DbMeta, DbState};
use crate::writer::{DocResult, PurgeOutcome, Request, UpdateReq, Writer};

/// How long an async caller waits before retrying a full writer queue.
const QUEUE_FULL_RETRY: Duration = Duration::from_millis(1);

/// Documents per compaction step: the writer is held for one step at a time.
const COMPACT_CHUNK_DOCS: usize = 512;

/// The last design generation given out, process-wide (see
/// [`Database::design_generation`]): no two advances anywhere store the
/// same value, so a cache keyed by it never mistakes an old value for a
/// new one (no ABA), across databases too.
static DESIGN_GENERATION_LAST: AtomicU64 = AtomicU64::new(0);

/// A design generation never given out before (each database handle
/// starts with one, so one opened again never repeats an old value).
pub(crate) fn fresh_design_generation() -> u64 {
    DESIGN_GENERATION_LAST.fetch_add(1, Ordering::Relaxed) + 1
}

/// State shared by a database's handles and its writer.
pub(crate) struct Shared {
    pub name: String,
    pub db: DbId,
    pub meta: DbMeta,
    pub store: Arc<dyn Store>,
    pub poison: Poison,
    pub opts: Arc<EngineOptions>,
    /// The writer thread, if one runs. Requests are enqueued only while
    /// holding this lock, and a writer retires only while holding it with
    /// an empty queue — so no request is ever left in a dead writer's queue.
    pub writer: Mutex<Option<WriterSlot>>,
    /// Batch-mode updates accepted and not yet taken by the writer
    /// (appended only with `writer` locked; see [`crate::batch_buffer`]).
    pub batch: Mutex<BatchBuffer>,
    /// Set when the database is deleted or the engine shuts down.
    pub closed: AtomicBool,
    /// Counters as of the last commit.
    pub state: Mutex<DbState>,
    pub committed: Condvar,
    pub seq_watch: watch::Sender<u64>,
    pub deleted: AtomicBool,
    pub compacting: AtomicBool,
    /// Advanced after every commit that wrote or purged a design document.
    pub design_generation: AtomicU64,
    /// The security object's JSON text as last committed (None: never set).
    pub security: SettingSlot,
    /// The automatic purge settings' JSON text as last committed (None:
    /// never set); kept like the security object.
    pub auto_purge: SettingSlot,
    /// When the changes were made (see [`crate::time_seq`]); updated by the
    /// writer as it writes groups.
    pub time_seq: Mutex<crate::time_seq::TimeSeq>,
    /// Uploads running (see [`crate::blobs`]); garbage collection deletes
    /// blobs only while holding it.
    pub blob_lock: Mutex<crate::blobs::BlobLock>,
    /// The engine's attachment compression settings.
    pub att_compression: crate::atts::SharedCompression,
}

/// Where a database's committed setting kept as JSON text (its security
/// object, its automatic purge settings) is kept for readers.
pub(crate) type SettingSlot = Arc<Mutex<Option<Arc<str>>>>;

/// A running writer: its queue and its thread.
pub(crate) struct WriterSlot {
    pub tx: Sender<Request>,
    pub thread: std::thread::JoinHandle<()>,
    /// The writer itself, locked by its thread while it applies a group
    /// and by a caller applying a lone request (`Shared::try_enqueue`).
    pub core: Arc<Mutex<Writer>>,
}

impl Shared {
    /// Enqueues a request, starting the writer if none runs; batch-mode
    /// updates go to the batch buffer instead. Gives the request back when
    /// the queue (or the buffer) is full.
    fn try_enqueue(self: &Arc<Self>, req: Request) -> Result<Option<Request>> {
        let req = match req {
            Request::Update(u) if u.durability == Durability::Batch => {
                return Ok(self.try_buffer(u)?.map(Request::Update));
            }
            other => other,
        };
        let mut slot = self.lock_open_slot()?;
        // Caller commits: nothing queued and the writer idle, so this
        // request would be a group of its own, written without overlap;
        // apply it here rather than wake the writer thread and be woken.
        if let Some(core) = slot
            .as_ref()
            .filter(|w| self.opts.caller_commits && w.tx.is_empty() && !w.thread.is_finished())
            .map(|w| Arc::clone(&w.core))
        {
            if let Some(mut writer) = core.try_lock() {
                if writer.takes_from_caller(&req) {
                    drop(slot);
                    writer.apply_for_caller(req);
                    return Ok(None);
                }
            }
        }
        self.send_locked(&mut slot, req)
    }

    /// Buffers a batch-mode update (waking the writer when the buffer needs
    /// it), starting the writer if none runs. Gives the update back when
    /// the buffer is full.
    fn try_buffer(self: &Arc<Self>, req: UpdateReq) -> Result<Option<UpdateReq>> {
        let mut slot = self.lock_open_slot()?;
        // A writer runs before anything is buffered: failing to start one
        // leaves nothing behind.
        if slot.is_none() {
            *slot = Some(self.spawn_writer()?);
        }
        let wake = match self.batch.lock().append(req, self.opts.batch_docs_max) {
            Append::Full(back) => return Ok(Some(back)),
            Append::Accepted { wake } => wake,
        };
        if wake {
            // A full queue means a busy writer, which checks the buffer
            // after every group: the wake-up is not needed then.
            self.send_locked(&mut slot, Request::Buffered)?;
        }
        Ok(None)
    }

    /// The writer slot, locked; `Closed` once the database is closed.
    fn lock_open_slot(&self) -> Result<MutexGuard<'_, Option<WriterSlot>>> {
        let slot = self.writer.lock();
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(slot)
    }

    /// Sends to the running writer (starting one if none runs); `slot` is
    /// the locked writer slot. Gives the request back when the queue is full.
    fn send_locked(
        self: &Arc<Self>,
        slot: &mut Option<WriterSlot>,
        mut req: Request,
    ) -> Result<Option<Request>> {
        // At most two rounds: a writer found dead is replaced once.
        for _ in 0..2 {
            // A writer whose thread ended (or that a panic left broken)
            // takes nothing more: replacing it answers what it still had
            // queued with `Closed`.
            if slot.as_ref().is_some_and(|w| {
                w.thread.is_finished() || w.core.try_lock().is_some_and(|c| c.is_broken())
            }) {
                *slot = None;
            }
            let running = match slot.as_ref() {
                Some(w) => w,
                None => slot.insert(self.spawn_writer()?),
            };
            match running.tx.try_send(req) {
                Ok(()) => return Ok(None),
                Err(TrySendError::Full(back)) => return Ok(Some(back)),
                Err(TrySendError::Disconnected(back)) => {
                    req = back;
                    *slot = None;
                }
            }
        }
        Err(Error::Closed)
    }

    fn spawn_writer(self: &Arc<Self>) -> Result<WriterSlot> {
        let (tx, rx) = crossbeam_channel::bounded(self.opts.writer_queue_max);
        let state = self.state.lock().clone();
        let pipe = Pipe::start(self.clone()).map_err(|e| {
            Error::Storage(settee_store::StoreError::Io(format!(
                "cannot start a committer thread: {e}"
            )))
        })?;
        let core = Arc::new(Mutex::new(Writer::new(self.clone(), rx, state, pipe)));
        let thread_core = Arc::clone(&core);
        let thread = std::thread::Builder::new()
            .name(format!("writer-{}", self.db))
            .spawn(move || crate::writer::run(thread_core))
            .map_err(|e| {
                Error::Storage(settee_store::StoreError::Io(format!(
                    "cannot start a writer thread: {e}"
                )))
            })?;
        Ok(WriterSlot { tx, thread, core })
    }

    /// Stops the writer for good (deletion, shutdown): later requests fail
    /// with `Closed`. The writer applies and fsyncs what it holds first.
    pub(crate) fn close(&self) {
        let running = {
            let mut slot = self.writer.lock();
            self.closed.store(true, Ordering::Release);
            slot.take()
        };
        if let Some(w) = running {
            // The writer is alive (it retires only with the slot lock held),
            // so this send is received; join either way.
            drop(w.tx.send(Request::Shutdown));
            drop(w.thread.join());
        }
    }

    /// Called by an idle writer: retires it if its queue and the batch
    /// buffer are empty.
    pub(crate) fn retire_if_idle(&self, rx: &crossbeam_channel::Receiver<Request>) -> bool {
        let mut slot = self.writer.lock();
        if !rx.is_empty() || !self.batch.lock().is_empty() {
            return false;
        }
        // Dropping the slot detaches the thread, which returns right after.
        *slot = None;
        true
    }

    /// Called by the committer after writing a group that wrote or purged
    /// a design document, before answering its callers.
    pub(crate) fn advance_design_generation(&self) {
        let next = fresh_design_generation();
        // Release: whoever reads the new value (Acquire) also sees the
        // write that preceded it.
        self.design_generation.store(next, Ordering::Release);
    }

    /// Publishes a committed state and wakes change waiters.
    pub(crate) fn publish(&self, state: DbState) {
        let seq = state.update_seq;
        *self.state.lock() = state;
        self.committed.notify_all();
        self.seq_watch.send_replace(seq);
    }
}

/// Options of an update call.
#[derive(Debug, Clone, Copy)]
pub struct UpdateOptions {
    /// false: store the given revisions as they are (replication).
    pub new_edits: bool,
    /// Write all documents or none (none if any fails).
    pub all_or_nothing: bool,
    /// None: the database's default.
    pub durability: Option<Durability>,
}

impl Default for UpdateOptions {
    fn default() -> Self {
        UpdateOptions {
            new_edits: true,
            all_or_nothing: false,
            durability: None,
        }
    }
}

/// Size figures of a database, as in CouchDB's `sizes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizes {
    /// Bytes on disk attributable to this database (approximate).
    pub file: u64,
    /// Bytes of live data (approximate).
    pub active: u64,
    /// Bytes of the winning revisions' bodies.
    pub external: u64,
}

/// What `info()` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbInfo {
    pub name: String,
    pub doc_count: u64,
    pub doc_del_count: u64,
    pub update_seq: u64,
    pub purge_seq: u64,
    pub sizes: Sizes,
    pub compact_running: bool,
    /// Microseconds since the epoch when the database was created.
    pub instance_start_time: String,
    pub revs_limit: u64,
    /// A partitioned database.
    pub partitioned: bool,
}

/// A handle on one database; cheap to clone.
#[derive(Clone)]
pub struct Database {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("name", &self.shared.name)
            .finish()
    }
}

/// A reply the writer will send once the group carrying the request commits.
type Pending<T> = oneshot::Receiver<Result<T>>;

/// One writer request of an update call, and its reply (none in batch mode).
type UpdateChunk = (Request, Option<Pending<Vec<DocResult>>>);

fn recv<T>(rx: oneshot::Receiver<Result<T>>) -> Result<T> {
    rx.blocking_recv().map_err(|_| Error::Closed)?
}

async fn recv_async<T>(rx: oneshot::Receiver<Result<T>>) -> Result<T> {
    rx.await.map_err(|_| Error::Closed)?
}

/// The writer request of one chunk of an update call, and where its
/// results come back (nowhere in batch mode). Only the last chunk asks for
/// the fsync a full commit needs: the log is written in order, so that
/// fsync makes every earlier chunk durable too.
fn chunk_request(
    docs: Vec<Doc>,
    opts: &UpdateOptions,
    durability: Durability,
    last: bool,
) -> UpdateChunk {
    let (reply, rx) = if durability == Durability::Batch {
        (None, None)
    } else {
        let (tx, rx) = oneshot::channel();
        (Some(tx), Some(rx))
    };
    let durability = if !last && durability == Durability::Full {
        Durability::Delayed
    } else {
        durability
    };
    let req = Request::Update(UpdateReq {
        docs,
        new_edits: opts.new_edits,
        all_or_nothing: opts.all_or_nothing,
        durability,
        reply,
    });
    (req, rx)
}

/// The results of an update call's chunks, in order. The last chunk is
/// answered after every earlier one, so waiting for it first parks the
/// caller once per call instead of once per chunk. (Rendering each chunk's
/// results while waiting for the next cost more in wake-ups than it saved:
/// four pairs, 438 vs 450 req/s.)
async fn gather_async(
    mut pending: Vec<oneshot::Receiver<Result<Vec<DocResult>>>>,
) -> Result<Vec<DocResult>> {
    let last = match pending.pop() {
        Some(rx) => Some(recv_async(rx).await?),
        None => None,
    };
    let mut results = Vec::new();
    for rx in pending {
        results.append(&mut recv_async(rx).await?);
    }
    results.extend(last.into_iter().flatten());
    Ok(results)
}

impl Database {
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    fn check(&self) -> Result<()> {
        self.shared.poison.check()?;
        if self.shared.deleted.load(Ordering::Acquire) {
            return Err(Error::NotFound("Database does not exist."));
        }
        Ok(())
    }

    /// Queues a request for the writer, waiting while the queue is full.
    fn send(&self, mut req: Request) -> Result<()> {
        self.check()?;
        while let Some(back) = self.shared.try_enqueue(req)? {
            req = back;
            std::thread::sleep(QUEUE_FULL_RETRY);
        }
        Ok(())
    }

    /// Queues a request for the writer; while the queue is full it waits
    /// without blocking the async runtime's thread.
    async fn send_async(&self, mut req: Request) -> Result<()> {
        self.check()?;
        while let Some(back) = self.shared.try_enqueue(req)? {
            req = back;
            tokio::time::sleep(QUEUE_FULL_RETRY).await;
        }
        Ok(())
    }

    /// Where the indexes built from this database keep their data.
    /// The database's attachment bodies.
    pub fn blobs(&self) -> crate::blobs::Blobs {
        crate::blobs::Blobs::new(Arc::clone(&self.shared))
    }

    pub fn index_space(&self) -> IndexSpace {
        IndexSpace::new(Arc::clone(&self.shared))
    }

    /// A snapshot reader: everything it reads is one consistent state.
    pub fn reader(&self) -> Result<Reader> {
        self.check()?;
        Ok(Reader {
            db: self.shared.db,
            snap: self.shared.store.snapshot(),
            poison: self.shared.poison.clone(),
        })
    }

    /// A reader of the latest state without a storage snapshot: only for
    /// one read whose answer stands alone — [`Reader::get`] of a document's
    /// winning revision (its body is stored in the same record). Several
    /// reads through it may see different states.
    pub fn latest_reader(&self) -> Result<Reader> {
        self.check()?;
        Ok(Reader {
            db: self.shared.db,
            snap: self.shared.store.latest(),
            poison: self.shared.poison.clone(),
        })
    }

    /// The writer requests of one update call: large calls (not
    /// all-or-nothing, not batch mode) are split into chunks of
    /// `update_chunk_docs`, so the writer computes chunk n+1 while the
    /// committer writes chunk n. Only the last chunk asks for the fsync a
    /// full commit needs: the log is written in order, so that fsync makes
    /// every earlier chunk durable too, and the caller is answered only
    /// when every chunk is done.
    fn update_requests(&self, mut docs: Vec<Doc>, opts: UpdateOptions) -> Result<Vec<UpdateChunk>> {
        self.check_update_size(docs.len())?;
        self.store_attachments(&mut docs, opts.new_edits)?;
        let durability = self.durability(&opts);
        let chunk = self.chunk_docs();
        let mut chunks = Vec::new();
        if opts.all_or_nothing || durability == Durability::Batch || docs.len() <= chunk {
            chunks.push(docs);
        } else {
            // Each document moved once (splitting the tail off again and
            // again moved the rest of the request every time).
            let mut rest = docs.into_iter();
            while rest.len() > 0 {
                chunks.push(rest.by_ref().take(chunk).collect());
            }
        }
        let last = chunks.len() - 1;
        let requests = chunks
            .into_iter()
            .enumerate()
            .map(|(i, docs)| chunk_request(docs, &opts, durability, i == last))
            .collect();
        Ok(requests)
    }

    /// The durability an update call asks for (the database's default
    /// unless it chooses).
    fn durability(&self, opts: &UpdateOptions) -> Durability {
        opts.durability
            .unwrap_or(self.shared.opts.default_durability)
    }

    /// Applies documents; one result per document, in input order. In batch
    /// mode the call returns at once with an empty vector.
    pub fn update(&self, docs: Vec<Doc>, opts: UpdateOptions) -> Result<Vec<DocResult>> {
        let mut pending = Vec::new();
        for (req, rx) in self.update_requests(docs, opts)? {
            self.send(req)?;
            pending.extend(rx);
        }
        // Chunks are answered in order: once the last is, so is every
        // other, so waiting for it first parks this thread once per call
        // instead of once per chunk.
        let last = pending.pop().map(recv).transpose()?;
        let mut results = Vec::new();
        for rx in pending {
            results.append(&mut recv(rx)?);
        }
        results.extend(last.into_iter().flatten());
        Ok(results)
    }

    /// Async form of [`Database::update`].
    pub async fn update_async(
        &self,
        docs: Vec<Doc>,
        opts: UpdateOptions,
    ) -> Result<Vec<DocResult>> {
        let docs = self.store_attachments_async(docs, opts.new_edits).await?;
        let mut pending = Vec::new();
        for (req, rx) in self.update_requests(docs, opts)? {
            self.send_async(req).await?;
            pending.extend(rx);
        }
        gather_async(pending).await
    }

    /// Refuses an update call of more than `update_docs_max` documents.
    fn check_update_size(&self, docs: usize) -> Result<()> {
        if docs > self.shared.opts.update_docs_max {
            return Err(Error::BadRequest(format!(
                "too many documents in one request (limit {})",
                self.shared.opts.update_docs_max
            )));
        }
        Ok(())
    }

    /// Documents per chunk of a large update call: the writer and the
    /// committer work on successive chunks at once.
    pub fn chunk_docs(&self) -> usize {
        self.shared.opts.update_chunk_docs.max(1)
    }

    /// [`Database::update_async`] for documents produced chunk by chunk:
    /// `next` yields up to [`Database::chunk_docs`] documents and whether
    /// they are the last, or `None` when there are no more. Each chunk goes
    /// to the writer as soon as it is produced, so producing the next one
    /// overlaps writing this one. The call is as durable as `opts` asks
    /// once it returns `Ok` (only the last chunk waits for an fsync, which
    /// covers the others). An error from `next` ends the call, but chunks
    /// already handed over are written: producers must fail, if at all,
    /// before their first chunk. All-or-nothing and batch-mode calls gather
    /// every chunk first and go through [`Database::update_async`].
    pub async fn update_chunks_async<E: From<Error>>(
        &self,
        opts: UpdateOptions,
        mut next: impl FnMut() -> Option<std::result::Result<(Vec<Doc>, bool), E>>,
    ) -> std::result::Result<Vec<DocResult>, E> {
        let durability = self.durability(&opts);
        if opts.all_or_nothing || durability == Durability::Batch {
            let mut docs = Vec::new();
            while let Some(chunk) = next() {
                docs.extend(chunk?.0);
            }
            return Ok(self.update_async(docs, opts).await?);
        }
        let mut pending = Vec::new();
        let (mut count, mut ended) = (0usize, false);
        while let Some(chunk) = next() {
            let (docs, last) = chunk?;
            count += docs.len();
            self.check_update_size(count)?;
            let docs = self.store_attachments_async(docs, opts.new_edits).await?;
            let (req, rx) = chunk_request(docs, &opts, durability, last);
            self.send_async(req).await?;
            pending.extend(rx);
            if last {
                ended = true;
                break;
            }
        }
        if !ended && durability == Durability::Full {
            // The producer stopped without a last chunk: the fsync its
            // last chunk would have asked for.
            let (tx, rx) = oneshot::channel();
            self.send_async(Request::Flush(tx)).await?;
            recv_async(rx).await?;
        }
        Ok(gather_async(pending).await?)
    }

    /// Writes one document; a refused document is an error.
    pub fn put(&self, doc: Doc) -> Result<Rev> {
        let mut results = self.update(vec![doc], UpdateOptions::default())?;
        match results.pop() {
            Some(Ok(rev)) => Ok(rev),
            Some(Err(f)) => Err(Error::Doc(f)),
            None => Err(Error::Closed),
        }
    }

    fn local_request(
        &self,
        id: &str,
        rev: Option<String>,
        body: Option<Body>,
        durability: Option<Durability>,
    ) -> (Request, Pending<std::result::Result<String, DocFailure>>) {
        let (tx, rx) = oneshot::channel();
        let durability = durability.unwrap_or(self.shared.opts.default_durability);
        // Local documents are never buffered: batch mode means delayed here.
        let durability = if durability == Durability::Batch {
            Durability::Delayed
        } else {
            durability
        };
        let req = Request::Local {
            id: id.to_string(),
            rev,
            body,
            durability,
            reply: tx,
        };
        (req, rx)
    }

    /// Writes (`body` Some) or deletes a `_local` document; returns its new
    /// rev. As in CouchDB 3 there is no revision check: `rev` (`0-N`, or
    /// None) only numbers the new revision, `0-(N+1)`; a delete answers
    /// `0-0`, whether the document existed or not. A malformed `rev` is
    /// refused (`DocFailure::Bad`, "Invalid rev format").
    pub fn put_local(
        &self,
        id: &str,
        rev: Option<String>,
        body: Option<Body>,
        durability: Option<Durability>,
    ) -> Result<std::result::Result<String, DocFailure>> {
        let (req, rx) = self.local_request(id, rev, body, durability);
        self.send(req)?;
        recv(rx)
    }

    pub async fn put_local_async(
        &self,
        id: &str,
        rev: Option<String>,
        body: Option<Body>,
        durability: Option<Durability>,
    ) -> Result<std::result::Result<String, DocFailure>> {
        let (req, rx) = self.local_request(id, rev, body, durability);
        self.send_async(req).await?;
        recv_async(rx).await
    }

    fn flush_request() -> (Request, Pending<()>) {
        let (tx, rx) = oneshot::channel();
        (Request::Flush(tx), rx)
    }

    /// Applies buffered batch-mode updates and makes every acknowledged
    /// update durable (`_ensure_full_commit`).
    pub fn ensure_full_commit(&self) -> Result<()> {
        let (req, rx) = Self::flush_request();
        self.send(req)?;
        recv(rx)
    }

    pub async fn ensure_full_commit_async(&self) -> Result<()> {
        let (req, rx) = Self::flush_request();
        self.send_async(req).await?;
        recv_async(rx).await
    }

    fn revs_limit_request(limit: u64) -> Result<(Request, Pending<()>)> {
        if limit == 0 {
            return Err(Error::BadRequest(
                "revs_limit must be a positive integer".into(),
            ));
        }
        let (tx, rx) = oneshot::channel();
        Ok((Request::SetRevsLimit(limit, tx), rx))
    }

    /// Sets how many revisions of each document's history are kept.
    pub fn set_revs_limit(&self, limit: u64) -> Result<()> {
        let (req, rx) = Self::revs_limit_request(limit)?;
        self.send(req)?;
        recv(rx)
    }

    pub async fn set_revs_limit_async(&self, limit: u64) -> Result<()> {
        let (req, rx) = Self::revs_limit_request(limit)?;
        self.send_async(req).await?;
        recv_async(rx).await
    }

    pub fn revs_limit(&self) -> u64 {
        self.shared.state.lock().revs_limit
    }

    /// Sets the security object (JSON text the caller has validated).
    /// It advances `update_seq`, as in CouchDB; readers see it once it is
    /// committed.
    pub fn set_security(&self, json: &str) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.send(Request::SetSecurity(Arc::from(json), tx))?;
        recv(rx)
    }

    pub async fn set_security_async(&self, json: &str) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.send_async(Request::SetSecurity(Arc::from(json), tx))
            .await?;
        recv_async(rx).await
    }

    /// The security object's JSON text as last committed; None when it was
    /// never set.
    pub fn security(&self) -> Option<Arc<str>> {
        self.shared.security.lock().clone()
    }

    /// Sets the automatic purge settings (JSON text the caller has
    /// validated; `PUT /db/_auto_purge`). Does not change `update_seq`.
    pub async fn set_auto_purge_async(&self, json: &str) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.send_async(Request::SetAutoPurge(Arc::from(json), tx))
            .await?;
        recv_async(rx).await
    }

    /// Blocking [`Database::set_auto_purge_async`].
    pub fn set_auto_purge(&self, json: &str) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.send(Request::SetAutoPurge(Arc::from(json), tx))?;
        recv(rx)
    }

    /// The automatic purge settings' JSON text as last committed; None when
    /// they were never set.
    pub fn auto_purge(&self) -> Option<Arc<str>> {
        self.shared.auto_purge.lock().clone()
    }

    /// The highest sequence every change up to which was made at or before
    /// `unix_secs` (see [`crate::time_seq`]); None when the database has
    /// no record that old. Never names a change made later.
    pub fn seq_made_by(&self, unix_secs: u64) -> Option<u64> {
        self.shared.time_seq.lock().seq_at_or_before(unix_secs)
    }

    fn purged_infos_limit_request(limit: u64) -> Result<(Request, Pending<()>)> {
        if limit == 0 {
            return Err(Error::BadRequest(
                "purged_infos_limit must be a positive integer".into(),
            ));
        }
        let (tx, rx) = oneshot::channel();
        Ok((Request::SetPurgedInfosLimit(limit, tx), rx))
    }

    /// Sets how many purge requests the purge history keeps (the newest;
    /// CouchDB's `_purged_infos_limit`, 1000 by default).
    pub fn set_purged_infos_limit(&self, limit: u64) -> Result<()> {
        let (req, rx) = Self::purged_infos_limit_request(limit)?;
        self.send(req)?;
        recv(rx)
    }

    pub async fn set_purged_infos_limit_async(&self, limit: u64) -> Result<()> {
        let (req, rx) = Self::purged_infos_limit_request(limit)?;
        self.send_async(req).await?;
        recv_async(rx).await
    }

    pub fn purged_infos_limit(&self) -> u64 {
        self.shared.state.lock().purged_infos_limit
    }

    /// Removes revisions entirely (CouchDB `_purge`).
    pub fn purge(&self, reqs: Vec<(String, Vec<Rev>)>) -> Result<PurgeOutcome> {
        let (tx, rx) = oneshot::channel();
        self.send(Request::Purge(reqs, tx))?;
        recv(rx)
    }

    pub async fn purge_async(&self, reqs: Vec<(String, Vec<Rev>)>) -> Result<PurgeOutcome> {
        let (tx, rx) = oneshot::channel();
        self.send_async(Request::Purge(reqs, tx)).await?;
        recv_async(rx).await
    }

    /// Current counters and sizes.
    pub fn info(&self) -> Result<DbInfo> {
        self.check()?;
        let s = self.shared.state.lock().clone();
        let (lo, hi) = keys::db_range(self.shared.db);
        let store = &self.shared.store;
        let file: u64 = Keyspace::ALL
            .iter()
            .map(|ks| store.approximate_size(*ks, &lo, &hi))
            .sum();
        let active = store.approximate_size(Keyspace::Docs, &lo, &hi) + s.external_bytes;
        Ok(DbInfo {
            name: self.shared.name.clone(),
            doc_count: s.doc_count,
            doc_del_count: s.doc_del_count,
            update_seq: s.update_seq,
            purge_seq: s.purge_seq,
            sizes: Sizes {
                file: file.max(active),
                active,
                external: s.external_bytes,
            },
            compact_running: self.shared.compacting.load(Ordering::Acquire),
            instance_start_time: self.shared.meta.created_us.to_string(),
            revs_limit: s.revs_limit,
            partitioned: self.shared.meta.partitioned,
        })
    }

    /// Whether this is a partitioned database.
    pub fn partitioned(&self) -> bool {
        self.shared.meta.partitioned
    }

    /// When the database was created (microseconds since the epoch): it
    /// tells a database from an earlier one of the same name.
    pub fn created_us(&self) -> u64 {
        self.shared.meta.created_us
    }

    /// The design generation: a number that changes (to a value never seen
    /// before in this process) whenever a write or purge of a `_design/`
    /// document of this database has been written, before that write is
    /// acknowledged. One atomic load. Whoever caches something derived
    /// from the design documents reads this first, then reads the
    /// documents, and keeps the value with what it derived: while the
    /// database still reports that value, the cache is current (once a
    /// design-document write has been answered, the generation has moved
    /// on). Values are unique in the process (a database opened again
    /// starts from a new one), so they tell nothing about a database other
    /// than this one (a database deleted and created again is another one:
    /// compare [`Database::created_us`] too).
    pub fn design_generation(&self) -> u64 {
        self.shared.design_generation.load(Ordering::Acquire)
    }

    /// The latest committed update sequence.
    pub fn update_seq(&self) -> u64 {
        self.shared.state.lock().update_seq
    }

    /// The latest committed update and purge sequences.
    pub fn seqs(&self) -> (u64, u64) {
        let s = self.shared.state.lock();
        (s.update_seq, s.purge_seq)
    }

    /// A watch on the committed update sequence (for longpoll/continuous feeds).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.seq_watch.subscribe()
    }

    /// Blocks until the update sequence exceeds `since` or `timeout` passes;
    /// returns the current update sequence.
    pub fn wait_for_change(&self, since: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.state.lock();
        while state.update_seq <= since && !self.shared.deleted.load(Ordering::Acquire) {
            if self
                .shared
                .committed
                .wait_until(&mut state, deadline)
                .timed_out()
            {
                break;
            }
        }
        state.update_seq
    }

    /// Starts compaction in the background: drops the bodies of non-leaf
    /// revisions in small steps (the writer is held one step at a time) and
    /// then asks the storage engine to reclaim space. Returns false if a
    /// compaction is already running.
    pub fn compact(&self) -> Result<bool> {
        self.check()?;
        if self.shared.compacting.swap(true, Ordering::AcqRel) {
            return Ok(false);
        }
        let db = self.clone();
        std::thread::Builder::new()
            .name(format!("compact-{}", self.shared.db))
            .spawn(move || {
                if let Err(e) = db.compact_now() {
                    tracing::error!(db = %db.name(), error = %e, "compaction failed");
                }
                db.shared.compacting.store(false, Ordering::Release);
            })
            .map_err(|e| Error::BadRequest(format!("cannot start compaction: {e}")))?;
        Ok(true)
    }

    /// Compacts in the calling thread.
    pub fn compact_now(&self) -> Result<()> {
        let reader = self.reader()?;
        let mut chunk = Vec::with_capacity(COMPACT_CHUNK_DOCS);
        let mut failure = None;
        reader.scan_records(&mut |id, rec| {
            if !rec.tree.non_leaf_bodies().is_empty() {
                chunk.push(id.to_string());
            }
            if chunk.len() >= COMPACT_CHUNK_DOCS {
                if let Err(e) = self.compact_chunk(std::mem::take(&mut chunk)) {
                    failure = Some(e);
                    return false;
                }
            }
            true
        })?;
        // No snapshot may outlive this point: storage compaction keeps
        // whatever a live snapshot can still see (deleted attachment
        // chunks included).
        drop(reader);
        if let Some(e) = failure {
            return Err(e);
        }
        if !chunk.is_empty() {
            self.compact_chunk(chunk)?;
        }
        self.collect_blobs()?;
        // A reader that took its snapshot before the deletions above (a
        // `GET /db` polling for the end of this compaction) would keep the
        // deleted chunks alive through the storage compaction: wait for
        // such readers, a while. Those still reading after it only delay
        // the reclaiming to the next compaction.
        self.shared
            .store
            .await_older_snapshots(Duration::from_secs(10));
        let (lo, hi) = keys::db_range(self.shared.db);
        for ks in Keyspace::ALL {
            self.shared
                .poison
                .guard(self.shared.store.compact_range(ks, &lo, &hi))?;
        }
        Ok(())
    }

    /// Deletes the attachment bodies no stored revision names (see
    /// [`crate::blobs`]); part of compaction.
    pub fn collect_blobs(&self) -> Result<crate::blobs::Collected> {
        let reader = self.reader()?;
        let mut named = std::collections::HashSet::new();
        reader.scan_records(&mut |_, rec| {
            for (_, body) in &rec.inline {
                crate::blobs::named_by(body, &mut named);
            }
            true
        })?;
        reader.scan_stored_bodies(&mut |body| crate::blobs::named_by(body, &mut named))?;
        drop(reader);
        crate::blobs::collect_garbage(
            &self.shared,
            &named,
            Duration::from_millis(self.shared.opts.blob_grace_ms),
        )
    }

    fn compact_chunk(&self, ids: Vec<String>) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.send(Request::Compact(ids, tx))?;
        recv(rx)
    }

    /// Whether a writer thread runs now (writers start on the first write
    /// and retire after `writer_idle_ms` without work).
    pub fn writer_running(&self) -> bool {
        self.shared.writer.lock().is_some()
    }

    pub fn is_compacting(&self) -> bool {
        self.shared.compacting.load(Ordering::Acquire)
    }
}
