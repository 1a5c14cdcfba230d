//! Following a database's changes: the one updater loop of every index
//! built from a database (views, Mango json indexes, search indexes).
//!
//! Owns [`catch_up`]: from an index's [`Position`] (the update sequence
//! and purge sequence it has read up to), it reads the purges and then
//! the changes after it, a batch of at most `batch_max` documents at a
//! time from one database snapshot, and hands each batch to the index's
//! [`Follower`], which re-indexes those documents and records the next
//! position with them.
//!
//! Invariants:
//! - A follower's [`Follower::apply`] must write a batch's entries and
//!   the batch's next position in one atomic step: then a crash loses at
//!   most unfinished batches, which are redone from the recorded position.
//! - Purges since the position are applied as documents to re-index (a
//!   purged document is gone, so it has nothing to index); a purge history
//!   that no longer reaches back that far asks the follower to
//!   [`Follower::reset`], and the index rebuilds from position zero.
//! - The loop ends when a batch ran short of `batch_max` and no purge came
//!   in meanwhile: the index is then current as of that batch's snapshot.

use std::sync::atomic::Ordering;

use settee_db::{Database, Reader};

use crate::index::Progress;

/// How far an index has read its database.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    pub seq: u64,
    pub purge_seq: u64,
}

/// An index as [`catch_up`] drives it.
pub trait Follower {
    type Error: From<settee_db::Error>;

    /// Drops everything the index holds (its position becomes zero).
    fn reset(&mut self) -> Result<(), Self::Error>;

    /// Re-indexes `ids` (each with whether its winner is known deleted;
    /// duplicates possible) as `reader` sees them, and records `next` as
    /// the index's position, atomically with them.
    fn apply(
        &mut self,
        reader: &Reader,
        ids: Vec<(String, bool)>,
        next: Position,
    ) -> Result<(), Self::Error>;
}

/// Brings `follower`, at `at`, up to the database's latest state; returns
/// the position reached. `progress` counts the changes for `_active_tasks`.
pub fn catch_up<F: Follower>(
    db: &Database,
    mut at: Position,
    batch_max: usize,
    progress: &Progress,
    follower: &mut F,
) -> Result<Position, F::Error> {
    loop {
        let reader = db.reader()?;
        let dbs = reader.state()?;
        let mut next = at;
        let mut ids: Vec<(String, bool)> = Vec::new();
        if dbs.purge_seq > at.purge_seq {
            match reader.purges_after(at.purge_seq)? {
                Some(purged) => ids.extend(purged.into_iter().map(|(_, id)| (id, false))),
                None => {
                    follower.reset()?;
                    at = Position::default();
                    continue;
                }
            }
            next.purge_seq = dbs.purge_seq;
        }
        if progress.total_changes.load(Ordering::Relaxed) == 0 {
            let total = dbs.update_seq.saturating_sub(at.seq);
            progress.total_changes.store(total, Ordering::Relaxed);
        }
        let mut taken = 0usize;
        let mut last = at.seq;
        reader.changes(at.seq, false, batch_max as u64, &mut |row| {
            taken += 1;
            last = row.seq;
            let deleted = row.leaves.first().is_none_or(|l| l.1);
            ids.push((row.id, deleted));
            true
        })?;
        let caught_up = taken < batch_max;
        next.seq = if caught_up { dbs.update_seq } else { last };
        if ids.is_empty() && next == at {
            return Ok(at);
        }
        follower.apply(&reader, ids, next)?;
        at = next;
        progress
            .changes_done
            .fetch_add(taken as u64, Ordering::Relaxed);
        progress
            .updated_s
            .store(crate::index::now_s(), Ordering::Relaxed);
        if caught_up && dbs.purge_seq == at.purge_seq {
            return Ok(at);
        }
    }
}
