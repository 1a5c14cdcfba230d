//! Stored record formats. Every value starts with a format version byte,
//! followed by the postcard encoding of the record.
//!
//! Invariant (TigerBeetle-style): records are checked right after decoding —
//! a revision tree that fails [`RevTree::check`] is reported as corruption,
//! never used.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use settee_core::rev::Rev;
use settee_core::revtree::RevTree;

use crate::error::{Error, Result};
use crate::keys::DbId;

pub(crate) const FORMAT_V1: u8 = 1;

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    encode_into(&mut out, value);
    out
}

/// Appends the encoding of `value` (as [`encode`] makes it) to `out`.
pub fn encode_into<T: Serialize>(out: &mut Vec<u8>, value: &T) {
    out.push(FORMAT_V1);
    let buf = std::mem::take(out);
    // Serializing plain structs into a Vec cannot fail.
    *out = postcard::to_extend(value, buf).expect("postcard serialization of a record");
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    match bytes.split_first() {
        Some((&FORMAT_V1, rest)) => {
            postcard::from_bytes(rest).map_err(|e| Error::Corrupt(format!("{what}: {e}")))
        }
        _ => Err(Error::Corrupt(format!("{what}: unknown format version"))),
    }
}

/// By-id record of one document.
///
/// The bodies of the current leaves live inline here, so writing a new
/// document is two puts (by-id, by-seq) and reading the winner one get.
/// Bodies of revisions that stopped being leaves move to the `Bodies`
/// keyspace, where compaction finds and drops them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocRecord {
    /// The sequence number of the document's latest change.
    pub seq: u64,
    pub tree: RevTree,
    /// Leaf bodies: (index into `tree.nodes()`, JSON body text).
    pub inline: Vec<(u32, String)>,
}

impl DocRecord {
    pub fn decode(bytes: &[u8]) -> Result<DocRecord> {
        let rec: DocRecord = decode(bytes, "document record")?;
        rec.tree
            .check()
            .map_err(|e| Error::Corrupt(e.to_string()))?;
        if rec.tree.is_empty() {
            return Err(Error::Corrupt("empty revision tree".into()));
        }
        if rec
            .inline
            .iter()
            .any(|(i, _)| *i as usize >= rec.tree.len())
        {
            return Err(Error::Corrupt("inline body of a missing revision".into()));
        }
        Ok(rec)
    }

    /// True when the winning revision is a deletion.
    pub fn is_deleted(&self) -> bool {
        self.tree.winner().is_some_and(|w| w.deleted)
    }

    /// The inline body of `rev`, if it is a leaf stored here.
    pub fn inline_body(&self, rev: &Rev) -> Option<&str> {
        let i = self.tree.find(rev)? as u32;
        self.inline
            .iter()
            .find(|(n, _)| *n == i)
            .map(|(_, b)| b.as_str())
    }

    /// Body bytes of the winning revision and the lengths of its
    /// attachments, as sent (for `sizes.external`, which counts
    /// attachments as CouchDB's does).
    pub fn winner_bytes(&self) -> u64 {
        self.tree
            .winner_node()
            .and_then(|w| self.inline_body(&w.rev))
            .map_or(0, |b| {
                let atts: u64 = if settee_core::att::has_stored(b) {
                    settee_core::att::stored_stubs(b)
                        .map(|stubs| stubs.iter().map(|(_, s)| s.length).sum())
                        .unwrap_or(0)
                } else {
                    0
                };
                b.len() as u64 + atts
            })
    }
}

/// By-seq record: what the changes feed shows for one document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqRecord {
    pub id: String,
    /// All leaves, winner first: (rev, deleted).
    pub leaves: Vec<(Rev, bool)>,
}

/// Catalog entry of a database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DbMeta {
    pub id: DbId,
    /// Creation time in microseconds since the Unix epoch (the instance start time).
    pub created_us: u64,
    /// A partitioned database (`PUT /db?partitioned=true`): every
    /// document id but design and local ones is `partition:id`. Fixed at
    /// creation.
    pub partitioned: bool,
}

/// The catalog entry as written before databases could be partitioned.
#[derive(Deserialize)]
struct DbMetaV1 {
    id: DbId,
    created_us: u64,
}

impl DbMeta {
    /// Decodes a catalog entry of either format (an entry written before
    /// partitioned databases is an ordinary database).
    pub fn decode(bytes: &[u8]) -> Result<DbMeta> {
        decode::<DbMeta>(bytes, "catalog entry").or_else(|e| {
            let old: DbMetaV1 = decode(bytes, "catalog entry").map_err(|_| e)?;
            Ok(DbMeta {
                id: old.id,
                created_us: old.created_us,
                partitioned: false,
            })
        })
    }
}

/// Counters of a database, rewritten atomically with every batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DbState {
    pub update_seq: u64,
    pub doc_count: u64,
    pub doc_del_count: u64,
    pub purge_seq: u64,
    /// Sum of the winning revisions' body bytes.
    pub external_bytes: u64,
    pub revs_limit: u64,
    /// How many purge requests the purge history keeps (the newest).
    pub purged_infos_limit: u64,
    /// Whether the by-seq counts (see [`crate::keys::seq_count`]) are
    /// maintained for this database. Written as `true` by every writer
    /// that has built them; a state record from before they existed
    /// decodes as `false`.
    pub seq_index: bool,
    /// The highest bucket of by-seq rows and its count, kept here rather
    /// than under its own key: this record is written by every group
    /// anyway, and most groups change no other bucket. Buckets above it
    /// have no rows and no count.
    pub head_bucket: u64,
    pub head_count: u64,
}

impl Default for DbState {
    fn default() -> Self {
        DbState {
            update_seq: 0,
            doc_count: 0,
            doc_del_count: 0,
            purge_seq: 0,
            external_bytes: 0,
            revs_limit: 1000,
            purged_infos_limit: 1000,
            seq_index: true,
            head_bucket: 0,
            head_count: 0,
        }
    }
}

/// The state record as written before `purged_infos_limit` and the by-seq
/// counts existed.
#[derive(Deserialize)]
struct DbStateV1 {
    update_seq: u64,
    doc_count: u64,
    doc_del_count: u64,
    purge_seq: u64,
    external_bytes: u64,
    revs_limit: u64,
}

impl DbState {
    /// Decodes a state record, in the current layout or the first one
    /// (which lacks the fields after `revs_limit`: the default limit, no
    /// by-seq counts yet).
    pub fn decode(bytes: &[u8]) -> Result<DbState> {
        decode::<DbState>(bytes, "database state").or_else(|e| {
            let old: DbStateV1 = decode(bytes, "database state").map_err(|_| e)?;
            Ok(DbState {
                update_seq: old.update_seq,
                doc_count: old.doc_count,
                doc_del_count: old.doc_del_count,
                purge_seq: old.purge_seq,
                external_bytes: old.external_bytes,
                revs_limit: old.revs_limit,
                purged_infos_limit: 1000,
                seq_index: false,
                head_bucket: 0,
                head_count: 0,
            })
        })
    }
}

/// A `_local` document: revision counter and body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalRecord {
    pub rev: u64,
    pub body: String,
}

/// One purge request as recorded in the purge history (keyed by its
/// purge sequence): the id and the revisions the request named, purged or
/// not (as CouchDB records them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeRecord {
    pub id: String,
    pub revs: Vec<Rev>,
}

/// The head of an encoded [`DocRecord`]: its sequence and revision tree,
/// decoded without the leaf bodies that follow (for scans that only need
/// to know whether a document is live).
#[derive(Debug, Deserialize)]
pub struct DocRecordHead {
    pub seq: u64,
    pub tree: RevTree,
}

impl DocRecordHead {
    pub fn decode(bytes: &[u8]) -> Result<DocRecordHead> {
        match bytes.split_first() {
            Some((&FORMAT_V1, rest)) => postcard::take_from_bytes::<DocRecordHead>(rest)
                .map(|(head, _)| head)
                .map_err(|e| Error::Corrupt(format!("document record: {e}"))),
            _ => Err(Error::Corrupt(
                "document record: unknown format version".into(),
            )),
        }
    }

    /// True when the document's winning revision is live.
    pub fn is_live(&self) -> bool {
        self.tree.winner().is_some_and(|w| !w.deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption() {
        let tree = RevTree::with_root(Rev::new(1, "a"), false, true);
        let rec = DocRecord {
            seq: 5,
            tree,
            inline: vec![(0, "{}".into())],
        };
        let bytes = encode(&rec);
        assert_eq!(DocRecord::decode(&bytes).unwrap(), rec);
        assert!(DocRecord::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(DocRecord::decode(&[9, 1, 2]).is_err());
        assert_eq!(rec.winner_bytes(), 2);
        assert!(DocRecord::decode(&encode(&DocRecord {
            seq: 1,
            tree: RevTree::default(),
            inline: vec![]
        }))
        .is_err());
        let bad = DocRecord {
            seq: 1,
            tree: rec.tree.clone(),
            inline: vec![(3, "{}".into())],
        };
        assert!(DocRecord::decode(&encode(&bad)).is_err());
    }

    #[test]
    fn state_records_of_the_first_layout_still_decode() {
        #[derive(Serialize)]
        struct V1(u64, u64, u64, u64, u64, u64);
        let old = encode(&V1(7, 3, 1, 2, 99, 5));
        let s = DbState::decode(&old).unwrap();
        assert_eq!(
            (s.update_seq, s.doc_count, s.doc_del_count, s.purge_seq),
            (7, 3, 1, 2)
        );
        assert_eq!((s.external_bytes, s.revs_limit), (99, 5));
        assert_eq!((s.purged_infos_limit, s.seq_index), (1000, false));
        let now = DbState {
            purged_infos_limit: 5,
            ..DbState::default()
        };
        assert_eq!(DbState::decode(&encode(&now)).unwrap(), now);
        assert!(DbState::decode(&[1, 2]).is_err());
    }

    #[test]
    fn catalog_entries_of_the_first_layout_still_decode() {
        #[derive(Serialize)]
        struct V1(u64, u64);
        let old = DbMeta::decode(&encode(&V1(7, 99))).unwrap();
        assert_eq!(
            old,
            DbMeta {
                id: 7,
                created_us: 99,
                partitioned: false
            }
        );
        let new = DbMeta {
            id: 8,
            created_us: 5,
            partitioned: true,
        };
        assert_eq!(DbMeta::decode(&encode(&new)).unwrap(), new);
    }

    #[test]
    fn record_heads_decode_without_the_bodies() {
        let mut tree = RevTree::with_root(Rev::new(1, "a"), false, true);
        tree.add(Some(&Rev::new(1, "a")), Rev::new(2, "b"), true, true)
            .unwrap();
        let rec = DocRecord {
            seq: 9,
            tree,
            inline: vec![(1, "{}".into())],
        };
        let head = DocRecordHead::decode(&encode(&rec)).unwrap();
        assert_eq!((head.seq, head.is_live()), (9, false));
        assert!(DocRecordHead::decode(&[7]).is_err());
    }
}
