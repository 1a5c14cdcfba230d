//! Blocks of a view's rows with their row counts and partial reductions:
//! what lets `offset` and reduce queries over a range (or a group) read one
//! record per block instead of every row.
//!
//! A view's rows are cut into blocks `[boundary, next boundary)` of row
//! keys (after the view prefix); the first block's boundary is empty. Each
//! block's record ([`BlockRec`], under `SIG 03 VIEW BOUNDARY`) holds its row
//! count and, for a view with a reduce function, the partial reduction of
//! its rows, or none while it is stale.
//!
//! Invariants:
//! - **Counts are exact in every snapshot:** the updater writes a block's
//!   new count, and drops its partial, in the same batch as the rows that
//!   changed it ([`Blocks::touch`], [`Blocks::write_touched`]).
//! - **A partial, when present, is the reduction of exactly its block's
//!   rows** in that snapshot; readers reduce the rows of a block without
//!   one. Stale partials are recomputed, and blocks past [`BLOCK_MAX`]
//!   rows cut into blocks of [`BLOCK`], once an update has caught up
//!   ([`Blocks::refresh`]): one pass over the stale blocks' rows, so a
//!   build costs one extra read of the rows, not one per batch.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use settee_db::{IndexBatch, IndexSnapshot, IndexSpace};
use settee_index::reduce::Partial;
use settee_js::JsEngine;

use crate::error::{Result, ViewError};
use crate::layout::{self, RowValue};
use crate::reducer::Reducer;
use crate::spec::IndexSpec;

/// Rows per block when blocks are cut.
pub const BLOCK: u64 = 128;

/// Rows past which a block is cut.
pub const BLOCK_MAX: u64 = 2 * BLOCK;

/// A block's record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockRec {
    pub rows: u64,
    /// `Partial::to_bytes` of the block's reduction (reduce views only).
    pub partial: Option<Vec<u8>>,
}

/// The prefix of a view's block records.
pub fn block_prefix(sig: &[u8; 16], view: u16) -> Vec<u8> {
    let mut k = Vec::with_capacity(19);
    k.extend_from_slice(sig);
    k.push(layout::TAG_BLOCK);
    k.extend_from_slice(&view.to_be_bytes());
    k
}

pub(crate) fn successor(prefix: &[u8]) -> Vec<u8> {
    settee_index::keycodec::prefix_successor(prefix).unwrap_or_default()
}

/// The updater's copy of an index's blocks.
pub(crate) struct Blocks {
    sig: [u8; 16],
    views: Vec<BTreeMap<Vec<u8>, BlockRec>>,
    /// Blocks whose partial is stale or which are too big.
    stale: Vec<BTreeSet<Vec<u8>>>,
    /// Blocks touched since the last [`Blocks::write_touched`].
    touched: Vec<BTreeSet<Vec<u8>>>,
}

impl Blocks {
    /// The blocks stored for an index; a view with none gets its first
    /// (empty) block, written by the next batch.
    pub fn load(snap: &IndexSnapshot, spec: &IndexSpec) -> Result<Blocks> {
        let n = spec.views.len();
        let mut b = Blocks {
            sig: spec.signature,
            views: vec![BTreeMap::new(); n],
            stale: vec![BTreeSet::new(); n],
            touched: vec![BTreeSet::new(); n],
        };
        for (v, def) in spec.views.iter().enumerate() {
            let prefix = block_prefix(&spec.signature, v as u16);
            let map = &mut b.views[v];
            snap.scan(&prefix, Some(&successor(&prefix)), false, &mut |k, val| {
                let rec: BlockRec = layout::decode(val, "view block")
                    .map_err(|e| settee_db::Error::Corrupt(e.to_string()))?;
                map.insert(k[prefix.len()..].to_vec(), rec);
                Ok(true)
            })?;
            if map.is_empty() {
                map.insert(Vec::new(), BlockRec::default());
                b.touched[v].insert(Vec::new());
            }
            for (boundary, rec) in map.iter() {
                if rec.rows > BLOCK_MAX || (def.reduce.is_some() && rec.partial.is_none()) {
                    b.stale[v].insert(boundary.clone());
                }
            }
        }
        Ok(b)
    }

    /// Counts a row added (`+1`) or removed (`-1`) under `key` (after the
    /// view prefix); the block's partial is stale from now on.
    pub fn touch(&mut self, view: u16, key: &[u8], delta: i64) {
        let v = usize::from(view);
        let Some(map) = self.views.get_mut(v) else {
            return;
        };
        let Some((boundary, rec)) = map
            .range_mut::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
        else {
            return;
        };
        rec.rows = rec.rows.saturating_add_signed(delta);
        rec.partial = None;
        self.stale[v].insert(boundary.clone());
        self.touched[v].insert(boundary.clone());
    }

    /// Writes the records of the blocks touched since the last call.
    pub fn write_touched(&mut self, space: &IndexSpace, batch: &mut IndexBatch) {
        for (v, touched) in self.touched.iter_mut().enumerate() {
            let prefix = block_prefix(&self.sig, v as u16);
            for boundary in std::mem::take(touched) {
                if let Some(rec) = self.views[v].get(&boundary) {
                    let key = [&prefix[..], &boundary].concat();
                    space.put(batch, &key, &layout::encode(rec));
                }
            }
        }
    }

    /// Whether any block waits for [`Blocks::refresh`].
    pub fn needs_refresh(&self) -> bool {
        self.stale.iter().any(|s| !s.is_empty())
    }

    /// Recomputes the stale blocks from storage (which must hold every
    /// row): cuts those past [`BLOCK_MAX`] rows into blocks of [`BLOCK`],
    /// drops empty ones (but the first), computes partials of reduce
    /// views. One write per view.
    pub fn refresh(&mut self, space: &IndexSpace, spec: &IndexSpec, js: &JsEngine) -> Result<()> {
        let snap = space.snapshot()?;
        for (v, def) in spec.views.iter().enumerate() {
            let stale = std::mem::take(&mut self.stale[v]);
            if stale.is_empty() {
                continue;
            }
            let reducer = def.reduce.clone().map(|reduce| Reducer {
                reduce,
                js,
                spec,
                view_name: &def.name,
            });
            let rows_prefix = layout::view_prefix(&spec.signature, v as u16);
            let block_pre = block_prefix(&spec.signature, v as u16);
            let mut batch = IndexBatch::new();
            for boundary in stale {
                let Some(rec) = self.views[v].get(&boundary).cloned() else {
                    continue;
                };
                let next = self.views[v]
                    .range::<[u8], _>((Bound::Excluded(&boundary[..]), Bound::Unbounded))
                    .next()
                    .map(|(k, _)| k.clone());
                if rec.rows == 0 && !boundary.is_empty() {
                    self.views[v].remove(&boundary);
                    space.delete(&mut batch, &[&block_pre[..], &boundary].concat());
                    continue;
                }
                let cut = rec.rows > BLOCK_MAX;
                let from = [&rows_prefix[..], &boundary].concat();
                let to = match &next {
                    Some(n) => [&rows_prefix[..], n].concat(),
                    None => successor(&rows_prefix),
                };
                let chunks =
                    chunk_rows(&snap, &from, &to, rows_prefix.len(), cut, reducer.as_ref())?;
                space.delete(&mut batch, &[&block_pre[..], &boundary].concat());
                self.views[v].remove(&boundary);
                for (i, (start, rows, partial)) in chunks.into_iter().enumerate() {
                    let b = if i == 0 { boundary.clone() } else { start };
                    let rec = BlockRec {
                        rows,
                        partial: partial.map(|p| p.to_bytes()),
                    };
                    space.put(
                        &mut batch,
                        &[&block_pre[..], &b].concat(),
                        &layout::encode(&rec),
                    );
                    self.views[v].insert(b, rec);
                }
            }
            space.write(batch)?;
        }
        Ok(())
    }
}

/// One block cut from a run of rows: (first row key, rows, partial).
type Chunk = (Vec<u8>, u64, Option<Partial>);

/// The rows in `[from, to)` as blocks: one, or (with `cut`) blocks of
/// [`BLOCK`] rows; with their partials when `reducer` is given (none for
/// a block whose reduction fails: readers then reduce its rows and meet
/// the error themselves).
fn chunk_rows(
    snap: &IndexSnapshot,
    from: &[u8],
    to: &[u8],
    prefix_len: usize,
    cut: bool,
    reducer: Option<&Reducer<'_>>,
) -> Result<Vec<Chunk>> {
    let mut out: Vec<Chunk> = Vec::new();
    let mut start: Option<Vec<u8>> = None;
    let mut count = 0u64;
    let mut buf: Vec<(Value, String, Value)> = Vec::new();
    let mut failure = None;
    let finish = |start: Vec<u8>,
                  count: u64,
                  buf: &mut Vec<(Value, String, Value)>,
                  out: &mut Vec<Chunk>| {
        let partial = reducer.and_then(|r| r.reduce_rows(buf).ok());
        buf.clear();
        out.push((start, count, partial));
    };
    snap.scan(from, Some(to), false, &mut |k, v| {
        if cut && count == BLOCK {
            let s = start.take().unwrap_or_default();
            finish(s, count, &mut buf, &mut out);
            count = 0;
        }
        if start.is_none() {
            start = Some(k[prefix_len..].to_vec());
        }
        count += 1;
        if reducer.is_some() {
            match decode_row(v) {
                Ok(r) => buf.push(r),
                Err(e) => {
                    failure = Some(e);
                    return Ok(false);
                }
            }
        }
        Ok(true)
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    if count > 0 || out.is_empty() {
        finish(start.unwrap_or_default(), count, &mut buf, &mut out);
    }
    Ok(out)
}

/// A stored row as a reducer takes it: (key, doc id, value).
pub(crate) fn decode_row(v: &[u8]) -> Result<(Value, String, Value)> {
    let row: RowValue = layout::decode(v, "view row")?;
    let key =
        serde_json::from_str(&row.key).map_err(|e| ViewError::Corrupt(format!("row key: {e}")))?;
    let value = serde_json::from_str(&row.value)
        .map_err(|e| ViewError::Corrupt(format!("row value: {e}")))?;
    Ok((key, row.id, value))
}

/// A block overlapping a range: its boundary, where it ends (`None`: at
/// the end of the view) and its record.
pub(crate) type Overlap = (Vec<u8>, Option<Vec<u8>>, BlockRec);

/// The blocks of `view` that overlap `[lo, hi)` (row keys after the view
/// prefix; `hi = None`: to the end), in order, each with where it ends
/// (`None`: the end of the view).
pub(crate) fn overlapping(
    snap: &IndexSnapshot,
    sig: &[u8; 16],
    view: u16,
    lo: &[u8],
    hi: Option<&[u8]>,
) -> Result<Vec<Overlap>> {
    let prefix = block_prefix(sig, view);
    let end = successor(&prefix);
    let mut found: Vec<(Vec<u8>, BlockRec)> = Vec::new();
    // The block holding `lo`: the last boundary at or below it.
    let at_lo = [&prefix[..], lo, &[0]].concat();
    let decode_into = |k: &[u8], v: &[u8], found: &mut Vec<(Vec<u8>, BlockRec)>| {
        let rec: BlockRec = layout::decode(v, "view block")
            .map_err(|e| settee_db::Error::Corrupt(e.to_string()))?;
        found.push((k[prefix.len()..].to_vec(), rec));
        Ok::<(), settee_db::Error>(())
    };
    snap.scan(&prefix, Some(&at_lo), true, &mut |k, v| {
        decode_into(k, v, &mut found)?;
        Ok(false)
    })?;
    let upper = match hi {
        Some(h) => [&prefix[..], h].concat(),
        None => end,
    };
    snap.scan(&at_lo, Some(&upper), false, &mut |k, v| {
        decode_into(k, v, &mut found)?;
        Ok(true)
    })?;
    // Where each ends: the next block's boundary (one more read for the
    // last one).
    let mut next_after_last = None;
    if let Some((last, _)) = found.last() {
        let from = [&prefix[..], last, &[0]].concat();
        snap.scan(&from, Some(&successor(&prefix)), false, &mut |k, _| {
            next_after_last = Some(k[prefix.len()..].to_vec());
            Ok(false)
        })?;
    }
    let mut out = Vec::with_capacity(found.len());
    for i in 0..found.len() {
        let end = match found.get(i + 1) {
            Some((b, _)) => Some(b.clone()),
            None => next_after_last.clone(),
        };
        let (b, rec) = found[i].clone();
        out.push((b, end, rec));
    }
    Ok(out)
}

/// A block record's row count alone: the record's first field, a postcard
/// varint (no decoding of the partial behind it).
pub(crate) fn block_rows(v: &[u8]) -> Option<u64> {
    let mut n = 0u64;
    for (i, b) in v.iter().take(10).enumerate() {
        n |= u64::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            return Some(n);
        }
    }
    None
}

/// The rows of `view` below `key` (after the view prefix), from the block
/// counts and one block's rows.
pub(crate) fn rows_below(
    snap: &IndexSnapshot,
    sig: &[u8; 16],
    view: u16,
    key: &[u8],
) -> Result<u64> {
    let prefix = block_prefix(sig, view);
    let to = [&prefix[..], key, &[0]].concat();
    let mut below = 0u64;
    let mut last: Option<(Vec<u8>, u64)> = None;
    snap.scan(&prefix, Some(&to), false, &mut |k, v| {
        let rows =
            block_rows(v).ok_or_else(|| settee_db::Error::Corrupt("view block count".into()))?;
        if let Some((_, rows)) = &last {
            below += rows;
        }
        last = Some((k[prefix.len()..].to_vec(), rows));
        Ok(true)
    })?;
    let Some((boundary, _)) = last else {
        return Ok(0);
    };
    Ok(below + rows_from_boundary(snap, sig, view, &boundary, key)?)
}

/// Rows of a view from a block boundary up to (not including) `key`.
pub(crate) fn rows_from_boundary(
    snap: &IndexSnapshot,
    sig: &[u8; 16],
    view: u16,
    boundary: &[u8],
    key: &[u8],
) -> Result<u64> {
    let rows_prefix = layout::view_prefix(sig, view);
    let from = [&rows_prefix[..], boundary].concat();
    let upto = [&rows_prefix[..], key].concat();
    let mut within = 0u64;
    snap.scan(&from, Some(&upto), false, &mut |_, _| {
        within += 1;
        Ok(true)
    })?;
    Ok(within)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_rows_reads_the_count_without_decoding_the_rest() {
        for rows in [0u64, 1, 127, 128, 300, u64::MAX] {
            let rec = BlockRec {
                rows,
                partial: Some(vec![1, 2, 3]),
            };
            assert_eq!(block_rows(&layout::encode(&rec)), Some(rows));
        }
        assert_eq!(block_rows(&[0x80]), None);
    }
}
