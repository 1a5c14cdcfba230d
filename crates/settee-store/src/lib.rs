//! The storage seam: a small trait over an ordered, transactional key-value
//! engine, and its implementations.
//!
//! - [`rocks::RocksStore`]: the embedded engine (RocksDB; see docs/adr/0001),
//!   which can pre-format the first two write-ahead logs of each process in
//!   the background (`preformat`).
//! - [`mem::MemStore`]: in memory, with a separate "durable image" so tests can
//!   simulate a crash that loses unsynced writes.
//! - [`faulty::FaultyStore`]: wraps another store and fails writes or syncs
//!   on command, for poisoning tests.
//! - `leftovers`: removes, at open, the blob files a crash left unfinished
//!   (RocksDB keeps them).
//! - [`cache::CachedStore`]: wraps another store and answers reads of one
//!   keyspace's latest values from memory, dropping what each write changes.
//!
//! Contract of every implementation (the layers above rely on exactly this):
//! - [`Store::write`] applies a [`Batch`] atomically: readers and a crash see
//!   all of it or none of it. With `sync = true` the batch, and every batch
//!   written before it, is durable when the call returns.
//!   With `sync = false` the batch must still survive a crash of the process
//!   (it has been handed to the OS); only an OS crash or power loss may lose it.
//! - [`Store::write_prepared`] is [`Store::write`] with the batch already
//!   encoded by [`Store::prepare`] on another thread (RocksDB: its own write
//!   batch format, so the committing thread does not build it op by op).
//! - [`Store::sync`] makes every batch written so far durable.
//! - A [`Snapshot`] sees the store as of its creation, whatever is written
//!   later, and is re-entrant: its `get` may be called from inside its own
//!   `scan` visitor (`_all_docs` with `include_docs` does).
//! - Keys order by unsigned bytes; scans honour that order both ways.
//! - An error is final for the operation; the store never retries an fsync.

pub mod cache;
pub mod faulty;
mod leftovers;
pub mod mem;
mod preformat;
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
    /// Secondary indexes (views, Mango): rows, the keys each document
    /// emitted, and each index's state (see `settee-views`).
    Views,
    /// Attachment bodies: content-addressed blobs in chunks, and the
    /// header of each blob by digest (see `settee-db`'s `blobs`).
    Blobs,
}

impl Keyspace {
    pub const ALL: [Keyspace; 8] = [
        Keyspace::Meta,
        Keyspace::Docs,
        Keyspace::Seqs,
        Keyspace::Bodies,
        Keyspace::Local,
        Keyspace::Purges,
        Keyspace::Views,
        Keyspace::Blobs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Keyspace::Meta => "meta",
            Keyspace::Docs => "docs",
            Keyspace::Seqs => "seqs",
            Keyspace::Bodies => "bodies",
            Keyspace::Local => "local",
            Keyspace::Purges => "purges",
            Keyspace::Views => "views",
            Keyspace::Blobs => "blobs",
        }
    }

    /// The keyspace's position in [`Keyspace::ALL`].
    pub fn index(self) -> usize {
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

/// One operation of a batch, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op<'a> {
    Put(Keyspace, &'a [u8], &'a [u8]),
    Delete(Keyspace, &'a [u8]),
    /// Deletes keys in `[from, to)`.
    DeleteRange(Keyspace, &'a [u8], &'a [u8]),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Put,
    Delete,
    DeleteRange,
}

/// Where one operation's bytes are in [`Batch::buf`]: its key (or range
/// start) ends at `key_end`, its value (or range end) at `end`; it starts
/// where the previous operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    kind: Kind,
    ks: Keyspace,
    key_end: usize,
    end: usize,
}

/// An atomic group of writes.
///
/// Keys and values live back to back in one buffer, so a batch of
/// thousands of operations is two allocations, and a caller can encode a
/// key or value straight into it ([`Batch::put_with`]) instead of building
/// a `Vec` for each and handing it over (which also made another thread
/// free every one of them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    buf: Vec<u8>,
    entries: Vec<Entry>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    /// An empty batch with room for `ops` operations of `bytes` key and
    /// value bytes in all.
    pub fn with_capacity(ops: usize, bytes: usize) -> Batch {
        Batch {
            buf: Vec::with_capacity(bytes),
            entries: Vec::with_capacity(ops),
        }
    }

    fn push(&mut self, kind: Kind, ks: Keyspace, key: &[u8], value: &[u8]) {
        self.buf.extend_from_slice(key);
        let key_end = self.buf.len();
        self.buf.extend_from_slice(value);
        self.entries.push(Entry {
            kind,
            ks,
            key_end,
            end: self.buf.len(),
        });
    }

    pub fn put(&mut self, ks: Keyspace, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.push(Kind::Put, ks, key.as_ref(), value.as_ref());
    }

    /// Puts a key and value that `key` and `value` append to the buffer
    /// they are given (which holds other operations' bytes before theirs:
    /// they must only append).
    pub fn put_with(
        &mut self,
        ks: Keyspace,
        key: impl FnOnce(&mut Vec<u8>),
        value: impl FnOnce(&mut Vec<u8>),
    ) {
        key(&mut self.buf);
        let key_end = self.buf.len();
        value(&mut self.buf);
        self.entries.push(Entry {
            kind: Kind::Put,
            ks,
            key_end,
            end: self.buf.len(),
        });
    }

    pub fn delete(&mut self, ks: Keyspace, key: impl AsRef<[u8]>) {
        self.push(Kind::Delete, ks, key.as_ref(), &[]);
    }

    pub fn delete_range(&mut self, ks: Keyspace, from: impl AsRef<[u8]>, to: impl AsRef<[u8]>) {
        self.push(Kind::DeleteRange, ks, from.as_ref(), to.as_ref());
    }

    /// Appends `other`'s operations after this batch's.
    pub fn append(&mut self, other: &Batch) {
        let base = self.buf.len();
        self.buf.extend_from_slice(&other.buf);
        self.entries.extend(other.entries.iter().map(|e| Entry {
            key_end: e.key_end + base,
            end: e.end + base,
            ..*e
        }));
    }

    fn op_at(&self, start: usize, e: &Entry) -> Op<'_> {
        let key = &self.buf[start..e.key_end];
        let value = &self.buf[e.key_end..e.end];
        match e.kind {
            Kind::Put => Op::Put(e.ks, key, value),
            Kind::Delete => Op::Delete(e.ks, key),
            Kind::DeleteRange => Op::DeleteRange(e.ks, key, value),
        }
    }

    /// The operations, in order.
    pub fn ops(&self) -> impl Iterator<Item = Op<'_>> + '_ {
        let mut start = 0;
        self.entries.iter().map(move |e| {
            let op = self.op_at(start, e);
            start = e.end;
            op
        })
    }

    /// Operation `i` (in the order they were added).
    pub fn get(&self, i: usize) -> Option<Op<'_>> {
        let e = self.entries.get(i)?;
        let start = match i {
            0 => 0,
            _ => self.entries[i - 1].end,
        };
        Some(self.op_at(start, e))
    }

    /// Drops every operation after the first `len`.
    pub fn truncate(&mut self, len: usize) {
        self.entries.truncate(len);
        self.buf.truncate(self.entries.last().map_or(0, |e| e.end));
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Key and value bytes of all operations.
    pub fn data_bytes(&self) -> usize {
        self.buf.len()
    }
}

/// A batch already encoded in its store's own write format (by
/// [`Store::prepare`]), so that the thread that commits it only hands the
/// bytes over. Only the store that made it can read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The encoding, including any header the store reserves.
    bytes: Vec<u8>,
    /// Operations encoded.
    count: u32,
    /// Bytes of the header at the front of `bytes`.
    header: usize,
}

impl Prepared {
    /// Appends `other`'s operations after this one's (for a batch merged
    /// with [`Batch::append`]).
    pub fn append(&mut self, other: &Prepared) {
        self.bytes.extend_from_slice(&other.bytes[other.header..]);
        self.count += other.count;
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
    fn write(&self, batch: &Batch, sync: bool) -> Result<()>;
    /// Encodes `batch` in the store's write format ahead of its write, on
    /// the caller's thread (the writer prepares a group while the committer
    /// writes the previous one). `None`: the store has no faster path.
    fn prepare(&self, batch: &Batch) -> Option<Prepared> {
        let _ = batch;
        None
    }
    /// [`Store::write`] of `batch`, given what [`Store::prepare`] made of
    /// it (batches merged with [`Batch::append`] come with their
    /// preparations merged with [`Prepared::append`]).
    fn write_prepared(&self, batch: &Batch, prepared: Prepared, sync: bool) -> Result<()> {
        let _ = prepared;
        self.write(batch, sync)
    }
    fn sync(&self) -> Result<()>;
    /// Ends the store's life before the process ends: makes every write
    /// durable and stops the engine's background work, waiting for work
    /// already running. Called once nothing writes any more; the store may
    /// refuse writes afterwards. A process may exit right after it, even
    /// if handles to the store are still alive somewhere (exiting while
    /// RocksDB's background threads run can abort the process).
    fn close(&self) -> Result<()> {
        self.sync()
    }
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
    /// Waits, up to `timeout`, until every snapshot taken before this call
    /// is released; true when none is left. Compaction keeps whatever a live
    /// snapshot can still see, so a caller that has just deleted data and
    /// wants its space back asks this before [`Store::compact_range`].
    fn await_older_snapshots(&self, timeout: std::time::Duration) -> bool {
        let _ = timeout;
        true
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
    /// Bytes the store holds in memory now, by part (caches, write
    /// buffers); empty where it does not tell.
    fn memory(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn index_is_the_position_in_all() {
        for (i, ks) in Keyspace::ALL.iter().enumerate() {
            assert_eq!(ks.index(), i, "{ks:?}");
        }
    }

    /// An owned operation, the model the arena is checked against.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Owned {
        Put(Keyspace, Vec<u8>, Vec<u8>),
        Delete(Keyspace, Vec<u8>),
        DeleteRange(Keyspace, Vec<u8>, Vec<u8>),
    }

    fn owned(op: Op<'_>) -> Owned {
        match op {
            Op::Put(ks, k, v) => Owned::Put(ks, k.to_vec(), v.to_vec()),
            Op::Delete(ks, k) => Owned::Delete(ks, k.to_vec()),
            Op::DeleteRange(ks, a, b) => Owned::DeleteRange(ks, a.to_vec(), b.to_vec()),
        }
    }

    fn build(ops: &[Owned]) -> Batch {
        let mut b = Batch::new();
        for (i, op) in ops.iter().enumerate() {
            match op {
                // Alternate the two ways of putting.
                Owned::Put(ks, k, v) if i % 2 == 0 => b.put(*ks, k, v),
                Owned::Put(ks, k, v) => b.put_with(
                    *ks,
                    |out| out.extend_from_slice(k),
                    |out| out.extend_from_slice(v),
                ),
                Owned::Delete(ks, k) => b.delete(*ks, k),
                Owned::DeleteRange(ks, x, y) => b.delete_range(*ks, x, y),
            }
        }
        b
    }

    fn any_op() -> impl Strategy<Value = Owned> {
        let ks = prop::sample::select(Keyspace::ALL.to_vec());
        let bytes = || prop::collection::vec(any::<u8>(), 0..12);
        prop_oneof![
            (ks.clone(), bytes(), bytes()).prop_map(|(s, k, v)| Owned::Put(s, k, v)),
            (ks.clone(), bytes()).prop_map(|(s, k)| Owned::Delete(s, k)),
            (ks, bytes(), bytes()).prop_map(|(s, a, b)| Owned::DeleteRange(s, a, b)),
        ]
    }

    proptest! {
        #[test]
        fn batch_gives_back_its_ops_appended_and_truncated(
            a in prop::collection::vec(any_op(), 0..20),
            b in prop::collection::vec(any_op(), 0..20),
            cut in 0usize..25,
        ) {
            let mut batch = build(&a);
            prop_assert_eq!(batch.ops().map(owned).collect::<Vec<_>>(), a.clone());
            prop_assert_eq!(batch.len(), a.len());
            batch.append(&build(&b));
            let both: Vec<Owned> = a.iter().chain(&b).cloned().collect();
            prop_assert_eq!(batch.ops().map(owned).collect::<Vec<_>>(), both.clone());
            let by_index: Vec<Owned> = (0..batch.len()).filter_map(|i| batch.get(i)).map(owned).collect();
            prop_assert_eq!(&by_index, &both);
            prop_assert!(batch.get(batch.len()).is_none());
            batch.truncate(cut);
            let kept = &both[..cut.min(both.len())];
            prop_assert_eq!(batch.ops().map(owned).collect::<Vec<_>>(), kept.to_vec());
            // What follows a truncation starts cleanly after the kept ops.
            batch.put(Keyspace::Meta, b"k", b"v");
            let last = batch.ops().last().map(owned);
            prop_assert_eq!(last, Some(Owned::Put(Keyspace::Meta, b"k".to_vec(), b"v".to_vec())));
        }
    }
}
