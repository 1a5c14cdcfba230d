//! Where an index keeps its data in its database's index space, and the
//! records it stores.
//!
//! Every key starts with the index's 16-byte signature, then a tag:
//!
//! | key | value |
//! |---|---|
//! | `SIG 00` | [`IndexState`]: the sequences indexed through, rows per view |
//! | `SIG 01 DOCID` | [`BackEntry`]: the row keys the document's rows sit under |
//! | `SIG 02 VIEW(2, BE) ROWKEY DUP(2, BE)` | [`RowValue`]: doc id, key and value JSON |
//! | `SIG 03 VIEW(2, BE) BOUNDARY` | `crate::blocks::BlockRec`: a block of rows' count and partial reduction |
//!
//! `ROWKEY` is `settee_index::keycodec::encode_row_key` of the row's key
//! and doc id under the index's collation, so one view's rows sort in
//! CouchDB's view order; in a partitioned index it is preceded by the
//! document's partition encoded as a key ([`partition_prefix`]), so each
//! partition's rows are one contiguous range, in partition order as
//! CouchDB's `[partition, key]` rows are; `DUP` numbers the rows one document emits with
//! equal keys (in emission order), which the row-key encoding alone would
//! merge. Invariant: a document's back entry lists exactly the row keys
//! (after the view number) its rows are stored under, and is written in the
//! same batch as them; the state names the database sequence and purge
//! sequence through which every document's rows are current.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use settee_index::keycodec::{encode_key, prefix_successor, Collation};

use crate::error::{Result, ViewError};

const TAG_STATE: u8 = 0;
const TAG_BACK: u8 = 1;
const TAG_ROW: u8 = 2;
pub(crate) const TAG_BLOCK: u8 = 3;

/// An index's progress and counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexState {
    /// Every change up to this database sequence is indexed.
    pub seq: u64,
    /// Every purge up to this purge sequence is applied.
    pub purge_seq: u64,
    /// Rows per view (by view number).
    pub rows: Vec<u64>,
}

/// The rows of one document: (view number, row key with its `DUP`).
pub type BackEntry = Vec<(u16, Vec<u8>)>;

/// What a row holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowValue {
    pub id: String,
    /// The key as JSON text.
    pub key: String,
    /// The value as JSON text.
    pub value: String,
}

pub fn state_key(sig: &[u8; 16]) -> Vec<u8> {
    [&sig[..], &[TAG_STATE]].concat()
}

pub fn back_key(sig: &[u8; 16], doc_id: &str) -> Vec<u8> {
    [&sig[..], &[TAG_BACK], doc_id.as_bytes()].concat()
}

/// The prefix of every row of `view`.
pub fn view_prefix(sig: &[u8; 16], view: u16) -> Vec<u8> {
    let mut k = Vec::with_capacity(19);
    k.extend_from_slice(sig);
    k.push(TAG_ROW);
    k.extend_from_slice(&view.to_be_bytes());
    k
}

/// `[from, to)` of every key of the index.
pub fn index_range(sig: &[u8; 16]) -> (Vec<u8>, Vec<u8>) {
    // The signature's successor; an all-0xFF signature has none, and its
    // keys end below the tag past the last.
    let to = prefix_successor(sig).unwrap_or_else(|| [&sig[..], &[TAG_BLOCK + 1]].concat());
    (sig.to_vec(), to)
}

/// What precedes the row keys of one partition's rows in a partitioned
/// index: the partition encoded as a string key (self-delimiting).
pub fn partition_prefix(partition: &str, collation: Collation) -> Vec<u8> {
    encode_key(&Value::String(partition.to_string()), collation)
}

/// A row key with its `DUP` number appended.
pub fn with_dup(row_key: &[u8], dup: u16) -> Vec<u8> {
    let mut k = Vec::with_capacity(row_key.len() + 2);
    k.extend_from_slice(row_key);
    k.extend_from_slice(&dup.to_be_bytes());
    k
}

/// The row key part (without `DUP`) of a stored row's key after its view
/// prefix.
pub fn strip_dup(rest: &[u8]) -> &[u8] {
    &rest[..rest.len().saturating_sub(2)]
}

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_stdvec(value).expect("postcard serialization of an index record")
}

pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8], what: &str) -> Result<T> {
    postcard::from_bytes(bytes).map_err(|e| ViewError::Corrupt(format!("{what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_nest_in_the_index_range() {
        let sig = [7u8; 16];
        let (lo, hi) = index_range(&sig);
        for k in [
            state_key(&sig),
            back_key(&sig, "doc"),
            view_prefix(&sig, 3),
            with_dup(&view_prefix(&sig, u16::MAX), u16::MAX),
        ] {
            assert!(lo <= k && k < hi);
        }
        let (lo, hi) = index_range(&[0xFF; 16]);
        assert!(lo < view_prefix(&[0xFF; 16], 9) && view_prefix(&[0xFF; 16], 9) < hi);
        let block = crate::blocks::block_prefix(&[0xFF; 16], u16::MAX);
        assert!(lo < block && [&block[..], &[0xFF; 8]].concat() < hi);
        assert_eq!(strip_dup(&with_dup(b"abc", 5)), b"abc");
    }

    #[test]
    fn records_round_trip() {
        let s = IndexState {
            seq: 9,
            purge_seq: 2,
            rows: vec![1, 2],
        };
        assert_eq!(decode::<IndexState>(&encode(&s), "state").unwrap(), s);
        let r = RowValue {
            id: "a".into(),
            key: "[1]".into(),
            value: "null".into(),
        };
        assert_eq!(decode::<RowValue>(&encode(&r), "row").unwrap(), r);
    }
}
