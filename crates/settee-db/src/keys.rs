//! Key encoding for every keyspace. Each key begins with the 8-byte
//! big-endian id of its database, so one database is one contiguous range
//! per keyspace (dropped with one DeleteRange) and ids are never reused.
//!
//! Invariants: by-id keys sort by the raw bytes of the document id (the
//! `_all_docs` order); by-seq keys sort by sequence number. The Meta
//! keyspace also holds, per database, the catalog entry, the counters,
//! the by-seq counts per bucket of sequences, the security object, the
//! time → sequence map and the automatic purge settings.

use settee_core::rev::Rev;

/// Database ids are allocated from 1 upward and never reused.
pub type DbId = u64;

pub const META_NEXT_DB_ID: &[u8] = b"next_db_id";
pub const META_DB_PREFIX: &[u8] = b"db:";
pub const META_STATE_PREFIX: &[u8] = b"state:";
pub const META_SEQ_COUNT_PREFIX: &[u8] = b"seqcount:";
pub const META_ID_BLOCK_PREFIX: &[u8] = b"idblock:";
pub const META_SECURITY_PREFIX: &[u8] = b"security:";
pub const META_TIME_SEQ_PREFIX: &[u8] = b"timeseq:";
pub const META_AUTO_PURGE_PREFIX: &[u8] = b"autopurge:";

/// Sequences per by-seq count bucket: bucket `b` holds `[b * SEQ_BUCKET,
/// (b + 1) * SEQ_BUCKET)`.
pub const SEQ_BUCKET: u64 = 4096;

/// Catalog key of a database name.
pub fn catalog(name: &str) -> Vec<u8> {
    [META_DB_PREFIX, name.as_bytes()].concat()
}

/// Meta key of a database's counters.
pub fn state(db: DbId) -> Vec<u8> {
    [META_STATE_PREFIX, &db.to_be_bytes()].concat()
}

/// Meta key of a database's security object (its JSON text, as set).
pub fn security(db: DbId) -> Vec<u8> {
    [META_SECURITY_PREFIX, &db.to_be_bytes()].concat()
}

/// Meta key of a database's time → sequence map (see `crate::time_seq`).
pub fn time_seq(db: DbId) -> Vec<u8> {
    [META_TIME_SEQ_PREFIX, &db.to_be_bytes()].concat()
}

/// Meta key of a database's automatic purge settings (the JSON text of
/// `PUT /db/_auto_purge`, as set).
pub fn auto_purge(db: DbId) -> Vec<u8> {
    [META_AUTO_PURGE_PREFIX, &db.to_be_bytes()].concat()
}

/// Meta key of the number of by-seq entries of `db` in bucket `bucket`
/// (see [`SEQ_BUCKET`]; the highest bucket's count is in the state record
/// instead, see `crate::writer`): the counts let the number of changes
/// after a sequence be found without visiting every one (`pending`).
pub fn seq_count(db: DbId, bucket: u64) -> Vec<u8> {
    [
        META_SEQ_COUNT_PREFIX,
        &db.to_be_bytes(),
        &bucket.to_be_bytes(),
    ]
    .concat()
}

/// `[start, end)` of the Meta keys holding `db`'s by-seq counts.
pub fn seq_count_range(db: DbId) -> (Vec<u8>, Vec<u8>) {
    (
        [META_SEQ_COUNT_PREFIX, &db.to_be_bytes()].concat(),
        [META_SEQ_COUNT_PREFIX, &(db + 1).to_be_bytes()].concat(),
    )
}

/// The bucket of a [`seq_count`] key.
pub fn seq_count_bucket(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[key.len() - 8..]);
    u64::from_be_bytes(b)
}

/// `[start, end)` covering all keys of `db` in any keyspace.
pub fn db_range(db: DbId) -> (Vec<u8>, Vec<u8>) {
    (db.to_be_bytes().to_vec(), (db + 1).to_be_bytes().to_vec())
}

/// Meta key of the counts of the block of ids of `db` starting at
/// `boundary` (see `crate::id_blocks`).
pub fn id_block(db: DbId, boundary: &[u8]) -> Vec<u8> {
    [META_ID_BLOCK_PREFIX, &db.to_be_bytes(), boundary].concat()
}

/// `[start, end)` of the Meta keys holding `db`'s id blocks.
pub fn id_block_range(db: DbId) -> (Vec<u8>, Vec<u8>) {
    (
        [META_ID_BLOCK_PREFIX, &db.to_be_bytes()].concat(),
        [META_ID_BLOCK_PREFIX, &(db + 1).to_be_bytes()].concat(),
    )
}

/// The boundary of an [`id_block`] key.
pub fn id_block_boundary(key: &[u8]) -> &[u8] {
    &key[META_ID_BLOCK_PREFIX.len() + 8..]
}

/// By-id key of an id given as bytes.
pub fn doc_bytes(db: DbId, id: &[u8]) -> Vec<u8> {
    [&db.to_be_bytes()[..], id].concat()
}

/// By-id (and local) key.
pub fn doc(db: DbId, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + id.len());
    doc_into(&mut k, db, id);
    k
}

/// Appends the key of [`doc`] to `out`.
pub fn doc_into(out: &mut Vec<u8>, db: DbId, id: &str) {
    out.extend_from_slice(&db.to_be_bytes());
    out.extend_from_slice(id.as_bytes());
}

/// The document id of a by-id key.
pub fn doc_id(key: &[u8]) -> &[u8] {
    &key[8..]
}

/// By-seq key.
pub fn seq(db: DbId, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(16);
    seq_into(&mut k, db, seq);
    k
}

/// Appends the key of [`seq`] to `out`.
pub fn seq_into(out: &mut Vec<u8>, db: DbId, seq: u64) {
    out.extend_from_slice(&db.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
}

/// The sequence number of a by-seq key.
pub fn seq_of(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[8..16]);
    u64::from_be_bytes(b)
}

/// Body key of one revision: db, id length, id, generation, hash.
pub fn body(db: DbId, id: &str, rev: &Rev) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + 4 + id.len() + 8 + rev.hash.text_len());
    k.extend_from_slice(&db.to_be_bytes());
    k.extend_from_slice(&(id.len() as u32).to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k.extend_from_slice(&rev.pos.to_be_bytes());
    rev.hash.with_text(|t| k.extend_from_slice(t.as_bytes()));
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_and_round_trips() {
        assert!(seq(1, 255) < seq(1, 256));
        assert!(seq(1, u64::MAX) < seq(2, 0));
        assert_eq!(seq_of(&seq(3, 77)), 77);
        assert!(doc(1, "a") < doc(1, "b") && doc(1, "zz") < doc(2, ""));
        assert_eq!(doc_id(&doc(5, "é")), "é".as_bytes());
        let (lo, hi) = db_range(7);
        for k in [doc(7, "x"), seq(7, 1), body(7, "x", &Rev::new(1, "h"))] {
            assert!(lo <= k && k < hi);
        }
        let (lo, hi) = seq_count_range(7);
        assert!(lo <= seq_count(7, 0) && seq_count(7, u64::MAX) < hi);
        assert!(seq_count(7, 1) < seq_count(7, 256) && seq_count(6, u64::MAX) < lo);
        assert_eq!(seq_count_bucket(&seq_count(7, 300)), 300);
        let (lo, hi) = id_block_range(7);
        let k = id_block(7, b"doc-1");
        assert!(lo <= k && k < hi && lo <= id_block(7, b"") && id_block(7, b"\xff\xff") < hi);
        assert_eq!(id_block_boundary(&k), b"doc-1");
        // The length prefix keeps one id's bodies apart from a longer id's.
        assert!(
            !body(1, "a", &Rev::new(1, "h")).starts_with(&body(1, "ab", &Rev::new(1, "h"))[..12])
        );
    }
}
