//! Cached block counts: a view's block boundaries with the rows before
//! each, for one index state, so that a query's `offset` is a binary
//! search plus the rows of one block instead of a scan over every block
//! record below its first key.
//!
//! Invariants:
//! - **Keyed by the whole index state** (sequence, purge sequence, row
//!   counts). The updater writes rows, block counts and state in one
//!   batch, so two snapshots with the same state hold the same rows; a
//!   table built from one answers for the other even when the blocks were
//!   cut in between (the boundaries differ, but every cached count is
//!   still the exact count of rows below its boundary).
//! - **Built only for a state queried twice** (per view): under a stream
//!   of writes each query sees a new state, and building a table (one scan
//!   of all the view's block records) would cost more than the partial
//!   scan it replaces.
//! - **Bounded**: a view with more than [`TABLE_BYTES_MAX`] of boundaries
//!   is never cached (its queries scan, as without the cache).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use settee_db::IndexSnapshot;

use crate::blocks::{self, block_prefix};
use crate::error::Result;
use crate::layout::IndexState;

/// Most bytes of boundaries cached per view.
pub const TABLE_BYTES_MAX: usize = 32 << 20;

/// One view's blocks at one state.
#[derive(Debug)]
pub struct Table {
    /// Block boundaries (row keys after the view prefix), ascending; the
    /// first is empty.
    boundaries: Vec<Vec<u8>>,
    /// Rows in the blocks before each boundary's block.
    below: Vec<u64>,
}

impl Table {
    /// Reads a view's block records; `None` past [`TABLE_BYTES_MAX`].
    fn load(snap: &IndexSnapshot, sig: &[u8; 16], view: u16) -> Result<Option<Table>> {
        let prefix = block_prefix(sig, view);
        let end = blocks::successor(&prefix);
        let mut t = Table {
            boundaries: Vec::new(),
            below: Vec::new(),
        };
        let (mut sum, mut bytes) = (0u64, 0usize);
        let mut too_big = false;
        snap.scan(&prefix, Some(&end), false, &mut |k, v| {
            let rows = blocks::block_rows(v)
                .ok_or_else(|| settee_db::Error::Corrupt("view block count".into()))?;
            let boundary = &k[prefix.len()..];
            bytes += boundary.len() + 32;
            if bytes > TABLE_BYTES_MAX {
                too_big = true;
                return Ok(false);
            }
            t.boundaries.push(boundary.to_vec());
            t.below.push(sum);
            sum += rows;
            Ok(true)
        })?;
        Ok((!too_big).then_some(t))
    }

    /// Rows of the view whose keys sort before `key`: the rows of the
    /// blocks before `key`'s block, plus those of its block before it.
    fn rows_below(
        &self,
        snap: &IndexSnapshot,
        sig: &[u8; 16],
        view: u16,
        key: &[u8],
    ) -> Result<u64> {
        // The block holding `key` is the last whose boundary is <= key.
        let i = self.boundaries.partition_point(|b| b.as_slice() <= key);
        let Some(i) = i.checked_sub(1) else {
            return Ok(0);
        };
        let within = blocks::rows_from_boundary(snap, sig, view, &self.boundaries[i], key)?;
        Ok(self.below[i] + within)
    }
}

/// What is known of one view at the cached state.
#[derive(Debug)]
enum Entry {
    /// Queried once at this state.
    Seen,
    Built(Arc<Table>),
    /// Too large to cache.
    Skipped,
}

#[derive(Debug, Default)]
struct Inner {
    state: Option<IndexState>,
    views: HashMap<u16, Entry>,
}

/// The tables of one index, for its latest queried state.
#[derive(Debug, Default)]
pub struct Offsets {
    inner: Mutex<Inner>,
}

impl Offsets {
    /// Rows of `view` before `key` in `snap` (whose index state is
    /// `state`), from the cached table when there is one.
    pub fn rows_below(
        &self,
        snap: &IndexSnapshot,
        state: &IndexState,
        sig: &[u8; 16],
        view: u16,
        key: &[u8],
    ) -> Result<u64> {
        match self.table(snap, state, sig, view)? {
            Some(t) => t.rows_below(snap, sig, view, key),
            None => blocks::rows_below(snap, sig, view, key),
        }
    }

    fn table(
        &self,
        snap: &IndexSnapshot,
        state: &IndexState,
        sig: &[u8; 16],
        view: u16,
    ) -> Result<Option<Arc<Table>>> {
        {
            let mut inner = self.inner.lock();
            if inner.state.as_ref() != Some(state) {
                inner.state = Some(state.clone());
                inner.views.clear();
            }
            match inner.views.get(&view) {
                Some(Entry::Built(t)) => return Ok(Some(Arc::clone(t))),
                Some(Entry::Skipped) => return Ok(None),
                Some(Entry::Seen) => {}
                None => {
                    inner.views.insert(view, Entry::Seen);
                    return Ok(None);
                }
            }
        }
        // Built outside the lock; two queries may both build one.
        let entry = match Table::load(snap, sig, view)? {
            Some(t) => Entry::Built(Arc::new(t)),
            None => Entry::Skipped,
        };
        let built = match &entry {
            Entry::Built(t) => Some(Arc::clone(t)),
            _ => None,
        };
        let mut inner = self.inner.lock();
        if inner.state.as_ref() == Some(state) {
            inner.views.insert(view, entry);
        }
        Ok(built)
    }
}
