//! Hand-written encoders of the two records every document write stores
//! (its by-id [`DocRecord`] and its by-sequence `SeqRecord`), for the
//! writer's hot path.
//!
//! Invariant: each encoder's output is **byte-for-byte** what
//! [`crate::records::encode_into`] (the format byte, then postcard) makes
//! of the same value — the stored format is postcard's, this only skips
//! serde's per-field and per-byte dispatch (a revision's 16 digest bytes
//! went through postcard one `serialize_u8` at a time). The tests compare
//! both on generated records; decoding stays with postcard.
//!
//! Postcard's rules used here: unsigned integers are LEB128 varints; a
//! `bool` is one byte; an `Option` is a 0/1 byte then the value; a
//! sequence or string is its varint length then its elements; an enum is
//! its variant's varint index then its content; structs, tuples and arrays
//! are their elements in order, with no framing.

use settee_core::rev::{Rev, RevHash};

use crate::records::{DocRecord, FORMAT_V1};

fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn push_len(out: &mut Vec<u8>, len: usize) {
    push_varint(out, len as u64);
}

fn push_text(out: &mut Vec<u8>, s: &str) {
    push_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

/// A [`Rev`] as its `Serialize` impl stores it: `(pos, StoredHash)`, where
/// `StoredHash` is `Digest([u8; 16])` (variant 0) or `Text(str)` (1).
fn push_rev(out: &mut Vec<u8>, rev: &Rev) {
    push_varint(out, rev.pos);
    match &rev.hash {
        RevHash::Digest(b) => {
            out.push(0);
            out.extend_from_slice(b);
        }
        RevHash::Text(t) => {
            out.push(1);
            push_text(out, t);
        }
    }
}

fn push_bool(out: &mut Vec<u8>, b: bool) {
    out.push(u8::from(b));
}

/// Appends `rec` encoded as `encode_into(out, rec)` would.
pub(crate) fn doc_record_into(out: &mut Vec<u8>, rec: &DocRecord) {
    let nodes = rec.tree.nodes();
    let inline_bytes: usize = rec.inline.iter().map(|(_, b)| b.len() + 8).sum();
    out.reserve(16 + nodes.len() * 24 + inline_bytes);
    out.push(FORMAT_V1);
    push_varint(out, rec.seq);
    push_len(out, nodes.len());
    for n in nodes {
        push_rev(out, &n.rev);
        match n.parent {
            None => out.push(0),
            Some(p) => {
                out.push(1);
                push_varint(out, u64::from(p));
            }
        }
        push_bool(out, n.deleted);
        push_bool(out, n.has_body);
    }
    push_len(out, rec.inline.len());
    for (i, body) in &rec.inline {
        push_varint(out, u64::from(*i));
        push_text(out, body);
    }
}

/// Appends the `SeqRecord` of document `id` with `leaves` (winner first),
/// encoded as `encode_into` would encode that record (without the caller
/// owning its parts).
pub(crate) fn seq_record_into(out: &mut Vec<u8>, id: &str, leaves: &[(Rev, bool)]) {
    out.reserve(8 + id.len() + leaves.len() * 24);
    out.push(FORMAT_V1);
    push_text(out, id);
    push_len(out, leaves.len());
    for (rev, deleted) in leaves {
        push_rev(out, rev);
        push_bool(out, *deleted);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use settee_core::revtree::RevTree;

    use super::*;
    use crate::records::{decode, encode_into, SeqRecord};

    fn rev() -> impl Strategy<Value = Rev> {
        (
            prop_oneof![Just(1u64), Just(127), Just(128), 0u64..u64::MAX],
            prop_oneof![
                any::<[u8; 16]>().prop_map(RevHash::Digest),
                "[a-zA-Z0-9é]{0,200}".prop_map(|t| RevHash::Text(t.into())),
            ],
        )
            .prop_map(|(pos, hash)| Rev { pos, hash })
    }

    /// A tree grown from a root by adding revisions under random nodes
    /// (so parents are valid indexes, as in every stored tree).
    fn tree() -> impl Strategy<Value = RevTree> {
        (
            rev(),
            any::<bool>(),
            proptest::collection::vec((any::<prop::sample::Index>(), any::<bool>()), 0..40),
        )
            .prop_map(|(root, deleted, adds)| {
                let mut tree = RevTree::with_root(root.clone(), deleted, true);
                for (k, (at, del)) in adds.into_iter().enumerate() {
                    let parent = tree.nodes()[at.index(tree.len())].rev.clone();
                    let child = Rev::next(Some(&parent), del, format!("{k}").as_bytes());
                    tree.add(Some(&parent), child, del, !del)
                        .expect("a new revision under an existing one");
                }
                tree
            })
    }

    proptest! {
        #[test]
        fn doc_records_encode_as_postcard(
            seq in prop_oneof![Just(0u64), Just(300), any::<u64>()],
            tree in tree(),
            inline in proptest::collection::vec((any::<u32>(), "\\PC{0,300}"), 0..4),
        ) {
            let rec = DocRecord { seq, tree, inline };
            let (mut want, mut got) = (b"prefix".to_vec(), b"prefix".to_vec());
            encode_into(&mut want, &rec);
            doc_record_into(&mut got, &rec);
            prop_assert_eq!(got, want);
        }

        #[test]
        fn seq_records_encode_as_postcard(
            id in "\\PC{0,300}",
            leaves in proptest::collection::vec((rev(), any::<bool>()), 0..8),
        ) {
            let mut got = Vec::new();
            seq_record_into(&mut got, &id, &leaves);
            let rec = SeqRecord { id, leaves };
            let mut want = Vec::new();
            encode_into(&mut want, &rec);
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(decode::<SeqRecord>(&got, "seq").unwrap(), rec);
        }
    }
}
