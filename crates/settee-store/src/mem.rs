//! In-memory store with a durable image, for tests.
//!
//! Invariant: `durable` is exactly the state after the last synced write (or
//! `sync()`); [`MemStore::crash`] throws away everything newer, which is what
//! a power loss does to unsynced writes.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{Batch, Keyspace, Op, Result, ScanFn, Snapshot, Store};

type Maps = Vec<BTreeMap<Vec<u8>, Vec<u8>>>;

#[derive(Default)]
struct State {
    live: Arc<Maps>,
    durable: Arc<Maps>,
}

/// An in-memory [`Store`].
pub struct MemStore {
    state: Mutex<State>,
}

impl Default for MemStore {
    fn default() -> Self {
        MemStore::new()
    }
}

impl MemStore {
    pub fn new() -> MemStore {
        let empty: Arc<Maps> = Arc::new(vec![BTreeMap::new(); Keyspace::ALL.len()]);
        MemStore {
            state: Mutex::new(State {
                live: empty.clone(),
                durable: empty,
            }),
        }
    }

    /// Simulates a crash: unsynced writes are lost.
    pub fn crash(&self) {
        let mut s = self.state.lock();
        s.live = s.durable.clone();
    }
}

struct MemSnapshot(Arc<Maps>);

impl Snapshot for MemSnapshot {
    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.0[ks.index()].get(key).cloned())
    }

    fn scan(
        &self,
        ks: Keyspace,
        from: &[u8],
        to: &[u8],
        reverse: bool,
        visit: &mut ScanFn<'_>,
    ) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        let range =
            self.0[ks.index()].range::<[u8], _>((Bound::Included(from), Bound::Excluded(to)));
        if reverse {
            for (k, v) in range.rev() {
                if !visit(k, v) {
                    break;
                }
            }
        } else {
            for (k, v) in range {
                if !visit(k, v) {
                    break;
                }
            }
        }
        Ok(())
    }
}

impl Store for MemStore {
    fn write(&self, batch: &Batch, sync: bool) -> Result<()> {
        let mut s = self.state.lock();
        let maps = Arc::make_mut(&mut s.live);
        for op in batch.ops() {
            match op {
                Op::Put(ks, k, v) => {
                    maps[ks.index()].insert(k.to_vec(), v.to_vec());
                }
                Op::Delete(ks, k) => {
                    maps[ks.index()].remove(k);
                }
                Op::DeleteRange(ks, from, to) => {
                    let map = &mut maps[ks.index()];
                    let doomed: Vec<Vec<u8>> = map
                        .range::<[u8], _>((Bound::Included(from), Bound::Excluded(to)))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in doomed {
                        map.remove(&k);
                    }
                }
            }
        }
        if sync {
            s.durable = s.live.clone();
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        let mut s = self.state.lock();
        s.durable = s.live.clone();
        Ok(())
    }

    fn get(&self, ks: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.state.lock().live[ks.index()].get(key).cloned())
    }

    fn snapshot(&self) -> Arc<dyn Snapshot> {
        Arc::new(MemSnapshot(self.state.lock().live.clone()))
    }

    fn compact_range(&self, _ks: Keyspace, _from: &[u8], _to: &[u8]) -> Result<()> {
        Ok(())
    }

    fn approximate_size(&self, ks: Keyspace, from: &[u8], to: &[u8]) -> u64 {
        if from >= to {
            return 0;
        }
        let s = self.state.lock();
        s.live[ks.index()]
            .range::<[u8], _>((Bound::Included(from), Bound::Excluded(to)))
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .sum()
    }

    fn disk_size(&self) -> u64 {
        let s = self.state.lock();
        s.live
            .iter()
            .flat_map(|m| m.iter())
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(s: &dyn Snapshot, reverse: bool) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        s.scan(Keyspace::Docs, b"b", b"d", reverse, &mut |k, _| {
            out.push(k.to_vec());
            true
        })
        .unwrap();
        out
    }

    #[test]
    fn snapshots_scans_and_crash() {
        let m = MemStore::new();
        let mut b = Batch::new();
        for k in ["a", "b", "c", "d"] {
            b.put(Keyspace::Docs, k.as_bytes(), k.as_bytes());
        }
        m.write(&b, true).unwrap();
        let snap = m.snapshot();
        let mut b = Batch::new();
        b.delete(Keyspace::Docs, b"b");
        m.write(&b, false).unwrap();
        assert_eq!(collect(&*snap, false), vec![b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(collect(&*snap, true), vec![b"c".to_vec(), b"b".to_vec()]);
        assert_eq!(collect(&*m.snapshot(), false), vec![b"c".to_vec()]);
        m.crash();
        assert_eq!(m.get(Keyspace::Docs, b"b").unwrap(), Some(b"b".to_vec()));
        let mut b = Batch::new();
        b.delete_range(Keyspace::Docs, b"a", b"c");
        m.write(&b, true).unwrap();
        assert_eq!(m.get(Keyspace::Docs, b"a").unwrap(), None);
        assert_eq!(m.get(Keyspace::Docs, b"c").unwrap(), Some(b"c".to_vec()));
    }
}
