//! The storage seam: a small trait over an ordered, transactional key-value
//! engine, and its implementations.
//!
//! - [`rocks::RocksStore`]: the embedded engine (RocksDB; see docs/adr/0001).
//! - [`mem::MemStore`]: in memory, with a separate "durable image" so tests can
//!   simulate a crash that loses unsynced writes.
//! - [`faulty::FaultyStore`]: wraps another store and fails writes or syncs
//!   on command, for poisoning tests.
//!
//! Contract of every implementation (the layers above rely on exactly this):
//! - [`Store::write`] applies a [`Batch`] atomically: readers and a crash see
//!   all of it or none of it. With `sync = true` the batch, and every batch
//!   written before it, is durable when the call returns.
//!   With `sync = false` the batch must still survive a crash of the process
//!   (it has been handed to the OS); only an OS crash or power loss may lose it.
//! - [`Store::sync`] makes every batch written so far durable.
//! - A [`Snapshot`] sees the store as of its creation, whatever is written
//!   later, and is re-entrant: its `get` may be called from inside its own
//!   `scan` visitor (`_all_docs` with `include_docs` does).
//! - Keys order by unsigned bytes; scans honour that order both ways.
//! - An error is final for the operation; the store never retries an fsync.

pub mod faulty;
pub mod mem;
pub mod rocks;

use std::sync::Arc;

use thiserror::Error;

/// The keyspaces (RocksDB column families) the document layer uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Keyspace {
    /// Catalog and per-database counters.
    Meta,
    /// By-id index: document id → revision tree and doc summary.
    Docs,
    /// By-sequence index: update seq → change summary.
    Seqs,
    /// Revision bodies: (doc id, rev) → JSON body.
    Bodies,
    /// `_local` documents.
    Local,
    /// Purge history: purge seq → purged (id, revs).
    Purges,
}

impl Keyspace {
    pub const ALL: [Keyspace; 6] = [
        Keyspace::Meta,
        Keyspace::Docs,
        Keyspace::Seqs,
        Keyspace::Bodies,
        Keyspace::Local,
        Keyspace::Purges,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Keyspace::Meta => "meta",
            Keyspace::Docs => "docs",
            Keyspace::Seqs => "seqs",
            Keyspace::Bodies => "bodies",
            Keyspace::Local => "local",
            Keyspace::Purges => "purges",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("storage I/O error: {0}")]
    Io(String),
    #[error("storage corruption: {0}")]
    Corruption(String),
    #[error("injected failure: {0}")]
    Injected(&'static str),
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// One operation of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Put(Keyspace, Vec<u8>, Vec<u8>),
    Delete(Keyspace, Vec<u8>),
    /// Deletes keys in `[from, to)`.
    DeleteRange(Keyspace, Vec<u8>, Vec<u8>),
}

/// An atomic group of writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    pub ops: Vec<Op>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }
    pub fn put(&mut self, ks: Keyspace, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push(Op::Put(ks, key, value));
    }
    pub fn delete(&mut self, ks: Keyspace, key: Vec<u8>) {
        self.ops.push(Op::Delete(ks, key));
    }
    pub fn delete_range(&mut self, ks: Keyspace, from: Vec<u8>, to: Vec<u8>) {
        self.ops.push(Op::DeleteRange(ks, from, to));
    }
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    pub fn len(&self) -> usize {
        self.ops.len()
    }
}

/// Visitor for scans: return false to stop.
pub type ScanFn<'a> = dyn FnMut(&[u8], &[u8]) -> bool + 'a;

/// A consistent read-only view of the store.
pub trait Snapshot: Send + Sync {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Visits keys in `[from, to)` in ascending order, or descending when
    /// `reverse` is set, until the visitor returns false.
    fn scan(
        &self,
        ks: Keyspace,
        from: &[u8],
        to: &[u8],
        reverse: bool,
        visit: &mut ScanFn<'_>,
    ) -> Result<()>;
}

/// An ordered, transactional key-value engine.
pub trait Store: Send + Sync {
    fn write(&self, batch: Batch, sync: bool) -> Result<()>;
    fn sync(&self) -> Result<()>;
    /// Reads the latest committed value.
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Reads several keys of one keyspace (the writer's batched lookups).
    fn multi_get(&self, ks: Keyspace, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get(ks, k)).collect()
    }
    fn snapshot(&self) -> Arc<dyn Snapshot>;
    /// A view of the latest state without taking a snapshot: each `get`,
    /// and each `scan` on its own, is consistent, but two reads may see
    /// different states. For callers whose answer is one read (a document's
    /// winning revision); cheaper than [`Store::snapshot`] where snapshots
    /// cost something.
    fn latest(&self) -> Arc<dyn Snapshot> {
        self.snapshot()
    }
    /// Asks the engine to reclaim space in `[from, to)`; may run in the background.
    fn compact_range(&self, ks: Keyspace, from: &[u8], to: &[u8]) -> Result<()>;
    /// Asks the engine to move recent writes out of memory into files, in
    /// the background. Only a performance hint: after a range deletion the
    /// in-memory table's bloom filters stop working (every lookup walks it)
    /// until it is flushed. Durability is unaffected either way.
    fn flush_memory(&self) -> Result<()> {
        Ok(())
    }
    /// Approximate bytes on disk used by `[from, to)`.
    fn approximate_size(&self, ks: Keyspace, from: &[u8], to: &[u8]) -> u64;
    /// Bytes on disk used by the whole store.
    fn disk_size(&self) -> u64;
}
