//! Snapshot reads: documents, revisions, changes, all-docs, local docs.
//!
//! Invariant: a [`Reader`] reads one storage snapshot, so everything it
//! returns reflects whole group commits only — never half a batch — and it
//! never blocks (nor is blocked by) the writer. The one exception is
//! `Database::latest_reader`, for a single read (a document's winning
//! revision): one read of one record cannot see half a batch either.

use std::sync::Arc;

use settee_core::doc::Body;
use settee_core::rev::Rev;
use settee_core::revtree::{RevStatus, RevTree};
use settee_store::{Keyspace, Snapshot};

use crate::error::{Error, Result};
use crate::keys::{self, DbId};
use crate::poison::Poison;
use crate::records::{decode, DocRecord, LocalRecord, SeqRecord};

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

/// One `_all_docs` row: a live document (or, for key lookups, a deleted one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllDocsRow {
    pub id: String,
    pub rev: Rev,
    pub deleted: bool,
    pub doc: Option<DocRead>,
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
        let mut failure = None;
        let scan = self
            .snap
            .scan(Keyspace::Seqs, &from, &to, descending, &mut |k, v| {
                if taken >= limit {
                    return false;
                }
                match decode::<SeqRecord>(v, "seq record") {
                    Ok(rec) if rec.leaves.is_empty() => {
                        failure = Some(Error::Corrupt("seq record without leaves".into()));
                        false
                    }
                    Ok(rec) => {
                        taken += 1;
                        visit(ChangeRow {
                            seq: keys::seq_of(k),
                            id: rec.id,
                            leaves: rec.leaves,
                        })
                    }
                    Err(e) => {
                        failure = Some(e);
                        false
                    }
                }
            });
        self.poison.guard(scan)?;
        failure.map_or(Ok(()), Err)
    }

    /// Visits raw (id, value) pairs of a keyspace in an id range.
    fn scan_ids(
        &self,
        ks: Keyspace,
        q: &IdRange,
        visit: &mut dyn FnMut(&str, &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let (lo, hi) = id_bounds(self.db, q);
        let mut failure = None;
        let scan = self.snap.scan(ks, &lo, &hi, q.descending, &mut |k, v| {
            let Ok(id) = std::str::from_utf8(keys::doc_id(k)) else {
                failure = Some(Error::Corrupt("document id is not UTF-8".into()));
                return false;
            };
            match visit(id, v) {
                Ok(more) => more,
                Err(e) => {
                    failure = Some(e);
                    false
                }
            }
        });
        self.poison.guard(scan)?;
        failure.map_or(Ok(()), Err)
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
    /// Visits every document record (deleted ones too) in id order.
    pub(crate) fn scan_records(
        &self,
        visit: &mut dyn FnMut(&str, &DocRecord) -> bool,
    ) -> Result<()> {
        self.scan_ids(Keyspace::Docs, &IdRange::default(), &mut |id, v| {
            Ok(visit(id, &DocRecord::decode(v)?))
        })
    }
}
