//! Snapshot reads: documents, revisions, changes, all-docs, local docs,
//! the purge history, and the counts CouchDB reports beside them.
//!
//! Invariant: a [`Reader`] reads one storage snapshot, so everything it
//! returns reflects whole group commits only — never half a batch — and it
//! never blocks (nor is blocked by) the writer. The one exception is
//! `Database::latest_reader`, for a single read (a document's winning
//! revision): one read of one record cannot see half a batch either.
//!
//! Counts and their cost:
//! - [`Reader::count_changes_after`] (the changes feed's `pending`) reads
//!   at most one bucket of by-seq rows ([`keys::SEQ_BUCKET`]) plus one
//!   count per later bucket (see `crate::writer`), whatever the number of
//!   changes; a database whose counts are not built yet is counted row by
//!   row.
//! - [`Reader::live_before`] (`_all_docs`' `offset` with a start key)
//!   sums the live counts of the id blocks before the key's block and
//!   counts within that block ([`crate::id_blocks`]): one Meta entry per
//!   block plus at most a block of records. A database whose blocks are
//!   not built yet (written only before they existed) is counted on the
//!   smaller side of the start key instead (both sides scanned by turns,
//!   in growing steps, stopping when one is done; the other side is the
//!   database's `doc_count` minus it): at most about twice the smaller
//!   side, and past [`OFFSET_SCAN_MAX`] documents on each side it gives
//!   up (`None`).

use std::sync::Arc;

use settee_core::doc::Body;
use settee_core::rev::Rev;
use settee_core::revtree::{RevStatus, RevTree};
use settee_store::{Keyspace, Snapshot};

use crate::error::{Error, Result};
use crate::id_blocks;
use crate::keys::{self, DbId};
use crate::poison::Poison;
use crate::records::{
    decode, DbState, DocRecord, DocRecordHead, LocalRecord, PurgeRecord, SeqRecord,
};

/// A fallible visitor of raw (key, value) pairs: `Ok(false)` stops the scan.
pub(crate) type RawVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<bool> + 'a;

/// Visits raw (key, value) pairs in `[from, to)` of a view with a visitor
/// that may fail: its first error stops the scan and is returned (after a
/// storage error, which poisons the engine).
pub(crate) fn try_scan(
    view: &dyn Snapshot,
    poison: &Poison,
    ks: Keyspace,
    from: &[u8],
    to: &[u8],
    reverse: bool,
    visit: &mut RawVisitor<'_>,
) -> Result<()> {
    let mut failure = None;
    let scan = view.scan(ks, from, to, reverse, &mut |k, v| match visit(k, v) {
        Ok(more) => more,
        Err(e) => {
            failure = Some(e);
            false
        }
    });
    poison.guard(scan)?;
    failure.map_or(Ok(()), Err)
}

/// Most documents [`Reader::live_before`] counts on each side of its key
/// before it gives up.
pub const OFFSET_SCAN_MAX: u64 = 1 << 20;

/// Documents the first scan of each side of [`Reader::live_before`]
/// examines; every later scan examines twice as many as the one before.
const OFFSET_SCAN_FIRST: u64 = 1024;

/// A document revision as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocRead {
    pub id: String,
    pub rev: Rev,
    pub deleted: bool,
    pub body: Body,
    /// Sequence of the document's latest change (`local_seq`).
    pub local_seq: u64,
    /// `_revisions`: the path from `rev` back to its root, newest first (if asked).
    pub revisions: Option<Vec<Rev>>,
    /// `_revs_info` (if asked).
    pub revs_info: Option<Vec<(Rev, RevStatus)>>,
    /// Non-deleted leaves other than the winner (if asked).
    pub conflicts: Vec<Rev>,
    /// Deleted leaves other than the winner (if asked).
    pub deleted_conflicts: Vec<Rev>,
}

/// Options of a single-document read.
#[derive(Debug, Clone, Default)]
pub struct GetOptions {
    /// A specific revision instead of the winner.
    pub rev: Option<Rev>,
    /// With `rev`: answer the newest leaf descending from it.
    pub latest: bool,
    pub revs: bool,
    pub revs_info: bool,
    pub conflicts: bool,
    pub deleted_conflicts: bool,
}

/// Which revisions an `open_revs` read asks for.
#[derive(Debug, Clone)]
pub enum OpenRevs {
    AllLeaves,
    Revs(Vec<Rev>),
}

/// One answer of an `open_revs` read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenRev {
    Found(DocRead),
    Missing(Rev),
}

/// One row of the changes feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRow {
    pub seq: u64,
    pub id: String,
    /// All leaves, winner first: (rev, deleted).
    pub leaves: Vec<(Rev, bool)>,
}

impl ChangeRow {
    pub fn deleted(&self) -> bool {
        self.leaves.first().is_some_and(|l| l.1)
    }
    pub fn winner(&self) -> &Rev {
        &self.leaves[0].0
    }
}

/// A range query over document ids (`_all_docs` and friends).
#[derive(Debug, Clone)]
pub struct IdRange {
    pub start: Option<String>,
    pub end: Option<String>,
    pub inclusive_end: bool,
    pub descending: bool,
    pub skip: u64,
    pub limit: u64,
}

impl Default for IdRange {
    fn default() -> Self {
        IdRange {
            start: None,
            end: None,
            inclusive_end: true,
            descending: false,
            skip: 0,
            limit: u64::MAX,
        }
    }
}

impl IdRange {
    /// Narrows the range to the ids in `[lo, hi]` (a namespace such as
    /// `_design/`…`_design0` or a partition's `P:`…`P;`), in its direction:
    /// a missing bound becomes the namespace's edge.
    pub fn clamp(&mut self, lo: &str, hi: &str) {
        let (low, high) = if self.descending {
            (&mut self.end, &mut self.start)
        } else {
            (&mut self.start, &mut self.end)
        };
        *low = Some(
            low.take()
                .map_or_else(|| lo.to_string(), |s| s.max(lo.to_string())),
        );
        *high = Some(
            high.take()
                .map_or_else(|| hi.to_string(), |e| e.min(hi.to_string())),
        );
    }
}

/// One `_all_docs` row: a live document (or, for key lookups, a deleted one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllDocsRow {
    pub id: String,
    pub rev: Rev,
    pub deleted: bool,
    pub doc: Option<DocRead>,
}

/// What [`Reader::count_range`] counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RangeCounts {
    pub live: u64,
    pub deleted: u64,
    /// Bytes of every stored record in the range.
    pub bytes: u64,
    /// Bytes of the live documents' records.
    pub live_bytes: u64,
}

/// A `_local` document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalDoc {
    pub id: String,
    /// `0-N`.
    pub rev: String,
    pub body: Body,
}

/// Reads of one database at one snapshot.
pub struct Reader {
    pub(crate) db: DbId,
    pub(crate) snap: Arc<dyn Snapshot>,
    pub(crate) poison: Poison,
}

fn not_found_missing() -> Error {
    Error::NotFound("missing")
}

impl Reader {
    pub(crate) fn record(&self, id: &str) -> Result<Option<DocRecord>> {
        match self
            .poison
            .guard(self.snap.get(Keyspace::Docs, &keys::doc(self.db, id)))?
        {
            Some(bytes) => Ok(Some(DocRecord::decode(&bytes)?)),
            None => Ok(None),
        }
    }

    /// The body of `rev`: inline for leaves, else in the Bodies keyspace.
    fn body(&self, id: &str, rec: &DocRecord, rev: &Rev) -> Result<Option<Body>> {
        if let Some(text) = rec.inline_body(rev) {
            return Ok(Some(Body::from_stored(text.to_string())));
        }
        let key = keys::body(self.db, id, rev);
        match self.poison.guard(self.snap.get(Keyspace::Bodies, &key))? {
            Some(bytes) => {
                let text = String::from_utf8(bytes)
                    .map_err(|_| Error::Corrupt(format!("body of {id} is not UTF-8")))?;
                Ok(Some(Body::from_stored(text)))
            }
            None => Ok(None),
        }
    }

    /// The revision tree of a document, if it exists (including deleted ones).
    pub fn rev_tree(&self, id: &str) -> Result<Option<RevTree>> {
        Ok(self.record(id)?.map(|r| r.tree))
    }

    /// Reads a document: the winner, or the revision `opts.rev`.
    pub fn get(&self, id: &str, opts: &GetOptions) -> Result<DocRead> {
        let rec = self.record(id)?.ok_or_else(not_found_missing)?;
        let (rev, deleted) = match &opts.rev {
            Some(rev) => {
                let rev = if opts.latest {
                    latest_leaves(&rec.tree, rev).into_iter().next()
                } else {
                    Some(rev.clone())
                };
                let rev = rev.ok_or_else(not_found_missing)?;
                let i = rec.tree.find(&rev).ok_or_else(not_found_missing)?;
                (rev, rec.tree.nodes()[i].deleted)
            }
            None => {
                let w = rec.tree.winner().ok_or_else(not_found_missing)?;
                if w.deleted {
                    return Err(Error::NotFound("deleted"));
                }
                (w.rev, false)
            }
        };
        self.read_rev(id, &rec, rev, deleted, opts)?
            .ok_or_else(not_found_missing)
    }

    /// Builds the answer for one revision; None when its body is not stored.
    fn read_rev(
        &self,
        id: &str,
        rec: &DocRecord,
        rev: Rev,
        deleted: bool,
        opts: &GetOptions,
    ) -> Result<Option<DocRead>> {
        let Some(body) = self.body(id, rec, &rev)? else {
            return Ok(None);
        };
        let leaves = rec.tree.leaves();
        let winner = leaves.first().map(|l| l.rev.clone());
        let others = || leaves.iter().filter(|l| Some(&l.rev) != winner.as_ref());
        Ok(Some(DocRead {
            id: id.to_string(),
            revisions: opts.revs.then(|| path_revs(&rec.tree, &rev)),
            revs_info: if opts.revs_info {
                rec.tree.revs_info(&rev)
            } else {
                None
            },
            conflicts: if opts.conflicts {
                others()
                    .filter(|l| !l.deleted)
                    .map(|l| l.rev.clone())
                    .collect()
            } else {
                vec![]
            },
            deleted_conflicts: if opts.deleted_conflicts {
                others()
                    .filter(|l| l.deleted)
                    .map(|l| l.rev.clone())
                    .collect()
            } else {
                vec![]
            },
            rev,
            deleted,
            body,
            local_seq: rec.seq,
        }))
    }

    /// Reads several revisions of a document (`open_revs`).
    pub fn open_revs(&self, id: &str, which: &OpenRevs, opts: &GetOptions) -> Result<Vec<OpenRev>> {
        let rec = self.record(id)?;
        let wanted: Vec<Rev> = match (which, &rec) {
            (OpenRevs::AllLeaves, None) => return Ok(vec![]),
            (OpenRevs::AllLeaves, Some(rec)) => {
                rec.tree.leaves().into_iter().map(|l| l.rev).collect()
            }
            (OpenRevs::Revs(revs), _) => revs.clone(),
        };
        let mut out = Vec::with_capacity(wanted.len());
        for asked in wanted {
            let Some(rec) = &rec else {
                out.push(OpenRev::Missing(asked));
                continue;
            };
            let revs = if opts.latest {
                latest_leaves(&rec.tree, &asked)
            } else {
                vec![asked.clone()]
            };
            if revs.is_empty() {
                out.push(OpenRev::Missing(asked.clone()));
            }
            for rev in revs {
                let found = match rec.tree.find(&rev) {
                    Some(i) => {
                        self.read_rev(id, rec, rev.clone(), rec.tree.nodes()[i].deleted, opts)?
                    }
                    None => None,
                };
                out.push(found.map_or(OpenRev::Missing(rev), OpenRev::Found));
            }
        }
        Ok(out)
    }

    /// Visits the changes after `since` (ascending) or all changes newest
    /// first (descending), until `visit` returns false or `limit` rows.
    pub fn changes(
        &self,
        since: u64,
        descending: bool,
        limit: u64,
        visit: &mut dyn FnMut(ChangeRow) -> bool,
    ) -> Result<()> {
        let from = keys::seq(
            self.db,
            if descending {
                0
            } else {
                since.saturating_add(1)
            },
        );
        let to = keys::db_range(self.db).1;
        let mut taken = 0u64;
        self.try_scan(Keyspace::Seqs, &from, &to, descending, &mut |k, v| {
            if taken >= limit {
                return Ok(false);
            }
            let rec = decode::<SeqRecord>(v, "seq record")?;
            if rec.leaves.is_empty() {
                return Err(Error::Corrupt("seq record without leaves".into()));
            }
            taken += 1;
            Ok(visit(ChangeRow {
                seq: keys::seq_of(k),
                id: rec.id,
                leaves: rec.leaves,
            }))
        })
    }

    /// [`try_scan`] of this reader's snapshot.
    fn try_scan(
        &self,
        ks: Keyspace,
        from: &[u8],
        to: &[u8],
        reverse: bool,
        visit: &mut RawVisitor<'_>,
    ) -> Result<()> {
        try_scan(&*self.snap, &self.poison, ks, from, to, reverse, visit)
    }

    /// Visits raw (id, value) pairs of a keyspace in an id range.
    fn scan_ids(
        &self,
        ks: Keyspace,
        q: &IdRange,
        visit: &mut dyn FnMut(&str, &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let (lo, hi) = id_bounds(self.db, q);
        self.try_scan(ks, &lo, &hi, q.descending, &mut |k, v| {
            let id = std::str::from_utf8(keys::doc_id(k))
                .map_err(|_| Error::Corrupt("document id is not UTF-8".into()))?;
            visit(id, v)
        })
    }

    /// `_all_docs`: live documents in id order within `q`.
    pub fn all_docs(
        &self,
        q: &IdRange,
        include_docs: bool,
        conflicts: bool,
        visit: &mut dyn FnMut(AllDocsRow) -> bool,
    ) -> Result<()> {
        let (mut skipped, mut taken) = (0u64, 0u64);
        let opts = GetOptions {
            conflicts,
            ..GetOptions::default()
        };
        self.scan_ids(Keyspace::Docs, q, &mut |id, v| {
            if taken >= q.limit {
                return Ok(false);
            }
            let rec = DocRecord::decode(v)?;
            let Some(w) = rec.tree.winner() else {
                return Ok(true);
            };
            if w.deleted {
                return Ok(true);
            }
            if skipped < q.skip {
                skipped += 1;
                return Ok(true);
            }
            taken += 1;
            let doc = if include_docs {
                self.read_rev(id, &rec, w.rev.clone(), false, &opts)?
            } else {
                None
            };
            Ok(visit(AllDocsRow {
                id: id.to_string(),
                rev: w.rev,
                deleted: false,
                doc,
            }))
        })
    }

    /// `_all_docs?keys=…`: one answer per key, deleted documents included
    /// (`deleted: true`), None for ids that never existed.
    pub fn all_docs_key(
        &self,
        id: &str,
        include_docs: bool,
        conflicts: bool,
    ) -> Result<Option<AllDocsRow>> {
        let Some(rec) = self.record(id)? else {
            return Ok(None);
        };
        let Some(w) = rec.tree.winner() else {
            return Ok(None);
        };
        let opts = GetOptions {
            conflicts,
            ..GetOptions::default()
        };
        let doc = if include_docs && !w.deleted {
            self.read_rev(id, &rec, w.rev.clone(), false, &opts)?
        } else {
            None
        };
        Ok(Some(AllDocsRow {
            id: id.to_string(),
            rev: w.rev,
            deleted: w.deleted,
            doc,
        }))
    }

    /// Reads a `_local` document (full id, `_local/…`).
    pub fn get_local(&self, id: &str) -> Result<Option<LocalDoc>> {
        match self
            .poison
            .guard(self.snap.get(Keyspace::Local, &keys::doc(self.db, id)))?
        {
            Some(v) => Ok(Some(local_doc(id, &v)?)),
            None => Ok(None),
        }
    }

    /// `_local_docs`: local documents in id order within `q`.
    pub fn local_docs(&self, q: &IdRange, visit: &mut dyn FnMut(LocalDoc) -> bool) -> Result<()> {
        let (mut skipped, mut taken) = (0u64, 0u64);
        self.scan_ids(Keyspace::Local, q, &mut |id, v| {
            if taken >= q.limit {
                return Ok(false);
            }
            if skipped < q.skip {
                skipped += 1;
                return Ok(true);
            }
            taken += 1;
            Ok(visit(local_doc(id, v)?))
        })
    }
}

fn local_doc(id: &str, v: &[u8]) -> Result<LocalDoc> {
    let rec: LocalRecord = decode(v, "local document")?;
    Ok(LocalDoc {
        id: id.to_string(),
        rev: format!("0-{}", rec.rev),
        body: Body::from_stored(rec.body),
    })
}

/// A tree's leaves as the changes feed lists them: winner first.
fn leaves_of(tree: &RevTree) -> Vec<(Rev, bool)> {
    tree.leaves()
        .into_iter()
        .map(|l| (l.rev, l.deleted))
        .collect()
}

fn path_revs(tree: &RevTree, rev: &Rev) -> Vec<Rev> {
    tree.path(rev)
        .map(|p| p.into_iter().map(|n| n.rev.clone()).collect())
        .unwrap_or_default()
}

/// Leaves whose history contains `rev`, best (winner order) first.
fn latest_leaves(tree: &RevTree, rev: &Rev) -> Vec<Rev> {
    tree.leaves()
        .into_iter()
        .filter(|l| {
            tree.path(&l.rev)
                .is_some_and(|p| p.iter().any(|n| n.rev == *rev))
        })
        .map(|l| l.rev)
        .collect()
}

/// The smallest key greater than `k`: `k` followed by a zero byte.
fn just_after(mut k: Vec<u8>) -> Vec<u8> {
    k.push(0);
    k
}

/// `[lo, hi)` storage bounds of an id range, honouring `descending`
/// (where `start` is the high end) and `inclusive_end`.
fn id_bounds(db: DbId, q: &IdRange) -> (Vec<u8>, Vec<u8>) {
    let (first, last) = keys::db_range(db);
    let key = |s: &str| keys::doc(db, s);
    if q.descending {
        let hi = q.start.as_deref().map_or(last, |s| just_after(key(s)));
        let lo = match q.end.as_deref() {
            Some(e) if q.inclusive_end => key(e),
            Some(e) => just_after(key(e)),
            None => first,
        };
        (lo, hi)
    } else {
        let lo = q.start.as_deref().map_or(first, key);
        let hi = match q.end.as_deref() {
            Some(e) if q.inclusive_end => just_after(key(e)),
            Some(e) => key(e),
            None => last,
        };
        (lo, hi)
    }
}

impl Reader {
    /// The database's counters as of this snapshot.
    pub fn state(&self) -> Result<DbState> {
        match self
            .poison
            .guard(self.snap.get(Keyspace::Meta, &keys::state(self.db)))?
        {
            Some(bytes) => DbState::decode(&bytes),
            None => Err(Error::Corrupt("database without a state record".into())),
        }
    }

    /// The number of changes (by-seq rows) after sequence `since`: what a
    /// changes feed that has shown everything up to `since` has left.
    pub fn count_changes_after(&self, since: u64) -> Result<u64> {
        let state = self.state()?;
        if since >= state.update_seq {
            return Ok(0);
        }
        if since == 0 {
            // Every document, live or deleted, has exactly one row.
            return Ok(state.doc_count + state.doc_del_count);
        }
        let first = since + 1;
        let mut bucket = first / keys::SEQ_BUCKET;
        let mut n = 0u64;
        let rows_to = if state.seq_index {
            if first.is_multiple_of(keys::SEQ_BUCKET) {
                None
            } else {
                bucket += 1;
                Some(keys::seq(self.db, bucket * keys::SEQ_BUCKET))
            }
        } else {
            Some(keys::db_range(self.db).1)
        };
        if let Some(to) = rows_to {
            let from = keys::seq(self.db, first);
            let scan = self
                .snap
                .scan(Keyspace::Seqs, &from, &to, false, &mut |_, _| {
                    n += 1;
                    true
                });
            self.poison.guard(scan)?;
        }
        if state.seq_index {
            if state.head_bucket >= bucket {
                n += state.head_count;
            }
            let from = keys::seq_count(self.db, bucket);
            let to = keys::seq_count_range(self.db).1;
            self.try_scan(Keyspace::Meta, &from, &to, false, &mut |_, v| {
                n += decode::<u64>(v, "by-seq count")?;
                Ok(true)
            })?;
        }
        Ok(n)
    }

    /// A document's row of the changes feed, read by id (None when it does
    /// not exist): the same row a scan of the changes would find.
    pub fn change_row(&self, id: &str) -> Result<Option<ChangeRow>> {
        Ok(self.record(id)?.map(|rec| ChangeRow {
            seq: rec.seq,
            id: id.to_string(),
            leaves: leaves_of(&rec.tree),
        }))
    }

    /// The changes-feed rows of every document (deleted ones too) whose id
    /// is in `[lo, hi)`, in id order.
    pub fn change_rows_in(&self, lo: &str, hi: &str) -> Result<Vec<ChangeRow>> {
        let q = IdRange {
            start: Some(lo.to_string()),
            end: Some(hi.to_string()),
            inclusive_end: false,
            ..IdRange::default()
        };
        let mut rows = Vec::new();
        self.scan_ids(Keyspace::Docs, &q, &mut |id, v| {
            let head = DocRecordHead::decode(v)?;
            rows.push(ChangeRow {
                seq: head.seq,
                id: id.to_string(),
                leaves: leaves_of(&head.tree),
            });
            Ok(true)
        })?;
        Ok(rows)
    }

    /// The purge history: the id and the revisions each kept purge request
    /// named, sorted by id and revisions (as CouchDB lists them).
    /// The ids purged after `purge_seq`, with their purge sequences, in
    /// order; `None` when the history no longer reaches back that far
    /// (entries past `purged_infos_limit` are dropped), so a reader that
    /// must see every purge has to start over.
    pub fn purges_after(&self, purge_seq: u64) -> Result<Option<Vec<(u64, String)>>> {
        let state = self.state()?;
        if state.purge_seq <= purge_seq {
            return Ok(Some(Vec::new()));
        }
        let (_, hi) = keys::db_range(self.db);
        let mut out = Vec::new();
        self.try_scan(
            Keyspace::Purges,
            &keys::seq(self.db, purge_seq + 1),
            &hi,
            false,
            &mut |k, v| {
                let rec = decode::<PurgeRecord>(v, "purge record")?;
                out.push((keys::seq_of(k), rec.id));
                Ok(true)
            },
        )?;
        let complete = out.first().is_some_and(|(s, _)| *s == purge_seq + 1)
            && out.len() as u64 == state.purge_seq - purge_seq;
        Ok(complete.then_some(out))
    }

    pub fn purged_infos(&self) -> Result<Vec<(String, Vec<Rev>)>> {
        let (lo, hi) = keys::db_range(self.db);
        let mut out = Vec::new();
        self.try_scan(Keyspace::Purges, &lo, &hi, false, &mut |_, v| {
            let rec = decode::<PurgeRecord>(v, "purge record")?;
            out.push((rec.id, rec.revs));
            Ok(true)
        })?;
        out.sort_by_cached_key(|(id, revs)| {
            (
                id.clone(),
                revs.iter().map(Rev::to_string).collect::<Vec<_>>(),
            )
        });
        Ok(out)
    }

    /// Live documents with ids in `lo..hi` (`None`: unbounded; each bound
    /// inclusive or not). One scan of the range.
    pub fn count_live(&self, lo: Option<(&str, bool)>, hi: Option<(&str, bool)>) -> Result<u64> {
        let (first, last) = keys::db_range(self.db);
        let from = match lo {
            None => first,
            Some((id, true)) => keys::doc(self.db, id),
            Some((id, false)) => just_after(keys::doc(self.db, id)),
        };
        let to = match hi {
            None => last,
            Some((id, true)) => just_after(keys::doc(self.db, id)),
            Some((id, false)) => keys::doc(self.db, id),
        };
        if from >= to {
            return Ok(0);
        }
        Ok(self.count_live_keys(&from, &to, u64::MAX)?.0)
    }

    /// The documents whose ids are in `[lo, hi)`: live and deleted ones
    /// and the bytes of their stored records (what a partition's info
    /// reports). One scan of the range, so its cost is the range's size.
    pub fn count_range(&self, lo: &str, hi: &str) -> Result<RangeCounts> {
        let (from, to) = (keys::doc(self.db, lo), keys::doc(self.db, hi));
        let mut c = RangeCounts::default();
        if from >= to {
            return Ok(c);
        }
        self.try_scan(Keyspace::Docs, &from, &to, false, &mut |_, v| {
            if crate::record_live::is_live(v)? {
                c.live += 1;
                c.live_bytes += v.len() as u64;
            } else {
                c.deleted += 1;
            }
            c.bytes += v.len() as u64;
            Ok(true)
        })?;
        Ok(c)
    }

    /// Counts the live documents in `[from, to)`, examining at most `max`;
    /// returns the count and, when it stopped early, where to go on.
    fn count_live_keys(&self, from: &[u8], to: &[u8], max: u64) -> Result<(u64, Option<Vec<u8>>)> {
        let (mut live, mut seen) = (0u64, 0u64);
        let mut resume = None;
        self.try_scan(Keyspace::Docs, from, to, false, &mut |k, v| {
            if seen == max {
                resume = Some(k.to_vec());
                return Ok(false);
            }
            seen += 1;
            live += u64::from(crate::record_live::is_live(v)?);
            Ok(true)
        })?;
        Ok((live, resume))
    }

    /// [`Reader::live_before`] when only whether it reaches `cap` matters:
    /// the count, stopping at `cap` (one scan of at most that many live
    /// documents, and the deleted ones among them).
    pub fn live_before_at_most(&self, start: &str, descending: bool, cap: u64) -> Result<u64> {
        let (first, last) = keys::db_range(self.db);
        let key = keys::doc(self.db, start);
        let (from, to) = if descending {
            (just_after(key), last)
        } else {
            (first, key)
        };
        if cap == 0 {
            return Ok(0);
        }
        let mut live = 0u64;
        self.try_scan(Keyspace::Docs, &from, &to, !descending, &mut |_, v| {
            live += u64::from(crate::record_live::is_live(v)?);
            Ok(live < cap)
        })?;
        Ok(live)
    }

    /// Live documents before `start` in scan order: ids below it, or above
    /// it when `descending` (`_all_docs`' `offset` for a range starting
    /// there). Counted on the smaller side of `start` (see the module
    /// doc); `None` when both sides hold more than [`OFFSET_SCAN_MAX`]
    /// documents.
    pub fn live_before(&self, start: &str, descending: bool) -> Result<Option<u64>> {
        if let Some(n) = self.live_before_by_blocks(start, descending)? {
            return Ok(Some(n));
        }
        let (first, last) = keys::db_range(self.db);
        let key = keys::doc(self.db, start);
        let split = if descending { just_after(key) } else { key };
        // (from, to, counted so far) of the side before `start` and of the
        // side after it.
        let (mut before, mut after) = if descending {
            ((split.clone(), last, 0u64), (first, split, 0u64))
        } else {
            ((first, split.clone(), 0u64), (split, last, 0u64))
        };
        let mut step = OFFSET_SCAN_FIRST;
        let mut examined = 0u64;
        let total = self.state()?.doc_count;
        while examined < OFFSET_SCAN_MAX {
            let (n, resume) = self.count_live_keys(&before.0, &before.1, step)?;
            before.2 += n;
            match resume {
                None => return Ok(Some(before.2)),
                Some(k) => before.0 = k,
            }
            let (n, resume) = self.count_live_keys(&after.0, &after.1, step)?;
            after.2 += n;
            match resume {
                None => return Ok(Some(total.saturating_sub(after.2))),
                Some(k) => after.0 = k,
            }
            examined += step;
            step = (step * 2).min(OFFSET_SCAN_MAX.saturating_sub(examined));
        }
        Ok(None)
    }

    /// [`Reader::live_before`] from the id blocks; `None` when the
    /// database has none yet.
    fn live_before_by_blocks(&self, start: &str, descending: bool) -> Result<Option<u64>> {
        let found = id_blocks::block_of(&*self.snap, &self.poison, self.db, start.as_bytes())?;
        let Some((below, boundary)) = found else {
            return Ok(None);
        };
        let from = keys::doc_bytes(self.db, &boundary);
        let key = keys::doc(self.db, start);
        // Live ids below `start`, or up to it when descending.
        let to = if descending { just_after(key) } else { key };
        let upto = below + self.count_live_keys(&from, &to, u64::MAX)?.0;
        Ok(Some(if descending {
            self.state()?.doc_count.saturating_sub(upto)
        } else {
            upto
        }))
    }

    /// Visits every document record (deleted ones too) in id order.
    /// Visits the text of every body kept outside the by-id records
    /// (revisions that are no longer leaves).
    pub(crate) fn scan_stored_bodies(&self, visit: &mut dyn FnMut(&str)) -> Result<()> {
        let (lo, hi) = keys::db_range(self.db);
        self.poison.guard(
            self.snap
                .scan(Keyspace::Bodies, &lo, &hi, false, &mut |_, v| {
                    if let Ok(text) = std::str::from_utf8(v) {
                        visit(text);
                    }
                    true
                }),
        )
    }

    pub(crate) fn scan_records(
        &self,
        visit: &mut dyn FnMut(&str, &DocRecord) -> bool,
    ) -> Result<()> {
        self.scan_ids(Keyspace::Docs, &IdRange::default(), &mut |id, v| {
            Ok(visit(id, &DocRecord::decode(v)?))
        })
    }
}
