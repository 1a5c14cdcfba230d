//! Whether an encoded by-id document record is live, read straight from
//! its bytes: what counting scans (`_all_docs`' `offset`, id blocks,
//! partition sizes) ask of every record they pass, without decoding the
//! revision tree into allocated nodes.
//!
//! A document is live when one of its leaves is not a deletion (the
//! winner prefers live leaves, so the winner is live exactly then). The
//! record is `FORMAT_V1`, then postcard: the sequence, the node count, and
//! per node its revision (position, then a digest of 16 bytes or a text
//! hash), its parent (`Option<u32>`), `deleted`, `has_body`.
//!
//! Invariant: [`is_live`] answers what [`DocRecordHead::decode`] followed
//! by [`DocRecordHead::is_live`] answers for every record (a test checks
//! generated trees); trees of more than [`FAST_NODES`] nodes, and anything
//! it cannot read, are left to that decoder, which reports corruption.

use crate::error::Result;
use crate::records::{DocRecordHead, FORMAT_V1};

/// Nodes the byte scan tracks (one bit each); larger trees are decoded.
pub const FAST_NODES: usize = 64;

/// A postcard reader over a record's bytes.
struct Bytes<'a> {
    b: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        let end = self.at.checked_add(n)?;
        (end <= self.b.len()).then(|| self.at = end)
    }

    fn flag(&mut self) -> Option<bool> {
        match self.byte()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
}

/// The scan of [`is_live`]; `None` when the tree is larger than
/// [`FAST_NODES`] or the bytes are not as expected.
fn scan(bytes: &[u8]) -> Option<bool> {
    let (&FORMAT_V1, rest) = bytes.split_first()? else {
        return None;
    };
    let mut r = Bytes { b: rest, at: 0 };
    r.varint()?; // seq
    let n = usize::try_from(r.varint()?).ok()?;
    if n == 0 || n > FAST_NODES {
        return None;
    }
    let (mut has_child, mut live) = (0u64, 0u64);
    for i in 0..n {
        r.varint()?; // position
        match r.varint()? {
            0 => r.skip(16)?,
            1 => {
                let len = usize::try_from(r.varint()?).ok()?;
                r.skip(len)?;
            }
            _ => return None,
        }
        if r.flag()? {
            let parent = usize::try_from(r.varint()?).ok()?;
            if parent >= n {
                return None;
            }
            has_child |= 1 << parent;
        }
        if !r.flag()? {
            live |= 1 << i;
        }
        r.flag()?; // has_body
    }
    Some(live & !has_child != 0)
}

/// Whether the record's document is live (see the module doc).
pub fn is_live(bytes: &[u8]) -> Result<bool> {
    match scan(bytes) {
        Some(live) => Ok(live),
        None => Ok(DocRecordHead::decode(bytes)?.is_live()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{encode, DocRecord};
    use proptest::prelude::*;
    use settee_core::rev::Rev;
    use settee_core::revtree::RevTree;

    /// A tree from a list of (parent choice, deleted, text hash) steps:
    /// each node's parent is an earlier node (or none: a new root).
    fn tree_of(steps: &[(Option<usize>, bool, bool)]) -> RevTree {
        let mut revs: Vec<Rev> = Vec::new();
        let mut tree = RevTree::default();
        for (i, (parent, deleted, text)) in steps.iter().enumerate() {
            let hash = if *text {
                format!("t{i}")
            } else {
                format!("{i:032x}")
            };
            let parent = parent
                .filter(|_| !revs.is_empty())
                .map(|p| revs[p % revs.len()].clone());
            let rev = Rev::new(parent.as_ref().map_or(1, |p| p.pos + 1), &hash);
            tree.add(parent.as_ref(), rev.clone(), *deleted, true)
                .unwrap();
            revs.push(rev);
        }
        tree
    }

    proptest! {
        #[test]
        fn the_byte_scan_agrees_with_the_decoder(
            steps in prop::collection::vec((prop::option::of(0usize..80), any::<bool>(), any::<bool>()), 1..80),
            seq in any::<u64>(),
        ) {
            let tree = tree_of(&steps);
            prop_assume!(!tree.is_empty());
            let rec = DocRecord { seq, tree, inline: vec![(0, "{}".into())] };
            let bytes = encode(&rec);
            let want = DocRecordHead::decode(&bytes).unwrap().is_live();
            prop_assert_eq!(is_live(&bytes).unwrap(), want);
            if rec.tree.len() <= FAST_NODES {
                prop_assert_eq!(scan(&bytes), Some(want));
            }
        }
    }

    #[test]
    fn damaged_records_are_left_to_the_decoder() {
        let rec = DocRecord {
            seq: 7,
            tree: RevTree::with_root(Rev::new(1, "a"), false, true),
            inline: vec![],
        };
        let bytes = encode(&rec);
        assert!(is_live(&bytes[..bytes.len() - 3]).is_err());
        assert!(is_live(&[9, 1, 2]).is_err());
        assert!(is_live(&[]).is_err());
    }
}
