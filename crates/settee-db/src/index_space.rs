//! A database's share of the index keyspace: where the indexes built from
//! it (views, Mango) keep their rows, per-document keys and state.
//!
//! Invariants:
//! - Every key an [`IndexSpace`] reads or writes lies in its database's
//!   range of `Keyspace::Views` (the database id, then the caller's
//!   relative key), so deleting the database drops its indexes with one
//!   range deletion, and ids are never reused, so a recreated database
//!   never sees an old index.
//! - Index writes go through the same store (and poison) as the
//!   database's, but not through its writer: an index is derived data,
//!   written by its own updater in atomic batches without fsync (a crash
//!   loses at most the last batches, which the updater redoes from the
//!   index's recorded sequence).
//! - Writes to a deleted database's space are refused (`not_found`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use settee_store::{Batch, Keyspace, Snapshot};

use crate::database::Shared;
use crate::error::{Error, Result};
use crate::reader::{try_scan, RawVisitor};

/// A database's index keyspace (see the module doc). Cheap to clone.
#[derive(Clone)]
pub struct IndexSpace {
    shared: Arc<Shared>,
}

/// A consistent view of an [`IndexSpace`].
pub struct IndexSnapshot {
    shared: Arc<Shared>,
    snap: Arc<dyn Snapshot>,
}

/// Writes to an [`IndexSpace`], applied atomically by [`IndexSpace::write`].
#[derive(Default)]
pub struct IndexBatch {
    batch: Batch,
}

fn full_key(db: u64, rel: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + rel.len());
    k.extend_from_slice(&db.to_be_bytes());
    k.extend_from_slice(rel);
    k
}

impl IndexBatch {
    pub fn new() -> IndexBatch {
        IndexBatch::default()
    }

    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    pub fn len(&self) -> usize {
        self.batch.len()
    }

    /// Bytes of keys and values held.
    pub fn data_bytes(&self) -> usize {
        self.batch.data_bytes()
    }
}

impl IndexSpace {
    pub(crate) fn new(shared: Arc<Shared>) -> IndexSpace {
        IndexSpace { shared }
    }

    fn check(&self) -> Result<()> {
        self.shared.poison.check()?;
        if self.shared.deleted.load(Ordering::Acquire) {
            return Err(Error::NotFound("Database does not exist."));
        }
        Ok(())
    }

    pub fn snapshot(&self) -> Result<IndexSnapshot> {
        self.check()?;
        Ok(IndexSnapshot {
            shared: Arc::clone(&self.shared),
            snap: self.shared.store.snapshot(),
        })
    }

    /// The latest values of several keys.
    pub fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.check()?;
        let db = self.shared.db;
        let full: Vec<Vec<u8>> = keys.iter().map(|k| full_key(db, k)).collect();
        let refs: Vec<&[u8]> = full.iter().map(Vec::as_slice).collect();
        self.shared
            .poison
            .guard(self.shared.store.multi_get(Keyspace::Views, &refs))
    }

    pub fn put(&self, batch: &mut IndexBatch, key: &[u8], value: &[u8]) {
        let db = self.shared.db;
        batch.batch.put_with(
            Keyspace::Views,
            |k| {
                k.extend_from_slice(&db.to_be_bytes());
                k.extend_from_slice(key);
            },
            |v| v.extend_from_slice(value),
        );
    }

    pub fn delete(&self, batch: &mut IndexBatch, key: &[u8]) {
        batch
            .batch
            .delete(Keyspace::Views, full_key(self.shared.db, key));
    }

    /// Deletes every key in `[from, to)`.
    pub fn delete_range(&self, batch: &mut IndexBatch, from: &[u8], to: &[u8]) {
        let db = self.shared.db;
        batch
            .batch
            .delete_range(Keyspace::Views, full_key(db, from), full_key(db, to));
    }

    /// Asks the store to move what was written from memory into files.
    /// Readers scanning keys rewritten many times (an index's block records
    /// during a build) otherwise step over every old version still in the
    /// in-memory table. Only an optimisation: a store that cannot flush now
    /// (RocksDB refuses while writes are stalled) loses nothing, so a
    /// failure is logged and never poisons the engine.
    pub fn flush_memory(&self) {
        if let Err(e) = self.shared.store.flush_memory() {
            tracing::debug!(error = %e, "index flush not done");
        }
    }

    /// The approximate bytes the keys in `[from, to)` take in the store.
    pub fn approximate_size(&self, from: &[u8], to: &[u8]) -> u64 {
        let db = self.shared.db;
        self.shared
            .store
            .approximate_size(Keyspace::Views, &full_key(db, from), &full_key(db, to))
    }

    /// Compacts the keys in `[from, to)`: the store rewrites them without
    /// the versions and deletions no reader needs any more.
    pub fn compact(&self, from: &[u8], to: &[u8]) -> Result<()> {
        self.check()?;
        let db = self.shared.db;
        self.shared.poison.guard(self.shared.store.compact_range(
            Keyspace::Views,
            &full_key(db, from),
            &full_key(db, to),
        ))
    }

    /// Writes a batch atomically, without fsync (see the module doc).
    pub fn write(&self, batch: IndexBatch) -> Result<()> {
        self.check()?;
        if batch.batch.is_empty() {
            return Ok(());
        }
        self.shared
            .poison
            .guard(self.shared.store.write(&batch.batch, false))
    }
}

impl IndexSnapshot {
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let k = full_key(self.shared.db, key);
        self.shared.poison.guard(self.snap.get(Keyspace::Views, &k))
    }

    /// Visits `(relative key, value)` pairs in `[from, to)` (`to = None`:
    /// to the end of the database's space), ascending or descending; the
    /// visitor returns `Ok(false)` to stop.
    pub fn scan(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        reverse: bool,
        visit: &mut RawVisitor<'_>,
    ) -> Result<()> {
        let db = self.shared.db;
        let lo = full_key(db, from);
        let hi = match to {
            Some(t) => full_key(db, t),
            None => (db + 1).to_be_bytes().to_vec(),
        };
        try_scan(
            &*self.snap,
            &self.shared.poison,
            Keyspace::Views,
            &lo,
            &hi,
            reverse,
            &mut |k, v| visit(&k[8..], v),
        )
    }
}
