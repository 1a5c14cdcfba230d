//! Engine settings, with their bounds.

use settee_store::rocks::RocksOptions;

/// How durable an update must be before the call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Returns after the batch holding the update is fsynced: survives a
    /// process crash, an OS crash and power loss.
    Full,
    /// Returns after the update is applied and handed to the OS: survives a
    /// process crash at once; survives an OS crash or power loss after the
    /// next flush, at most `delayed_flush_ms` later or at `ensure_full_commit`.
    Delayed,
    /// Returns at once (HTTP answers 202). The update is applied, with an
    /// fsync, within `batch_flush_ms` or when `batch_docs_max` documents are
    /// buffered; a crash before that loses it, and failures are only logged.
    Batch,
}

/// Settings of an [`crate::Engine`].
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Durability of updates that do not choose one (CouchDB's `delayed_commits`).
    pub default_durability: Durability,
    /// Largest document body accepted (CouchDB's `max_document_size`).
    pub max_document_bytes: usize,
    /// Delayed-commit updates are fsynced at most this long after they return.
    pub delayed_flush_ms: u64,
    /// Batch-mode updates are applied at most this long after they return.
    pub batch_flush_ms: u64,
    /// Batch-mode updates are applied as soon as this many are buffered.
    pub batch_docs_max: usize,
    /// Requests waiting for a database's writer; callers block (or wait) beyond it.
    pub writer_queue_max: usize,
    /// A database's writer thread retires after this long without work
    /// (it restarts with the next write), so idle databases hold no thread.
    pub writer_idle_ms: u64,
    /// Documents the writer gathers into one group commit (a request is
    /// never split): small groups let the writer and the committer overlap.
    pub group_docs_max: usize,
    /// A lone update (nothing queued, the writer idle) is applied, written
    /// and fsynced on the caller's own thread instead of being handed to
    /// the writer thread and answered back (two thread wake-ups saved per
    /// request); requests that meet a busy writer queue for group commit
    /// as before. See `crate::writer`, "Caller commits".
    pub caller_commits: bool,
    /// Update calls larger than this are split into chunks of this many
    /// documents (see `Database::update`), unless all-or-nothing.
    pub update_chunk_docs: usize,
    /// Documents accepted in one update request.
    pub update_docs_max: usize,
    /// Memory for the latest by-id records (a document's revision tree and
    /// winning body), read by `GET` of a document; 0 turns the cache off.
    pub doc_cache_bytes: u64,
    /// Compaction keeps an attachment body that no revision names for
    /// this long after it was stored (the document write naming it may
    /// still be on its way; see `crate::blobs`).
    pub blob_grace_ms: u64,
    pub rocks: RocksOptions,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            default_durability: Durability::Full,
            max_document_bytes: 8_000_000,
            delayed_flush_ms: 1000,
            batch_flush_ms: 1000,
            batch_docs_max: 1000,
            writer_queue_max: 4096,
            writer_idle_ms: 30_000,
            group_docs_max: 128,
            caller_commits: true,
            update_chunk_docs: 128,
            update_docs_max: 100_000,
            doc_cache_bytes: 64 << 20,
            blob_grace_ms: 600_000,
            rocks: RocksOptions::default(),
        }
    }
}
