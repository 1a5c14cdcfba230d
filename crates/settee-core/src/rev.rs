//! Revision ids (`N-hash`) and their deterministic generation.
//!
//! Invariant: [`Rev::next`] is a pure function of (parent rev, deleted flag,
//! body bytes): the same edit of the same parent yields the same rev id on
//! every node, so replication deduplicates identical edits.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use thiserror::Error;

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
    pub hash: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("Invalid rev format")]
pub struct RevParseError;

impl Rev {
    pub fn new(pos: u64, hash: impl Into<String>) -> Rev {
        Rev {
            pos,
            hash: hash.into(),
        }
    }

    /// The revision produced by editing `parent` (None for a new document)
    /// into `body` with the given deleted flag.
    pub fn next(parent: Option<&Rev>, deleted: bool, body: &[u8]) -> Rev {
        let mut h = Md5::new();
        h.update([u8::from(deleted)]);
        match parent {
            Some(p) => {
                h.update(p.pos.to_be_bytes());
                h.update((p.hash.len() as u64).to_be_bytes());
                h.update(p.hash.as_bytes());
            }
            None => h.update(0u64.to_be_bytes()),
        }
        h.update(body);
        let mut hex_buf = [0u8; 32];
        // 16 digest bytes always fit 32 hex digits (hex::encode would build
        // the String a char at a time).
        hex::encode_to_slice(h.finalize(), &mut hex_buf).expect("md5 digest is 16 bytes");
        let hash = String::from_utf8(hex_buf.to_vec()).expect("hex digits are ASCII");
        Rev {
            pos: parent.map_or(1, |p| p.pos + 1),
            hash,
        }
    }
}

/// How a hash is stored.
#[derive(Serialize, Deserialize)]
enum StoredHash<'a> {
    Md5([u8; 16]),
    Text(std::borrow::Cow<'a, str>),
}

fn hash_bytes(hash: &str) -> Option<[u8; 16]> {
    let lower_hex =
        hash.len() == 32 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let mut out = [0u8; 16];
    (lower_hex && hex::decode_to_slice(hash, &mut out).is_ok()).then_some(out)
}

impl Serialize for Rev {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let hash = match hash_bytes(&self.hash) {
            Some(b) => StoredHash::Md5(b),
            None => StoredHash::Text(std::borrow::Cow::Borrowed(&self.hash)),
        };
        (self.pos, hash).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Rev {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Rev, D::Error> {
        let (pos, hash) = <(u64, StoredHash<'static>)>::deserialize(d)?;
        let hash = match hash {
            StoredHash::Md5(b) => hex::encode(b),
            StoredHash::Text(t) => t.into_owned(),
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
        Ok(Rev {
            pos,
            hash: hash.to_string(),
        })
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

/// Revisions order by generation, then by hash bytes (CouchDB's order).
impl Ord for Rev {
    fn cmp(&self, other: &Rev) -> Ordering {
        self.pos
            .cmp(&other.pos)
            .then_with(|| self.hash.as_bytes().cmp(other.hash.as_bytes()))
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
        let md5 = serde_json::to_value(Rev::next(None, false, b"{}")).unwrap();
        assert_eq!(md5[1]["Md5"].as_array().unwrap().len(), 16);
        assert!(
            serde_json::to_value(Rev::new(3, "ABCDEF0123456789abcdef0123456789")).unwrap()[1]
                ["Text"]
                .is_string()
        );
    }

    #[test]
    fn next_is_deterministic_and_sensitive() {
        let a = Rev::next(None, false, b"{\"a\":1}");
        assert_eq!(a, Rev::next(None, false, b"{\"a\":1}"));
        assert_eq!(a.pos, 1);
        assert_eq!(a.hash.len(), 32);
        assert_ne!(a, Rev::next(None, true, b"{\"a\":1}"));
        assert_ne!(a, Rev::next(None, false, b"{\"a\":2}"));
        let b = Rev::next(Some(&a), false, b"{\"a\":1}");
        assert_eq!(b.pos, 2);
        assert_ne!(b.hash, a.hash);
    }
}
