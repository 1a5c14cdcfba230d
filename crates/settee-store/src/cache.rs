//! A read-through cache of one keyspace's latest values, in front of
//! another store ([`CachedStore`]).
//!
//! Reads of the latest state ([`Store::latest`]) of the cached keyspace
//! are answered from memory when they can; every write through the
//! wrapper drops the keys it touched once the inner store has applied it.
//! Snapshots, scans and other keyspaces go straight to the inner store.
//! The document layer caches its by-id records, so a `GET` of a document's
//! winning revision that hits skips the storage engine's lookup (a walk of
//! RocksDB's in-memory skip list or its table files).
//!
//! Invariants:
//! - **Never stale after a write returns.** Once [`Store::write`] has
//!   returned, no read answers a value it replaced. Keys are split over
//!   stripes, each a lock around its part of the cache and a generation
//!   counter. A write, after the inner store applied it, bumps the
//!   generation of every stripe it touches and removes its keys there. A
//!   read that misses notes the generation, reads the inner store, and
//!   inserts what it read only if the generation has not moved, under the
//!   same lock. So a value read before a write landed is either refused
//!   (the write's bump came first) or inserted before the write's removal
//!   (which then drops it).
//! - **Bounded.** At most `capacity_bytes` of keys, values and per-entry
//!   overhead, evicted by quick_cache's clock policy (scan-resistant); a
//!   value larger than 1/64 of a stripe's share is never cached.
//! - Every write to the inner store goes through this wrapper: a write
//!   made to the inner store behind its back would leave stale entries.

use std::hash::{BuildHasher, BuildHasherDefault};
use std::sync::Arc;

use parking_lot::Mutex;
use quick_cache::Weighter;
use rustc_hash::FxHasher;

use crate::{Batch, Keyspace, Op, Prepared, Result, ScanFn, Snapshot, Store};

/// Stripes of the cache: enough that the connection threads of a many-core
/// machine rarely meet on one lock.
const STRIPES: usize = 32;

/// Bytes charged per entry besides its key and value: its slot in
/// quick_cache's table (~53 bytes, times the table's slack of up to 2×)
/// and the allocator's rounding of its two heap blocks.
const ENTRY_OVERHEAD: u64 = 128;

#[derive(Clone, Copy)]
struct ByteWeight;

impl Weighter<Box<[u8]>, Box<[u8]>> for ByteWeight {
    fn weight(&self, key: &Box<[u8]>, value: &Box<[u8]>) -> u64 {
        (key.len() + value.len()) as u64 + ENTRY_OVERHEAD
    }
}

type Map = quick_cache::unsync::Cache<Box<[u8]>, Box<[u8]>, ByteWeight>;

struct Stripe {
    /// Bumped by every write that touches a key of this stripe.
    generation: u64,
    map: Map,
}

/// The cached keyspace's entries, split in stripes by key hash.
struct Cache {
    keyspace: Keyspace,
    stripes: Box<[Mutex<Stripe>]>,
    /// Largest value inserted.
    max_value: usize,
    hasher: BuildHasherDefault<FxHasher>,
}

impl Cache {
    fn stripe_index(&self, key: &[u8]) -> usize {
        self.hasher.hash_one(key) as usize % STRIPES
    }

    fn stripe(&self, key: &[u8]) -> &Mutex<Stripe> {
        &self.stripes[self.stripe_index(key)]
    }

    /// The latest value of `key` in the cached keyspace: from memory, or
    /// read with `read` and remembered unless a write intervened.
    fn get(
        &self,
        key: &[u8],
        read: impl FnOnce() -> Result<Option<Vec<u8>>>,
    ) -> Result<Option<Vec<u8>>> {
        let stripe = self.stripe(key);
        let seen = {
            let s = stripe.lock();
            if let Some(v) = s.map.get(key) {
                return Ok(Some(v.to_vec()));
            }
            s.generation
        };
        let value = read()?;
        if let Some(v) = value.as_ref().filter(|v| v.len() <= self.max_value) {
            let mut s = stripe.lock();
            if s.generation == seen {
                s.map.insert(key.into(), v.as_slice().into());
            }
        }
        Ok(value)
    }

    /// A value if it is in memory (no insertion on a miss).
    fn peek(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.stripe(key).lock().map.get(key).map(|v| v.to_vec())
    }

    /// Drops what `batch` changed; called after the inner store applied
    /// it (or failed to).
    fn invalidate(&self, batch: &Batch) {
        if batch.len() > 2 * STRIPES && self.bump_all_if_empty() {
            return;
        }
        // Grouped by stripe, so each stripe is locked once per write.
        let mut keys: Vec<(usize, &[u8])> = Vec::new();
        for op in batch.ops() {
            match op {
                Op::Put(ks, key, _) | Op::Delete(ks, key) if ks == self.keyspace => {
                    keys.push((self.stripe_index(key), key));
                }
                Op::DeleteRange(ks, ..) if ks == self.keyspace => return self.clear(),
                _ => {}
            }
        }
        keys.sort_unstable_by_key(|k| k.0);
        for group in keys.chunk_by(|a, b| a.0 == b.0) {
            let mut s = self.stripes[group[0].0].lock();
            s.generation += 1;
            if !s.map.is_empty() {
                for (_, key) in group {
                    s.map.remove(*key);
                }
            }
        }
    }

    /// For a large batch: bumps every stripe's generation (so no read
    /// that missed before the write inserts what it read) and reports
    /// whether every stripe was empty then, when there is nothing to
    /// remove and no key needs hashing. Entries a read inserts after the
    /// bump hold what it read after the write. Otherwise the caller
    /// removes the batch's keys (bumping their stripes again: harmless).
    fn bump_all_if_empty(&self) -> bool {
        let mut empty = true;
        for stripe in self.stripes.iter() {
            let mut s = stripe.lock();
            s.generation += 1;
            empty &= s.map.is_empty();
        }
        empty
    }

    fn clear(&self) {
        for stripe in self.stripes.iter() {
            let mut s = stripe.lock();
            s.generation += 1;
            s.map.clear();
        }
    }
}

/// A [`Store`] that caches the latest values of one keyspace in memory.
pub struct CachedStore {
    inner: Arc<dyn Store>,
    cache: Arc<Cache>,
}

impl CachedStore {
    /// Caches up to `capacity_bytes` of `keyspace` in front of `inner`.
    pub fn new(inner: Arc<dyn Store>, keyspace: Keyspace, capacity_bytes: u64) -> CachedStore {
        let per_stripe = (capacity_bytes / STRIPES as u64).max(1);
        let stripes = (0..STRIPES)
            .map(|_| {
                Mutex::new(Stripe {
                    generation: 0,
                    // Sized for ~256-byte entries; the table grows if needed.
                    map: Map::with_weighter((per_stripe / 256) as usize, per_stripe, ByteWeight),
                })
            })
            .collect();
        CachedStore {
            inner,
            cache: Arc::new(Cache {
                keyspace,
                stripes,
                max_value: usize::try_from(per_stripe / 64).unwrap_or(usize::MAX),
                hasher: BuildHasherDefault::default(),
            }),
        }
    }

    /// Bytes the cache holds now (keys, values and per-entry overhead).
    pub fn cached_bytes(&self) -> u64 {
        self.cache
            .stripes
            .iter()
            .map(|s| s.lock().map.weight())
            .sum()
    }
}

/// The latest state, read through the cache.
struct CachedView {
    inner: Arc<dyn Store>,
    cache: Arc<Cache>,
}

impl Snapshot for CachedView {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if ks != self.cache.keyspace {
            return self.inner.get(ks, key);
        }
        self.cache.get(key, || self.inner.get(ks, key))
    }

    fn scan(
        &self,
        ks: Keyspace,
        from: &[u8],
        to: &[u8],
        reverse: bool,
        visit: &mut ScanFn<'_>,
    ) -> Result<()> {
        self.inner.latest().scan(ks, from, to, reverse, visit)
    }
}

impl Store for CachedStore {
    fn write(&self, batch: &Batch, sync: bool) -> Result<()> {
        let result = self.inner.write(batch, sync);
        self.cache.invalidate(batch);
        result
    }

    fn prepare(&self, batch: &Batch) -> Option<Prepared> {
        self.inner.prepare(batch)
    }

    fn write_prepared(&self, batch: &Batch, prepared: Prepared, sync: bool) -> Result<()> {
        let result = self.inner.write_prepared(batch, prepared, sync);
        self.cache.invalidate(batch);
        result
    }

    fn sync(&self) -> Result<()> {
        self.inner.sync()
    }

    fn close(&self) -> Result<()> {
        self.inner.close()
    }

    /// The writer's reads: answered from memory when there, but not
    /// remembered (the writer reads what it is about to change).
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if ks == self.cache.keyspace {
            if let Some(v) = self.cache.peek(key) {
                return Ok(Some(v));
            }
        }
        self.inner.get(ks, key)
    }

    fn multi_get(&self, ks: Keyspace, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.inner.multi_get(ks, keys)
    }

    fn snapshot(&self) -> Arc<dyn Snapshot> {
        self.inner.snapshot()
    }

    fn latest(&self) -> Arc<dyn Snapshot> {
        Arc::new(CachedView {
            inner: self.inner.clone(),
            cache: self.cache.clone(),
        })
    }

    fn compact_range(&self, ks: Keyspace, from: &[u8], to: &[u8]) -> Result<()> {
        self.inner.compact_range(ks, from, to)
    }

    fn await_older_snapshots(&self, timeout: std::time::Duration) -> bool {
        self.inner.await_older_snapshots(timeout)
    }

    fn flush_memory(&self) -> Result<()> {
        self.inner.flush_memory()
    }

    fn approximate_size(&self, ks: Keyspace, from: &[u8], to: &[u8]) -> u64 {
        self.inner.approximate_size(ks, from, to)
    }

    fn disk_size(&self) -> u64 {
        self.inner.disk_size()
    }

    fn memory(&self) -> Vec<(&'static str, u64)> {
        let mut parts = self.inner.memory();
        parts.push(("doc_cache", self.cached_bytes()));
        parts
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use proptest::prelude::*;

    use super::*;
    use crate::mem::MemStore;

    const DOCS: Keyspace = Keyspace::Docs;

    fn cached(capacity: u64) -> (Arc<MemStore>, CachedStore) {
        let inner = Arc::new(MemStore::new());
        let store = CachedStore::new(inner.clone(), DOCS, capacity);
        (inner, store)
    }

    fn put(store: &dyn Store, ks: Keyspace, key: &[u8], value: &[u8]) {
        let mut b = Batch::new();
        b.put(ks, key, value);
        store.write(&b, false).unwrap();
    }

    #[test]
    fn a_read_is_remembered_until_a_write_through_the_cache() {
        let (inner, store) = cached(1 << 20);
        put(&store, DOCS, b"a", b"1");
        assert_eq!(store.latest().get(DOCS, b"a").unwrap(), Some(b"1".to_vec()));
        // Written behind the cache's back: the remembered value still answers
        // (which is why every write must go through the wrapper).
        put(&*inner, DOCS, b"a", b"2");
        assert_eq!(store.latest().get(DOCS, b"a").unwrap(), Some(b"1".to_vec()));
        assert_eq!(store.get(DOCS, b"a").unwrap(), Some(b"1".to_vec()));
        // Through the cache: the entry goes.
        put(&store, DOCS, b"a", b"3");
        assert_eq!(store.latest().get(DOCS, b"a").unwrap(), Some(b"3".to_vec()));
        let mut b = Batch::new();
        b.delete(DOCS, b"a");
        store.write(&b, true).unwrap();
        assert_eq!(store.latest().get(DOCS, b"a").unwrap(), None);
        // Snapshots and other keyspaces are never cached.
        put(&store, Keyspace::Meta, b"m", b"1");
        assert_eq!(
            store.latest().get(Keyspace::Meta, b"m").unwrap(),
            Some(b"1".to_vec())
        );
        put(&*inner, Keyspace::Meta, b"m", b"2");
        assert_eq!(
            store.latest().get(Keyspace::Meta, b"m").unwrap(),
            Some(b"2".to_vec())
        );
        put(&store, DOCS, b"s", b"1");
        store.latest().get(DOCS, b"s").unwrap();
        put(&*inner, DOCS, b"s", b"2");
        assert_eq!(
            store.snapshot().get(DOCS, b"s").unwrap(),
            Some(b"2".to_vec())
        );
    }

    #[test]
    fn a_large_write_drops_its_keys_from_a_filled_or_an_empty_cache() {
        let (_, store) = cached(1 << 20);
        let big = |v: u8| {
            let mut b = Batch::new();
            for i in 0..200u32 {
                b.put(DOCS, i.to_be_bytes(), [v]);
            }
            b
        };
        // Empty cache: every stripe is bumped, no key removed.
        store.write(&big(1), false).unwrap();
        for i in [0u32, 7, 199] {
            assert_eq!(
                store.latest().get(DOCS, &i.to_be_bytes()).unwrap(),
                Some(vec![1])
            );
        }
        assert!(store.cached_bytes() > 0);
        // Cached entries of the batch's keys go.
        store.write(&big(2), false).unwrap();
        for i in [0u32, 7, 199] {
            assert_eq!(
                store.latest().get(DOCS, &i.to_be_bytes()).unwrap(),
                Some(vec![2])
            );
        }
    }

    #[test]
    fn a_range_deletion_empties_the_cache() {
        let (_, store) = cached(1 << 20);
        for k in [b"a", b"b", b"c"] {
            put(&store, DOCS, k, b"v");
            store.latest().get(DOCS, k).unwrap();
        }
        assert!(store.cached_bytes() > 0);
        let mut b = Batch::new();
        b.delete_range(DOCS, b"b", b"c");
        store.write(&b, true).unwrap();
        assert_eq!(store.cached_bytes(), 0);
        assert_eq!(store.latest().get(DOCS, b"a").unwrap(), Some(b"v".to_vec()));
        assert_eq!(store.latest().get(DOCS, b"b").unwrap(), None);
        assert_eq!(store.latest().get(DOCS, b"c").unwrap(), Some(b"v".to_vec()));
    }

    #[test]
    fn memory_stays_within_its_capacity() {
        let capacity = 1 << 20;
        let (_, store) = cached(capacity);
        let mut b = Batch::new();
        for i in 0..20_000u32 {
            b.put(DOCS, i.to_be_bytes(), [7u8; 100]);
        }
        store.write(&b, false).unwrap();
        for i in 0..20_000u32 {
            let v = store.latest().get(DOCS, &i.to_be_bytes()).unwrap();
            assert_eq!(v.as_deref(), Some(&[7u8; 100][..]));
        }
        let held = store.cached_bytes();
        assert!(held > capacity / 2 && held <= capacity, "{held}");
        // Too large to be worth a slot: read, never kept.
        put(
            &store,
            DOCS,
            b"big",
            &vec![1u8; capacity as usize / STRIPES / 16],
        );
        let before = store.cached_bytes();
        assert!(store.latest().get(DOCS, b"big").unwrap().is_some());
        assert!(store.cached_bytes() <= before);
    }

    /// A store whose reads of `Docs`, once armed, pause after reading: the
    /// test then writes while a cache miss is between its read and its
    /// insertion.
    struct Paused {
        inner: MemStore,
        read: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
    }

    impl Store for Paused {
        fn write(&self, batch: &Batch, sync: bool) -> Result<()> {
            self.inner.write(batch, sync)
        }
        fn sync(&self) -> Result<()> {
            self.inner.sync()
        }
        fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
            let value = self.inner.get(ks, key);
            if let Some((done, go)) = self.read.lock().take() {
                done.send(()).unwrap();
                go.recv().unwrap();
            }
            value
        }
        fn snapshot(&self) -> Arc<dyn Snapshot> {
            self.inner.snapshot()
        }
        fn compact_range(&self, ks: Keyspace, from: &[u8], to: &[u8]) -> Result<()> {
            self.inner.compact_range(ks, from, to)
        }
        fn approximate_size(&self, ks: Keyspace, from: &[u8], to: &[u8]) -> u64 {
            self.inner.approximate_size(ks, from, to)
        }
        fn disk_size(&self) -> u64 {
            self.inner.disk_size()
        }
    }

    #[test]
    fn a_value_read_before_a_write_is_not_remembered_after_it() {
        let inner = Arc::new(Paused {
            inner: MemStore::new(),
            read: Mutex::new(None),
        });
        let store = Arc::new(CachedStore::new(inner.clone(), DOCS, 1 << 20));
        put(&*store, DOCS, b"k", b"old");
        let (done_tx, done_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel();
        *inner.read.lock() = Some((done_tx, go_rx));
        let reader = {
            let store = store.clone();
            std::thread::spawn(move || store.latest().get(DOCS, b"k").unwrap())
        };
        // The reader has read "old" and waits; the write lands meanwhile.
        done_rx.recv().unwrap();
        put(&*store, DOCS, b"k", b"new");
        go_tx.send(()).unwrap();
        assert_eq!(reader.join().unwrap(), Some(b"old".to_vec()));
        // The late "old" was refused: every read after the write sees "new".
        assert_eq!(
            store.latest().get(DOCS, b"k").unwrap(),
            Some(b"new".to_vec())
        );
        assert_eq!(
            store.latest().get(DOCS, b"k").unwrap(),
            Some(b"new".to_vec())
        );
    }

    #[test]
    fn readers_racing_a_writer_never_see_an_acknowledged_value_replaced() {
        let (_, store) = cached(1 << 20);
        let store = Arc::new(store);
        let acked = Arc::new(std::sync::atomic::AtomicU64::new(0));
        put(&*store, DOCS, b"k", &0u64.to_be_bytes());
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (store, acked) = (store.clone(), acked.clone());
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let floor = acked.load(std::sync::atomic::Ordering::SeqCst);
                        let v = store.latest().get(DOCS, b"k").unwrap().unwrap();
                        let seen = u64::from_be_bytes(v.try_into().unwrap());
                        assert!(seen >= floor, "read {seen} after {floor} was written");
                    }
                })
            })
            .collect();
        for i in 1..=5_000u64 {
            put(&*store, DOCS, b"k", &i.to_be_bytes());
            acked.store(i, std::sync::atomic::Ordering::SeqCst);
        }
        for r in readers {
            r.join().unwrap();
        }
    }

    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(0u8..4, 1..3)
    }

    #[derive(Debug, Clone)]
    enum Step {
        Put(bool, Vec<u8>, u8),
        Delete(Vec<u8>),
        DeleteRange(Vec<u8>, Vec<u8>),
        Read(bool, Vec<u8>),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (any::<bool>(), key(), any::<u8>()).prop_map(|(d, k, v)| Step::Put(d, k, v)),
            key().prop_map(Step::Delete),
            (key(), key()).prop_map(|(a, b)| Step::DeleteRange(a.clone().min(b.clone()), a.max(b))),
            (any::<bool>(), key()).prop_map(|(l, k)| Step::Read(l, k)),
        ]
    }

    proptest! {
        /// Whatever the writes, reads through the cache answer what an
        /// uncached store given the same writes answers.
        #[test]
        fn reads_agree_with_an_uncached_store(steps in prop::collection::vec(step(), 1..60)) {
            let (_, store) = cached(1 << 20);
            let model = MemStore::new();
            for s in steps {
                let mut b = Batch::new();
                match s {
                    Step::Put(docs, k, v) => {
                        b.put(if docs { DOCS } else { Keyspace::Meta }, &k, [v]);
                    }
                    Step::Delete(k) => b.delete(DOCS, &k),
                    Step::DeleteRange(from, to) => b.delete_range(DOCS, &from, &to),
                    Step::Read(latest, k) => {
                        let got = if latest {
                            store.latest().get(DOCS, &k).unwrap()
                        } else {
                            store.get(DOCS, &k).unwrap()
                        };
                        prop_assert_eq!(got, model.get(DOCS, &k).unwrap());
                        continue;
                    }
                }
                store.write(&b, false).unwrap();
                model.write(&b, false).unwrap();
            }
        }
    }
}
