//! The writer's view of its own writes that storage may not have yet.
//!
//! The writer hands group n to the committer and goes on computing group
//! n+1, which may touch the same documents: it must see group n's records
//! although they are not in storage yet. This module keeps the batches of
//! groups handed over and not yet known to be written, and indexes every
//! by-id (`Docs`) key they put or delete; a lookup decodes the record from
//! the batch bytes.
//!
//! Invariants:
//! - **Latest wins.** For a key written by several kept batches, the index
//!   points at the last operation on it (groups are added in order, and
//!   operations of a batch in order).
//! - **Only the not-yet-written matter.** An index entry whose batch was
//!   released (its group is written) is stale and reads as "not in
//!   flight": storage then has that record, and nothing newer exists, or
//!   the index would point at it.
//! - Writer batches never delete a range of `Docs` keys (databases are
//!   deleted by the engine, not by their writer), so every `Docs` change
//!   in flight is a single-key put or delete, and indexed.
//!
//! Compared with keeping the decoded records in a map by id, nothing is
//! allocated or freed per document: an entry is three integers.

use std::collections::VecDeque;
use std::hash::Hasher;
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::FxHasher;
use settee_store::{Batch, Keyspace, Op};

use crate::error::Result;
use crate::keys;
use crate::records::DocRecord;

/// One indexed `Docs` operation: the hash of its document id, its group,
/// and its position in that group's batch.
#[derive(Debug, Clone, Copy)]
struct Slot {
    hash: u64,
    group: u64,
    op: u32,
}

#[derive(Default)]
pub struct Inflight {
    /// Batches of groups handed over and not yet released, oldest first
    /// (increasing, normally consecutive group numbers).
    kept: VecDeque<(u64, Arc<Batch>)>,
    index: HashTable<Slot>,
}

fn id_hash(id: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(id);
    h.finish()
}

impl Inflight {
    /// Whether no batch is kept (every lookup then misses).
    pub(crate) fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    fn slot_op(&self, slot: &Slot) -> Option<Op<'_>> {
        kept_op(&self.kept, slot)
    }

    /// Adds the batch of `group` (a higher group number than the kept
    /// ones; normally the next) and indexes its `Docs` operations.
    pub(crate) fn add(&mut self, group: u64, batch: Arc<Batch>) {
        debug_assert!(self.kept.back().is_none_or(|(g, _)| *g < group));
        self.kept.push_back((group, Arc::clone(&batch)));
        for (i, op) in batch.ops().enumerate() {
            let key = match op {
                Op::Put(Keyspace::Docs, k, _) | Op::Delete(Keyspace::Docs, k) => k,
                Op::DeleteRange(Keyspace::Docs, ..) => {
                    debug_assert!(false, "a writer batch deleted a range of Docs keys");
                    continue;
                }
                _ => continue,
            };
            let id = keys::doc_id(key);
            let hash = id_hash(id);
            let slot = Slot {
                hash,
                group,
                op: u32::try_from(i).expect("fewer than 2^32 operations in a batch"),
            };
            let found = self.index.find_mut(hash, |s| {
                s.hash == hash && op_id(kept_op(&self.kept, s)) == Some(id)
            });
            match found {
                Some(s) => *s = slot,
                None => {
                    self.index.insert_unique(hash, slot, |s| s.hash);
                }
            }
        }
    }

    /// The record of `id` as the kept batches leave it: `None` when no
    /// kept batch changed it, `Some(None)` when one deleted it.
    pub(crate) fn get(&self, id: &str) -> Result<Option<Option<DocRecord>>> {
        if self.kept.is_empty() {
            return Ok(None);
        }
        let id = id.as_bytes();
        let hash = id_hash(id);
        let Some(slot) = self.index.find(hash, |s| {
            s.hash == hash && op_id(self.slot_op(s)) == Some(id)
        }) else {
            return Ok(None);
        };
        match self.slot_op(slot) {
            Some(Op::Put(_, _, value)) => Ok(Some(Some(DocRecord::decode(value)?))),
            Some(Op::Delete(..)) => Ok(Some(None)),
            Some(Op::DeleteRange(..)) | None => Ok(None),
        }
    }

    /// Releases the batches of groups up to `done` (written). The index
    /// is emptied when nothing is kept, and pruned when it holds many more
    /// entries than the kept batches can need.
    pub(crate) fn release_through(&mut self, done: u64) {
        while self.kept.front().is_some_and(|(g, _)| *g <= done) {
            self.kept.pop_front();
        }
        match self.kept.front() {
            None => self.index.clear(),
            Some(&(first, _)) => {
                let live: usize = self.kept.iter().map(|(_, b)| b.len()).sum();
                if self.index.len() > 4 * live + 1024 {
                    self.index.retain(|s| s.group >= first);
                }
            }
        }
    }

    /// Forgets everything (after the pipeline drained).
    pub(crate) fn clear(&mut self) {
        self.kept.clear();
        self.index.clear();
    }
}

/// The operation a slot points at, if its batch is still kept.
fn kept_op<'a>(kept: &'a VecDeque<(u64, Arc<Batch>)>, slot: &Slot) -> Option<Op<'a>> {
    let first = kept.front()?.0;
    let i = usize::try_from(slot.group.checked_sub(first)?).ok()?;
    let batch = match kept.get(i) {
        // Group numbers are consecutive, so the position is the offset...
        Some((g, b)) if *g == slot.group => b,
        // ...and should they ever not be, a search still finds the right one.
        _ => {
            let j = kept.binary_search_by_key(&slot.group, |(g, _)| *g).ok()?;
            &kept[j].1
        }
    };
    batch.get(slot.op as usize)
}

/// The document id an indexed operation writes.
fn op_id(op: Option<Op<'_>>) -> Option<&[u8]> {
    match op? {
        Op::Put(_, k, _) | Op::Delete(_, k) => Some(keys::doc_id(k)),
        Op::DeleteRange(..) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::DbId;
    use crate::records::encode;
    use settee_core::rev::Rev;
    use settee_core::revtree::RevTree;

    const DB: DbId = 7;

    fn record(seq: u64) -> DocRecord {
        let rev: Rev = "1-abc".parse().unwrap();
        DocRecord {
            seq,
            tree: RevTree::with_root(rev, false, true),
            inline: vec![(0, format!("{{\"n\":{seq}}}"))],
        }
    }

    fn put(b: &mut Batch, id: &str, seq: u64) {
        b.put(Keyspace::Docs, keys::doc(DB, id), encode(&record(seq)));
        // Other keyspaces are not indexed.
        b.put(Keyspace::Seqs, keys::seq(DB, seq), b"x");
    }

    #[test]
    fn the_latest_kept_operation_on_an_id_wins_until_released() {
        let mut f = Inflight::default();
        assert_eq!(f.get("a").unwrap(), None);
        let mut g1 = Batch::new();
        put(&mut g1, "a", 1);
        put(&mut g1, "b", 2);
        put(&mut g1, "a", 3); // twice in one batch: the later one counts
        f.add(1, Arc::new(g1));
        let mut g2 = Batch::new();
        g2.delete(Keyspace::Docs, keys::doc(DB, "b"));
        put(&mut g2, "c", 4);
        f.add(2, Arc::new(g2));
        assert_eq!(f.get("a").unwrap(), Some(Some(record(3))));
        assert_eq!(f.get("b").unwrap(), Some(None), "deleted in flight");
        assert_eq!(f.get("c").unwrap(), Some(Some(record(4))));
        assert_eq!(f.get("d").unwrap(), None);
        // Group 1 written: its entries read as "not in flight" (storage
        // has them); group 2's still count.
        f.release_through(1);
        assert_eq!(f.get("a").unwrap(), None);
        assert_eq!(f.get("b").unwrap(), Some(None));
        let mut g3 = Batch::new();
        put(&mut g3, "b", 5);
        f.add(3, Arc::new(g3));
        assert_eq!(f.get("b").unwrap(), Some(Some(record(5))));
        f.release_through(3);
        assert!(f.is_empty());
        assert_eq!(f.get("b").unwrap(), None);
        assert_eq!(f.index.len(), 0);
    }

    #[test]
    fn group_numbers_with_gaps_still_find_their_batch() {
        let mut f = Inflight::default();
        for g in [3u64, 4, 9, 10] {
            let mut b = Batch::new();
            put(&mut b, &format!("d{g}"), g);
            f.add(g, Arc::new(b));
        }
        for g in [3u64, 4, 9, 10] {
            assert_eq!(f.get(&format!("d{g}")).unwrap(), Some(Some(record(g))));
        }
        f.release_through(4);
        assert_eq!(f.get("d4").unwrap(), None);
        assert_eq!(f.get("d10").unwrap(), Some(Some(record(10))));
    }

    #[test]
    fn the_index_is_pruned_while_groups_stay_in_flight() {
        let mut f = Inflight::default();
        for g in 1..=200u64 {
            let mut b = Batch::new();
            for i in 0..50 {
                put(&mut b, &format!("g{g}-{i}"), g * 100 + i);
            }
            f.add(g, Arc::new(b));
            // Always one group left in flight, so the index never empties.
            f.release_through(g - 1);
            assert!(f.index.len() <= 4 * 100 + 1024 + 50, "{}", f.index.len());
        }
        assert_eq!(f.get("g200-7").unwrap(), Some(Some(record(20007))));
        assert_eq!(f.get("g199-7").unwrap(), None);
    }
}
