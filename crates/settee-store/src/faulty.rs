//! A store wrapper that fails (or slows down) on command, for
//! failure-handling and pipelining tests.
//!
//! Invariant: once a failure is injected the wrapped store is not touched by
//! the failing call, so the test can check exactly what the layer above did.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::{Batch, Keyspace, Result, Snapshot, Store, StoreError};

/// Never fail.
const NEVER: u64 = u64::MAX;

/// Wraps a store; fails synced writes / syncs or any write after a countdown.
pub struct FaultyStore<S> {
    inner: S,
    /// Number of durable operations (synced writes and syncs) still allowed.
    syncs_left: AtomicU64,
    /// Number of writes of any kind still allowed.
    writes_left: AtomicU64,
    /// Every write first sleeps this long (milliseconds).
    write_delay_ms: AtomicU64,
}

impl<S: Store> FaultyStore<S> {
    pub fn new(inner: S) -> FaultyStore<S> {
        FaultyStore {
            inner,
            syncs_left: AtomicU64::new(NEVER),
            writes_left: AtomicU64::new(NEVER),
            write_delay_ms: AtomicU64::new(0),
        }
    }

    /// Makes every later write take at least `ms` milliseconds (a slow disk).
    pub fn delay_writes(&self, ms: u64) {
        self.write_delay_ms.store(ms, Ordering::SeqCst);
    }

    /// After `n` more successful fsyncs, every fsync fails.
    pub fn fail_syncs_after(&self, n: u64) {
        self.syncs_left.store(n, Ordering::SeqCst);
    }

    /// After `n` more successful writes, every write fails.
    pub fn fail_writes_after(&self, n: u64) {
        self.writes_left.store(n, Ordering::SeqCst);
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn take(counter: &AtomicU64, what: &'static str) -> Result<()> {
        let r = counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| match n {
            NEVER => Some(NEVER),
            0 => None,
            n => Some(n - 1),
        });
        r.map(|_| ()).map_err(|_| StoreError::Injected(what))
    }
}

impl<S: Store> Store for FaultyStore<S> {
    fn write(&self, batch: &Batch, sync: bool) -> Result<()> {
        let delay = self.write_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(std::time::Duration::from_millis(delay));
        }
        Self::take(&self.writes_left, "write")?;
        if sync {
            Self::take(&self.syncs_left, "fsync")?;
        }
        self.inner.write(batch, sync)
    }

    fn sync(&self) -> Result<()> {
        Self::take(&self.syncs_left, "fsync")?;
        self.inner.sync()
    }

    fn close(&self) -> Result<()> {
        self.inner.close()
    }

    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.get(ks, key)
    }

    fn snapshot(&self) -> Arc<dyn Snapshot> {
        self.inner.snapshot()
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

    fn latest(&self) -> Arc<dyn Snapshot> {
        self.inner.latest()
    }

    fn approximate_size(&self, ks: Keyspace, from: &[u8], to: &[u8]) -> u64 {
        self.inner.approximate_size(ks, from, to)
    }

    fn disk_size(&self) -> u64 {
        self.inner.disk_size()
    }

    fn memory(&self) -> Vec<(&'static str, u64)> {
        self.inner.memory()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::MemStore;

    #[test]
    fn fails_after_countdown() {
        let f = FaultyStore::new(MemStore::new());
        f.fail_syncs_after(1);
        f.write(&Batch::new(), true).unwrap();
        f.write(&Batch::new(), false).unwrap();
        assert!(matches!(
            f.write(&Batch::new(), true),
            Err(StoreError::Injected("fsync"))
        ));
        assert!(f.sync().is_err());
        f.fail_writes_after(0);
        assert!(f.write(&Batch::new(), false).is_err());
    }
}
