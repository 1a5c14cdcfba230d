//! Revision ids (`N-hash`) and their deterministic generation.
//!
//! Invariant: [`Rev::next`] is a pure function of (parent rev, deleted flag,
//! body bytes): the same edit of the same parent yields the same rev id on
//! every node, so replication deduplicates identical edits.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use xxhash_rust::xxh3::Xxh3Default;

/// Highest generation accepted from a client (the largest integer JSON
/// numbers carry exactly), so `pos + 1` can never overflow.
pub const REV_POS_MAX: u64 = (1 << 53) - 1;

/// Longest revision hash accepted from a client (ours are 32 hex digits).
pub const REV_HASH_BYTES_MAX: usize = 128;

/// A revision id: generation number `pos` (1 for a new document) and a hash.
///
/// Its serde form is the compact *storage* form (the wire form is
/// [`fmt::Display`]): a 32-digit lowercase hex hash — every hash Settee
/// makes, and CouchDB's — is stored as its 16 bytes, any other hash as text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rev {
    pub pos: u64,
    pub hash: RevHash,
}

/// The hash part of a revision id. Every 32-digit lowercase hex hash is
/// held as its 16 bytes (no allocation, no hex conversions on the hot
/// path), anything else as text; the text form is the same either way.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum RevHash {
    Digest([u8; 16]),
    Text(Box<str>),
}

impl RevHash {
    /// The hash spelled `text` (normalized: lowercase hex digests as bytes).
    pub fn from_text(text: &str) -> RevHash {
        match digest_bytes(text) {
            Some(b) => RevHash::Digest(b),
            None => RevHash::Text(text.into()),
        }
    }

    /// Runs `f` on the text form (on the stack for a digest).
    pub fn with_text<T>(&self, f: impl FnOnce(&str) -> T) -> T {
        match self {
            RevHash::Digest(b) => {
                let mut buf = [0u8; 32];
                f(hex_digits(b, &mut buf))
            }
            RevHash::Text(t) => f(t),
        }
    }

    /// Length of the text form.
    pub fn text_len(&self) -> usize {
        match self {
            RevHash::Digest(_) => 32,
            RevHash::Text(t) => t.len(),
        }
    }
}

/// The lowercase hex digits of `bytes`, written into `buf`.
fn hex_digits<'b>(bytes: &[u8; 16], buf: &'b mut [u8; 32]) -> &'b str {
    // 16 bytes always fit 32 digits.
    hex::encode_to_slice(bytes, buf).expect("16 bytes fit 32 hex digits");
    std::str::from_utf8(buf).expect("hex digits are ASCII")
}

fn digest_bytes(hash: &str) -> Option<[u8; 16]> {
    let lower_hex =
        hash.len() == 32 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let mut out = [0u8; 16];
    (lower_hex && hex::decode_to_slice(hash, &mut out).is_ok()).then_some(out)
}

impl fmt::Display for RevHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_text(|t| f.write_str(t))
    }
}

impl fmt::Debug for RevHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_text(|t| write!(f, "{t:?}"))
    }
}

impl PartialOrd for RevHash {
    fn partial_cmp(&self, other: &RevHash) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Hashes order by their text's bytes (CouchDB's order). Lowercase hex
/// digits sort as the bytes they spell, so two digests compare as bytes.
impl Ord for RevHash {
    fn cmp(&self, other: &RevHash) -> Ordering {
        match (self, other) {
            (RevHash::Digest(a), RevHash::Digest(b)) => a.cmp(b),
            _ => self.with_text(|a| other.with_text(|b| a.as_bytes().cmp(b.as_bytes()))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("Invalid rev format")]
pub struct RevParseError;

impl Rev {
    pub fn new(pos: u64, hash: impl AsRef<str>) -> Rev {
        Rev {
            pos,
            hash: RevHash::from_text(hash.as_ref()),
        }
    }

    /// The revision a new edit gets: CouchDB's own hash of the edit
    /// ([`crate::couch_rev`]: the same edit gets the same id on CouchDB and
    /// on Settee), or, for a body CouchDB would not hash that way,
    /// [`Rev::next`]'s. `body` is the stored body (attachment stubs in its
    /// `_attachments`).
    pub fn next_edit(parent: Option<&Rev>, deleted: bool, body: &str) -> Rev {
        match crate::couch_rev::hash(parent, deleted, body) {
            Some(h) => Rev {
                pos: parent.map_or(1, |p| p.pos + 1),
                hash: RevHash::Digest(h),
            },
            None => Rev::next(parent, deleted, body.as_bytes()),
        }
    }

    /// The revision produced by editing `parent` (None for a new document)
    /// into `body` with the given deleted flag: a 128-bit XXH3 hash of
    /// exactly those inputs, as 32 hex digits (the length of CouchDB's MD5
    /// hashes; clients treat the hash as opaque). XXH3 is a fixed,
    /// platform-independent function and several times faster than MD5
    /// (docs/adr/0003-revision-hash.md).
    pub fn next(parent: Option<&Rev>, deleted: bool, body: &[u8]) -> Rev {
        let mut h = Xxh3Default::new();
        h.update(&[u8::from(deleted)]);
        match parent {
            Some(p) => {
                h.update(&p.pos.to_be_bytes());
                p.hash.with_text(|t| {
                    h.update(&(t.len() as u64).to_be_bytes());
                    h.update(t.as_bytes());
                });
            }
            None => h.update(&0u64.to_be_bytes()),
        }
        h.update(body);
        Rev {
            pos: parent.map_or(1, |p| p.pos + 1),
            hash: RevHash::Digest(h.digest128().to_be_bytes()),
        }
    }
}

/// How a hash is stored.
#[derive(Serialize, Deserialize)]
enum StoredHash<'a> {
    // Renaming a variant keeps the stored form (postcard numbers variants).
    Digest([u8; 16]),
    Text(std::borrow::Cow<'a, str>),
}

impl Serialize for Rev {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let hash = match &self.hash {
            RevHash::Digest(b) => StoredHash::Digest(*b),
            RevHash::Text(t) => StoredHash::Text(std::borrow::Cow::Borrowed(t)),
        };
        (self.pos, hash).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Rev {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Rev, D::Error> {
        let (pos, hash) = <(u64, StoredHash<'de>)>::deserialize(d)?;
        let hash = match hash {
            StoredHash::Digest(b) => RevHash::Digest(b),
            StoredHash::Text(t) => RevHash::from_text(&t),
        };
        Ok(Rev { pos, hash })
    }
}

impl fmt::Display for Rev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.pos, self.hash)
    }
}

impl FromStr for Rev {
    type Err = RevParseError;
    fn from_str(s: &str) -> Result<Rev, RevParseError> {
        let (pos, hash) = s.split_once('-').ok_or(RevParseError)?;
        let pos: u64 = pos.parse().map_err(|_| RevParseError)?;
        if pos == 0
            || pos > REV_POS_MAX
            || hash.is_empty()
            || hash.len() > REV_HASH_BYTES_MAX
            || !pos_digits_ok(s)
        {
            return Err(RevParseError);
        }
        Ok(Rev::new(pos, hash))
    }
}

/// Rejects forms like "+1-abc" that `u64::from_str` would accept.
fn pos_digits_ok(s: &str) -> bool {
    s.bytes().next().is_some_and(|b| b.is_ascii_digit())
}

impl PartialOrd for Rev {
    fn partial_cmp(&self, other: &Rev) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Revisions order by generation, then by hash text bytes (CouchDB's order).
impl Ord for Rev {
    fn cmp(&self, other: &Rev) -> Ordering {
        self.pos
            .cmp(&other.pos)
            .then_with(|| self.hash.cmp(&other.hash))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        let r: Rev = "3-abc".parse().unwrap();
        assert_eq!(r, Rev::new(3, "abc"));
        assert_eq!(r.to_string(), "3-abc");
        for bad in [
            "",
            "abc",
            "0-abc",
            "-1-a",
            "+1-a",
            "1-",
            "x-abc",
            "9007199254740992-a",
        ] {
            assert_eq!(bad.parse::<Rev>(), Err(RevParseError), "{bad}");
        }
    }

    #[test]
    fn storage_form_is_compact_and_exact() {
        for r in [
            Rev::next(None, false, b"{}"),
            Rev::new(3, "ABCDEF0123456789abcdef0123456789"),
            Rev::new(2, "x"),
        ] {
            let bytes = serde_json::to_vec(&r).unwrap();
            assert_eq!(serde_json::from_slice::<Rev>(&bytes).unwrap(), r);
        }
        // A generated hash is stored as 16 bytes, not 32 digits.
        let digest = serde_json::to_value(Rev::next(None, false, b"{}")).unwrap();
        assert_eq!(digest[1]["Digest"].as_array().unwrap().len(), 16);
        assert!(
            serde_json::to_value(Rev::new(3, "ABCDEF0123456789abcdef0123456789")).unwrap()[1]
                ["Text"]
                .is_string()
        );
    }

    #[test]
    fn hashes_keep_their_text_and_its_order() {
        let digest = "0123456789abcdef0123456789abcdef";
        for t in [digest, "ABCDEF0123456789abcdef0123456789", "x", "0123"] {
            assert_eq!(Rev::new(1, t).to_string(), format!("1-{t}"));
            assert_eq!(Rev::new(1, t).hash.text_len(), t.len());
        }
        assert_eq!(
            Rev::new(1, digest).hash,
            RevHash::Digest(hex::decode(digest).unwrap().try_into().unwrap())
        );
        // Order is the text's byte order, across both forms.
        let mut texts = vec![
            "f",
            digest,
            "ffffffffffffffffffffffffffffffff",
            "0",
            "A",
            "00000000000000000000000000000000",
        ];
        let mut revs: Vec<Rev> = texts.iter().map(|t| Rev::new(2, t)).collect();
        texts.sort_unstable();
        revs.sort();
        let sorted: Vec<String> = revs.iter().map(|r| r.hash.to_string()).collect();
        assert_eq!(sorted, texts);
    }

    #[test]
    fn next_is_deterministic_and_sensitive() {
        let a = Rev::next(None, false, b"{\"a\":1}");
        assert_eq!(a, Rev::next(None, false, b"{\"a\":1}"));
        assert_eq!(a.pos, 1);
        assert_eq!(a.hash.text_len(), 32);
        assert!(matches!(a.hash, RevHash::Digest(_)));
        assert_ne!(a, Rev::next(None, true, b"{\"a\":1}"));
        assert_ne!(a, Rev::next(None, false, b"{\"a\":2}"));
        let b = Rev::next(Some(&a), false, b"{\"a\":1}");
        assert_eq!(b.pos, 2);
        assert_ne!(b.hash, a.hash);
    }

    /// Revision ids must never change between versions (two nodes, or one
    /// node before and after an upgrade, must agree). Expected values from
    /// Python's `xxhash.xxh3_128` over the same bytes: deleted flag, parent
    /// generation (u64 BE, 0 for none), parent hash length (u64 BE) and
    /// text, body.
    #[test]
    fn next_matches_an_independent_xxh3() {
        let a = Rev::next(None, false, b"{\"a\":1}");
        assert_eq!(a.to_string(), "1-54f5187e8bbf0e6c4b6c7f1830b9ae9a");
        let b = Rev::next(Some(&a), false, b"{\"a\":2}");
        assert_eq!(b.to_string(), "2-c72b87eb6cdcb084761093c7b1b17b75");
        let d = Rev::next(None, true, b"{}");
        assert_eq!(d.to_string(), "1-589dc3b98798532479c61dec53ea0c23");
    }
}
