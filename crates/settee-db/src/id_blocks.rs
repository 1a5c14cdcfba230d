//! Live-document counts per block of ids: what makes `_all_docs`'
//! `offset` with a start key cost one block instead of one side of the
//! database.
//!
//! The by-id keyspace of a database is cut into blocks `[boundary, next
//! boundary)`; the first block's boundary is the empty id, so every id
//! has exactly one block. Each block's record count (live and deleted
//! documents) and live count sit under its Meta key
//! ([`keys::id_block`]), written by the database's writer in the same
//! batch as the documents they count.
//!
//! Invariants:
//! - **Exact, in every snapshot.** For every block, the stored counts are
//!   those of the by-id records in its range in the same committed state
//!   (the writer applies a group's changes to the blocks it touched in
//!   that group's batch). A reader's block counts and documents therefore
//!   agree.
//! - **Bounded blocks.** A block is cut by the first group after one
//!   that took it past [`BLOCK_MAX`] records; an emptied block other than
//!   the first is removed. So a count reads one Meta entry per block
//!   before the key and at most about [`BLOCK_MAX`] (plus one group's)
//!   records of its block.
//! - **A cut reads the block's end only.** Chunks are taken off the end
//!   of the block — [`TAIL`] records, then [`BLOCK`] at a time — until
//!   what is left holds at most [`BLOCK_MAX`]; what is left keeps the
//!   block's boundary and its counts are the block's minus the chunks'
//!   (exact, so not read). Documents appended in id order (bulk loads,
//!   replication into an empty database) grow the last block, so a cut
//!   reads [`TAIL`] records per `BLOCK_MAX - TAIL` appended rather than
//!   the whole block each time.
//! - **Appends start new blocks without reading.** The writer knows the
//!   last id of a block when it built, cut or started it (or the block is
//!   empty), and keeps that knowledge through its groups (a purge of the
//!   last record forgets it). A new record past a known last id of a block
//!   already holding [`BLOCK`] records starts a new block at its id: no
//!   record of the old block lies at or past it, so the new block's counts
//!   are this group's alone. Documents appended in id order thus never
//!   need a cut (`bench/RESULTS.md`: the backward reads of cuts were ~15%
//!   of a bulk load's writer instructions).
//! - **Built once.** A database whose blocks were never written (created
//!   before they existed) gets them from a scan by its writer's first
//!   group; until then readers count the old way (see `crate::reader`).
//!   Building and splitting read storage, so the writer drains its
//!   pipeline first.

use std::collections::BTreeMap;

use settee_store::{Batch, Keyspace, Snapshot};

use crate::error::{Error, Result};
use crate::keys::{self, DbId};
use crate::poison::Poison;
use crate::reader::try_scan;
use crate::records::{decode, encode};

/// Records per block when a block is cut. Smaller blocks make a count
/// scan fewer records (at most about [`BLOCK_MAX`]) and read more block
/// entries (one per block before the key): at 1,024 an `_all_docs` page
/// of 50 by start key over 20k documents took p50 0.32 ms where 4,096 took
/// 0.48 ms (one Python client, machine under a build's load; issue 43).
pub const BLOCK: u64 = 1024;

/// Records past which a block is cut again.
pub const BLOCK_MAX: u64 = 2 * BLOCK;

/// Records of the first chunk a cut takes off a block's end.
pub const TAIL: u64 = BLOCK / 4;

/// The counts of one block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    /// By-id records (live and deleted documents).
    pub records: u64,
    pub live: u64,
}

/// What the writer knows of the last (greatest) id of a block's records.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Last {
    /// Not known (blocks read back from storage, what a cut leaves).
    Unknown,
    /// The block holds no record.
    Empty,
    Id(Box<[u8]>),
}

impl Last {
    /// What a read of a block of `records` records knows: `last`, the
    /// last id it saw, when it saw the block's end.
    fn of(records: u64, last: Option<&[u8]>) -> Last {
        match last {
            Some(id) => Last::Id(id.into()),
            None if records == 0 => Last::Empty,
            None => Last::Unknown,
        }
    }

    /// Whether every record of the block lies before `id`.
    fn before(&self, id: &[u8]) -> bool {
        match self {
            Last::Unknown => false,
            Last::Empty => true,
            Last::Id(last) => **last < *id,
        }
    }
}

/// One block in the writer's copy: its counts and what it knows of its
/// last id.
#[derive(Debug, Clone)]
struct Block {
    counts: Counts,
    last: Last,
}

/// [`Last`] while a group's run of changes in one block is summed: an id
/// of the group's borrowed until the run ends.
enum RunLast<'a> {
    Stored(Last),
    Id(&'a [u8]),
}

impl RunLast<'_> {
    fn before(&self, id: &[u8]) -> bool {
        match self {
            RunLast::Stored(last) => last.before(id),
            RunLast::Id(last) => *last < id,
        }
    }

    fn is(&self, id: &[u8]) -> bool {
        match self {
            RunLast::Stored(Last::Id(last)) => **last == *id,
            RunLast::Stored(_) => false,
            RunLast::Id(last) => *last == id,
        }
    }
}

/// Consecutive changes of a group in the block `[boundary, next)`.
struct Run<'a> {
    boundary: Box<[u8]>,
    next: Option<Box<[u8]>>,
    counts: Counts,
    last: RunLast<'a>,
}

impl Run<'_> {
    fn holds(&self, id: &[u8]) -> bool {
        *self.boundary <= *id && self.next.as_deref().is_none_or(|n| id < n)
    }
}

/// A group's changes of the counts, one per document: its id, and records
/// and live each -1, 0 or +1. The ids share one buffer (no allocation per
/// document).
#[derive(Debug, Default)]
pub(crate) struct Deltas {
    ids: String,
    /// Where each id ends in `ids`, and its changes.
    list: Vec<(usize, i64, i64)>,
}

impl Deltas {
    pub(crate) fn push(&mut self, id: &str, records: i64, live: i64) {
        self.ids.push_str(id);
        self.list.push((self.ids.len(), records, live));
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Keeps the first `n` changes.
    pub(crate) fn truncate(&mut self, n: usize) {
        self.list.truncate(n);
        self.ids.truncate(self.list.last().map_or(0, |d| d.0));
    }

    /// (id, records, live) of each change, in order.
    fn iter(&self) -> impl Iterator<Item = (&str, i64, i64)> + '_ {
        let mut start = 0;
        self.list.iter().map(move |&(end, records, live)| {
            let id = &self.ids[start..end];
            start = end;
            (id, records, live)
        })
    }
}

/// The writer's copy of a database's blocks: the latest counts, those of
/// groups still in the pipeline included.
pub(crate) struct IdBlocks {
    db: DbId,
    blocks: BTreeMap<Box<[u8]>, Block>,
    /// Boundaries of blocks past [`BLOCK_MAX`], cut by the next group.
    oversized: Vec<Box<[u8]>>,
}

/// A block read from storage: its boundary, counts and last id (when
/// the read saw it).
type Chunk = (Box<[u8]>, Counts, Option<Box<[u8]>>);

/// A block's boundary and the next block's (`None`: the last block).
type Bounds = (Box<[u8]>, Option<Box<[u8]>>);

/// Blocks replacing a range of the map, read from storage: what
/// [`IdBlocks::cut`] found, applied by [`IdBlocks::apply_cuts`].
pub(crate) type Cuts = Vec<(Box<[u8]>, Vec<Chunk>)>;

impl IdBlocks {
    /// The blocks stored for `db`, or `None` when it has none yet.
    pub(crate) fn load(view: &dyn Snapshot, poison: &Poison, db: DbId) -> Result<Option<IdBlocks>> {
        let (lo, hi) = keys::id_block_range(db);
        let mut blocks: BTreeMap<Box<[u8]>, Block> = BTreeMap::new();
        try_scan(
            view,
            poison,
            Keyspace::Meta,
            &lo,
            &hi,
            false,
            &mut |k, v| {
                let counts = decode::<Counts>(v, "id block")?;
                let last = Last::of(counts.records, None);
                blocks.insert(keys::id_block_boundary(k).into(), Block { counts, last });
                Ok(true)
            },
        )?;
        if blocks.is_empty() {
            return Ok(None);
        }
        if !blocks.contains_key(&[][..]) {
            return Err(Error::Corrupt("id blocks lack the first block".into()));
        }
        let oversized = blocks
            .iter()
            .filter(|(_, b)| b.counts.records > BLOCK_MAX)
            .map(|(b, _)| b.clone())
            .collect();
        Ok(Some(IdBlocks {
            db,
            blocks,
            oversized,
        }))
    }

    /// Blocks for a database that has none stored: every record counted
    /// (one scan of the by-id keyspace), written to `batch`.
    pub(crate) fn build(
        view: &dyn Snapshot,
        poison: &Poison,
        db: DbId,
        batch: &mut Batch,
    ) -> Result<IdBlocks> {
        let chunks = chunk(view, poison, db, &[], None)?;
        let mut blocks = IdBlocks {
            db,
            blocks: BTreeMap::new(),
            oversized: Vec::new(),
        };
        blocks.apply_cuts(batch, vec![(Box::from(&[][..]), chunks)]);
        Ok(blocks)
    }

    /// Whether a block waits to be cut (the caller drains its pipeline and
    /// calls [`IdBlocks::cut`]).
    pub(crate) fn needs_cut(&self) -> bool {
        !self.oversized.is_empty()
    }

    /// Reads the ends of the oversized blocks from storage (which must
    /// hold every write) and cuts each (see [`cut_end`]). Changes nothing:
    /// [`IdBlocks::apply_cuts`] does.
    pub(crate) fn cut(&self, view: &dyn Snapshot, poison: &Poison) -> Result<Cuts> {
        let mut cuts = Vec::with_capacity(self.oversized.len());
        for b in &self.oversized {
            let whole = self
                .blocks
                .get(b)
                .ok_or_else(|| Error::Corrupt("oversized id block is gone".into()))?
                .counts;
            let next = self
                .blocks
                .range::<[u8], _>((
                    std::ops::Bound::Excluded(&b[..]),
                    std::ops::Bound::Unbounded,
                ))
                .next()
                .map(|(k, _)| k.clone());
            let chunks = cut_end(view, poison, self.db, b, next.as_deref(), whole)?;
            cuts.push((b.clone(), chunks));
        }
        Ok(cuts)
    }

    /// Replaces each cut block by its chunks, in the map and in `batch`.
    pub(crate) fn apply_cuts(&mut self, batch: &mut Batch, cuts: Cuts) {
        for (old, chunks) in cuts {
            self.blocks.remove(&old);
            batch.delete(Keyspace::Meta, keys::id_block(self.db, &old));
            for (b, counts, last) in chunks {
                batch.put(Keyspace::Meta, keys::id_block(self.db, &b), encode(&counts));
                let last = Last::of(counts.records, last.as_deref());
                self.blocks.insert(b, Block { counts, last });
            }
        }
        self.oversized.clear();
    }

    /// Applies one group's document changes to the blocks and writes the
    /// blocks they changed to the group's batch. A new record past the
    /// known last id of a full block starts a new block (see the module
    /// doc).
    pub(crate) fn apply(&mut self, batch: &mut Batch, deltas: &Deltas) -> Result<()> {
        let mut changed: BTreeMap<Box<[u8]>, Counts> = BTreeMap::new();
        // Consecutive changes in one block (ids in order mostly are) are
        // summed in a run, without a search or a copy of an id each.
        let mut run: Option<Run<'_>> = None;
        for (text, records, live) in deltas.iter() {
            let id = text.as_bytes();
            let r = match &mut run {
                Some(r) if r.holds(id) => r,
                _ => {
                    if let Some(r) = run.take() {
                        self.end_run(r, &mut changed);
                    }
                    run.insert(self.start_run(id, &changed)?)
                }
            };
            if records > 0 && r.counts.records >= BLOCK && r.last.before(id) {
                // A new block at `id`: nothing of the old one lies there.
                let fresh = Run {
                    boundary: id.into(),
                    next: r.next.take(),
                    counts: Counts::default(),
                    last: RunLast::Stored(Last::Empty),
                };
                let old = std::mem::replace(r, fresh);
                self.end_run(old, &mut changed);
                self.blocks.insert(
                    id.into(),
                    Block {
                        counts: Counts::default(),
                        last: Last::Empty,
                    },
                );
            }
            if records > 0 && r.last.before(id) {
                r.last = RunLast::Id(id);
            } else if records < 0 && r.last.is(id) {
                // A purge of the last record: the one before is not known.
                r.last = RunLast::Stored(Last::Unknown);
            }
            let bad = || Error::Corrupt(format!("id block count of {text:?}"));
            r.counts.records = r
                .counts
                .records
                .checked_add_signed(records)
                .ok_or_else(bad)?;
            r.counts.live = r.counts.live.checked_add_signed(live).ok_or_else(bad)?;
        }
        if let Some(r) = run {
            self.end_run(r, &mut changed);
        }
        for (b, c) in changed {
            let key = keys::id_block(self.db, &b);
            if c.records == 0 && !b.is_empty() {
                batch.delete(Keyspace::Meta, key);
                self.blocks.remove(&b);
                continue;
            }
            batch.put(Keyspace::Meta, key, encode(&c));
            if c.records > BLOCK_MAX {
                self.oversized.push(b.clone());
            }
            let block = self
                .blocks
                .get_mut(&b)
                .expect("changed blocks are in the map");
            block.counts = c;
            if c.records == 0 {
                block.last = Last::Empty;
            }
        }
        self.oversized.sort_unstable();
        self.oversized.dedup();
        Ok(())
    }

    /// A run in the block holding `id`, with its counts so far this group.
    fn start_run<'a>(
        &mut self,
        id: &[u8],
        changed: &BTreeMap<Box<[u8]>, Counts>,
    ) -> Result<Run<'a>> {
        let (boundary, next) = self.find(id)?;
        let block = self
            .blocks
            .get_mut(&boundary)
            .expect("found blocks are in the map");
        let counts = changed.get(&boundary).copied().unwrap_or(block.counts);
        let last = RunLast::Stored(std::mem::replace(&mut block.last, Last::Unknown));
        Ok(Run {
            boundary,
            next,
            counts,
            last,
        })
    }

    /// Puts a run's last id back in its block and its counts in `changed`.
    fn end_run(&mut self, run: Run<'_>, changed: &mut BTreeMap<Box<[u8]>, Counts>) {
        let last = match run.last {
            RunLast::Stored(last) => last,
            RunLast::Id(id) => Last::Id(id.into()),
        };
        if let Some(block) = self.blocks.get_mut(&run.boundary) {
            block.last = last;
        }
        changed.insert(run.boundary, run.counts);
    }

    /// The block holding `id` and the next block's boundary.
    fn find(&self, id: &[u8]) -> Result<Bounds> {
        let mut around = self
            .blocks
            .range::<[u8], _>((std::ops::Bound::Unbounded, std::ops::Bound::Included(id)));
        let (b, _) = around
            .next_back()
            .ok_or_else(|| Error::Corrupt("id blocks lack the first block".into()))?;
        let next = self
            .blocks
            .range::<[u8], _>((std::ops::Bound::Excluded(id), std::ops::Bound::Unbounded))
            .next()
            .map(|(k, _)| k.clone());
        Ok((b.clone(), next))
    }
}

/// The Docs keys of the ids `[from, to)` of `db` (to the end of the
/// database when `to` is `None`).
fn records_range(db: DbId, from: &[u8], to: Option<&[u8]>) -> (Vec<u8>, Vec<u8>) {
    let hi = match to {
        Some(t) => keys::doc_bytes(db, t),
        None => keys::db_range(db).1,
    };
    (keys::doc_bytes(db, from), hi)
}

/// The by-id records of `db` in `[from, to)` (to the end of the database
/// when `to` is `None`), in chunks of [`BLOCK`] records: the first chunk
/// starts at `from` (even when its first record is further on), each
/// other at its first record. An empty range is one empty chunk.
fn chunk(
    view: &dyn Snapshot,
    poison: &Poison,
    db: DbId,
    from: &[u8],
    to: Option<&[u8]>,
) -> Result<Vec<Chunk>> {
    let (lo, hi) = records_range(db, from, to);
    let mut chunks: Vec<Chunk> = vec![(from.into(), Counts::default(), None)];
    try_scan(
        view,
        poison,
        Keyspace::Docs,
        &lo,
        &hi,
        false,
        &mut |k, v| {
            let live = crate::record_live::is_live(v)?;
            let last = chunks.len() - 1;
            if chunks[last].1.records == BLOCK {
                chunks.push((keys::doc_id(k).into(), Counts::default(), None));
            }
            let (_, c, last) = chunks.last_mut().expect("at least one chunk");
            c.records += 1;
            c.live += u64::from(live);
            *last = Some(keys::doc_id(k).into());
            Ok(true)
        },
    )?;
    Ok(chunks)
}

/// The block `[from, to)` (to the end of the database when `to` is
/// `None`), holding `whole`, cut: chunks taken off its end, read
/// backwards — [`TAIL`] records, then [`BLOCK`] at a time — until at most
/// [`BLOCK_MAX`] records are left before them; those stay a block at
/// `from` with the counts left over. In id order. Storage disagreeing with
/// `whole` is corruption.
fn cut_end(
    view: &dyn Snapshot,
    poison: &Poison,
    db: DbId,
    from: &[u8],
    to: Option<&[u8]>,
    whole: Counts,
) -> Result<Vec<Chunk>> {
    let (lo, hi) = records_range(db, from, to);
    let disagree = || Error::Corrupt("id block counts disagree with its records".into());
    // Newest first; `left` is what the chunks taken so far leave. The
    // first record read of a chunk is its last id.
    let mut taken: Vec<Chunk> = Vec::new();
    let mut current = Counts::default();
    let mut current_last: Option<Box<[u8]>> = None;
    let mut size = TAIL;
    let mut left = whole;
    let mut done = left.records <= BLOCK_MAX;
    if !done {
        try_scan(view, poison, Keyspace::Docs, &lo, &hi, true, &mut |k, v| {
            current.records += 1;
            current.live += u64::from(crate::record_live::is_live(v)?);
            if current_last.is_none() {
                current_last = Some(keys::doc_id(k).into());
            }
            if current.records < size {
                return Ok(true);
            }
            left.records = left
                .records
                .checked_sub(current.records)
                .ok_or_else(disagree)?;
            left.live = left.live.checked_sub(current.live).ok_or_else(disagree)?;
            taken.push((
                keys::doc_id(k).into(),
                std::mem::take(&mut current),
                current_last.take(),
            ));
            size = BLOCK;
            done = left.records <= BLOCK_MAX;
            Ok(!done)
        })?;
    }
    if !done {
        // Fewer records than the block counts.
        return Err(disagree());
    }
    let mut chunks = Vec::with_capacity(taken.len() + 1);
    chunks.push((Box::from(from), left, None));
    chunks.extend(taken.into_iter().rev());
    Ok(chunks)
}

/// What a reader needs to count the live documents below a key: the sum
/// over the blocks before the key's block and where that block starts.
/// `None` when the database has no blocks yet.
pub(crate) fn block_of(
    view: &dyn Snapshot,
    poison: &Poison,
    db: DbId,
    id: &[u8],
) -> Result<Option<(u64, Box<[u8]>)>> {
    let (lo, _) = keys::id_block_range(db);
    let mut hi = keys::id_block(db, id);
    hi.push(0);
    let mut below = 0u64;
    let mut last: Option<(Counts, Box<[u8]>)> = None;
    try_scan(
        view,
        poison,
        Keyspace::Meta,
        &lo,
        &hi,
        false,
        &mut |k, v| {
            let c = decode::<Counts>(v, "id block")?;
            if let Some((prev, _)) = &last {
                below += prev.live;
            }
            last = Some((c, keys::id_block_boundary(k).into()));
            Ok(true)
        },
    )?;
    Ok(last.map(|(_, b)| (below, b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_encode_round_trip() {
        let c = Counts {
            records: 9000,
            live: 8000,
        };
        assert_eq!(decode::<Counts>(&encode(&c), "id block").unwrap(), c);
    }
}
