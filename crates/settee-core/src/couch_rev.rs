//! CouchDB's revision hash: the MD5 of the Erlang external term format of
//! an edit, `[Deleted, ParentPos, ParentHash, Body, Attachments]`, so the
//! same edit made on CouchDB and on Settee gets the same revision id (a
//! migration writing to both, or replaying the same edits into both, then
//! replicates without a conflict).
//!
//! The term, as CouchDB 3.4 builds it (checked against the reference
//! CouchDB: `crates/settee-core/tests/couch_rev_goldens.rs`):
//! - `Deleted` the atom `true`/`false`; atoms in the latin-1 form
//!   (`ATOM_EXT`), which is what the reference's `term_to_binary` writes;
//! - `ParentPos` the parent's generation (0 for a new document) and
//!   `ParentHash` its hash — 32 hex digits as their 16 bytes, any other
//!   hash as its text's bytes — or the integer 0 without a parent;
//! - `Body` the body as CouchDB's JSON decoder holds it: an object is
//!   `{[{Key, Value}, …]}` in document order where, of members with the
//!   same name, only the last is kept; strings are binaries of their
//!   UTF-8; numbers written without a fraction or exponent are integers
//!   (of any size), others doubles; `true`, `false`, `null` are atoms;
//!   an array is a list — written, as `term_to_binary` writes it, as a
//!   string (`STRING_EXT`) when every element is an integer 0..=255;
//! - `Attachments` one `{Name, ContentType, Digest}` per attachment of the
//!   new revision, in the reverse of the order the body lists them (the
//!   order CouchDB holds them in), `Digest` the 16 bytes of the MD5 of the
//!   stored (possibly gzip-encoded) bytes.
//!
//! Invariant: [`hash`] is a pure function of its inputs; it answers `None`
//! (the caller then uses Settee's own hash, `Rev::next`) only for a body
//! it cannot read as CouchDB would (an attachment stub without an MD5
//! digest, or text that is not a JSON object).

use md5::{Digest as _, Md5};
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::rev::{Rev, RevHash};

/// `term_to_binary` tags used here.
mod tag {
    pub const VERSION: u8 = 131;
    pub const NEW_FLOAT: u8 = 70;
    pub const SMALL_INTEGER: u8 = 97;
    pub const INTEGER: u8 = 98;
    pub const ATOM: u8 = 100;
    pub const SMALL_TUPLE: u8 = 104;
    pub const NIL: u8 = 106;
    pub const STRING: u8 = 107;
    pub const LIST: u8 = 108;
    pub const BINARY: u8 = 109;
    pub const SMALL_BIG: u8 = 110;
}

/// The hash CouchDB gives the revision that edits `parent` (None for a new
/// document) into `body` (the stored body text: a JSON object whose
/// `_attachments` member, if any, holds the new revision's stubs).
pub fn hash(parent: Option<&Rev>, deleted: bool, body: &str) -> Option<[u8; 16]> {
    let mut out = Vec::with_capacity(body.len() + 64);
    out.push(tag::VERSION);
    out.push(tag::LIST);
    out.extend_from_slice(&5u32.to_be_bytes());
    atom(&mut out, if deleted { "true" } else { "false" });
    match parent {
        Some(p) => {
            integer(&mut out, i128::from(p.pos));
            match &p.hash {
                RevHash::Digest(b) => binary(&mut out, b),
                RevHash::Text(t) => match decode_hex_32(t) {
                    Some(b) => binary(&mut out, &b),
                    None => binary(&mut out, t.as_bytes()),
                },
            }
        }
        None => {
            integer(&mut out, 0);
            integer(&mut out, 0);
        }
    }
    let members: Vec<(String, &RawValue)> = serde_json::from_str::<Members>(body).ok()?.0;
    let mut atts = None;
    let mut pairs = Vec::with_capacity(members.len());
    for (k, v) in members {
        if k == "_attachments" {
            atts = Some(v);
            continue;
        }
        let mut bytes = Vec::with_capacity(v.get().len() + 8);
        let mut de = serde_json::Deserializer::from_str(v.get());
        Term(&mut bytes).deserialize(&mut de).ok()?;
        pairs.push((k, bytes));
    }
    object(&mut out, dedup_keep_last(pairs));
    match atts {
        None => out.push(tag::NIL),
        Some(raw) => attachments(&mut out, raw)?,
    }
    out.push(tag::NIL);
    Some(Md5::digest(&out).into())
}

/// 32 hex digits (either case) as the 16 bytes they spell.
fn decode_hex_32(t: &str) -> Option<[u8; 16]> {
    if t.len() != 32 {
        return None;
    }
    let mut b = [0u8; 16];
    hex::decode_to_slice(t, &mut b).ok()?;
    Some(b)
}

/// The attachments' `{Name, ContentType, Digest}` list, from the stubs of
/// the body's `_attachments` object, last first.
fn attachments(out: &mut Vec<u8>, raw: &RawValue) -> Option<()> {
    use base64::Engine as _;
    let stubs: Vec<(String, &RawValue)> = serde_json::from_str::<Members>(raw.get()).ok()?.0;
    if stubs.is_empty() {
        out.push(tag::NIL);
        return Some(());
    }
    out.push(tag::LIST);
    out.extend_from_slice(&u32::try_from(stubs.len()).ok()?.to_be_bytes());
    for (name, stub) in stubs.iter().rev() {
        #[derive(serde::Deserialize)]
        struct Stub<'a> {
            content_type: Option<&'a str>,
            digest: &'a str,
        }
        let stub: Stub = serde_json::from_str(stub.get()).ok()?;
        let digest = base64::engine::general_purpose::STANDARD
            .decode(stub.digest.strip_prefix("md5-")?)
            .ok()?;
        out.extend_from_slice(&[tag::SMALL_TUPLE, 3]);
        binary(out, name.as_bytes());
        binary(out, stub.content_type.unwrap_or_default().as_bytes());
        binary(out, &digest);
    }
    out.push(tag::NIL);
    Some(())
}

/// Of members with the same name only the last, where it stands.
fn dedup_keep_last(pairs: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    if pairs.len() < 2 {
        return pairs;
    }
    let mut last = std::collections::HashMap::with_capacity(pairs.len());
    for (i, (k, _)) in pairs.iter().enumerate() {
        last.insert(k.clone(), i);
    }
    if last.len() == pairs.len() {
        return pairs;
    }
    pairs
        .into_iter()
        .enumerate()
        .filter(|(i, (k, _))| last.get(k) == Some(i))
        .map(|(_, p)| p)
        .collect()
}

/// `{[{K, V}, …]}` of encoded values.
fn object(out: &mut Vec<u8>, pairs: Vec<(String, Vec<u8>)>) {
    out.extend_from_slice(&[tag::SMALL_TUPLE, 1]);
    if pairs.is_empty() {
        out.push(tag::NIL);
        return;
    }
    out.push(tag::LIST);
    // An object's members are bounded by the document size, far below 2^32.
    out.extend_from_slice(&(pairs.len() as u32).to_be_bytes());
    for (k, v) in pairs {
        out.extend_from_slice(&[tag::SMALL_TUPLE, 2]);
        binary(out, k.as_bytes());
        out.extend_from_slice(&v);
    }
    out.push(tag::NIL);
}

fn atom(out: &mut Vec<u8>, name: &str) {
    out.push(tag::ATOM);
    out.extend_from_slice(&(name.len() as u16).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
}

fn binary(out: &mut Vec<u8>, b: &[u8]) {
    out.push(tag::BINARY);
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

fn integer(out: &mut Vec<u8>, v: i128) {
    if (0..=255).contains(&v) {
        out.extend_from_slice(&[tag::SMALL_INTEGER, v as u8]);
    } else if let Ok(small) = i32::try_from(v) {
        out.push(tag::INTEGER);
        out.extend_from_slice(&small.to_be_bytes());
    } else {
        let mut mag = v.unsigned_abs();
        let mut digits = Vec::with_capacity(16);
        while mag > 0 {
            digits.push(mag as u8);
            mag >>= 8;
        }
        out.extend_from_slice(&[tag::SMALL_BIG, digits.len() as u8, u8::from(v < 0)]);
        out.extend_from_slice(&digits);
    }
}

/// A JSON object's members in order, values left as text.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for Members<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut v = Vec::with_capacity(m.size_hint().unwrap_or(4));
                while let Some(kv) = m.next_entry::<String, &'de RawValue>()? {
                    v.push(kv);
                }
                Ok(Members(v))
            }
        }
        d.deserialize_map(V)
    }
}

/// Writes the term of one JSON value as it is deserialized.
struct Term<'o>(&'o mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Term<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Term<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        atom(self.0, if v { "true" } else { "false" });
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        atom(self.0, "null");
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        integer(self.0, i128::from(v));
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        integer(self.0, i128::from(v));
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.0.push(tag::NEW_FLOAT);
        self.0.extend_from_slice(&v.to_bits().to_be_bytes());
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        binary(self.0, v.as_bytes());
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
        let start = self.0.len();
        self.0.push(tag::LIST);
        self.0.extend_from_slice(&[0; 4]);
        let mut n: u32 = 0;
        let mut bytes_only = true;
        loop {
            let at = self.0.len();
            if s.next_element_seed(Term(&mut *self.0))?.is_none() {
                break;
            }
            n += 1;
            bytes_only &= self.0.len() == at + 2 && self.0[at] == tag::SMALL_INTEGER;
        }
        if n == 0 {
            self.0.truncate(start);
            self.0.push(tag::NIL);
        } else if bytes_only && n <= u32::from(u16::MAX) {
            // A list of integers 0..=255 is written as a string.
            let bytes: Vec<u8> = self.0[start + 5..]
                .iter()
                .skip(1)
                .step_by(2)
                .copied()
                .collect();
            self.0.truncate(start);
            self.0.push(tag::STRING);
            self.0.extend_from_slice(&(n as u16).to_be_bytes());
            self.0.extend_from_slice(&bytes);
        } else {
            self.0[start + 1..start + 5].copy_from_slice(&n.to_be_bytes());
            self.0.push(tag::NIL);
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        let mut pairs = Vec::with_capacity(m.size_hint().unwrap_or(4));
        while let Some(k) = m.next_key::<String>()? {
            let mut v = Vec::new();
            m.next_value_seed(Term(&mut v))?;
            pairs.push((k, v));
        }
        object(self.0, dedup_keep_last(pairs));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex_of(parent: Option<&Rev>, deleted: bool, body: &str) -> String {
        hex::encode(hash(parent, deleted, body).unwrap())
    }

    /// Known answers recorded from CouchDB 3.4.3 (PUT of a new document,
    /// an update, a deletion).
    #[test]
    fn edits_hash_as_couchdb_hashes_them() {
        assert_eq!(
            hex_of(None, false, "{}"),
            "967a00dff5e02add41819138abb3284d"
        );
        assert_eq!(
            hex_of(None, false, r#"{"foo":"bar"}"#),
            "4c6114c65e295552ab1019e2b046b10e"
        );
        let r1 = Rev::new(1, "0785e9eb543380151003dc452c3a001a");
        assert_eq!(hex_of(None, false, r#"{"x":1}"#), r1.hash.to_string());
        assert_eq!(
            hex_of(
                Some(&r1),
                false,
                r#"{"_attachments":{"a.bin":{"content_type":"image/png","revpos":2,"digest":"md5-kAFQmDzST7DWlj99KOF/cg==","length":3,"stub":true}},"x":1}"#
            ),
            "fbcf5f459b9246ceb28e16a7800a058e"
        );
        assert_eq!(
            hex_of(None, false, r#"{"a":-2147483649,"b":[1,2.5,"x",null,true,false],"c":{"d":-300},"n":12345678901234567890}"#).len(),
            32
        );
    }

    #[test]
    fn lists_of_bytes_are_strings() {
        // Recorded from CouchDB 3.4.3.
        let body = format!(r#"{{"k2":"{}","a":[0]}}"#, "x".repeat(300));
        assert_eq!(
            hex_of(None, false, &body),
            "62ef24e07d54b2816a53972c213f8f8d"
        );
    }

    #[test]
    fn duplicate_members_keep_the_last_where_it_stands() {
        assert_eq!(
            hash(None, false, r#"{"b":1,"a":2,"b":3}"#),
            hash(None, false, r#"{"a":2,"b":3}"#)
        );
        assert_ne!(
            hash(None, false, r#"{"a":2,"b":3}"#),
            hash(None, false, r#"{"b":3,"a":2}"#)
        );
    }

    #[test]
    fn integers_and_doubles_differ_and_big_integers_are_bignums() {
        assert_ne!(
            hash(None, false, r#"{"a":1}"#),
            hash(None, false, r#"{"a":1.0}"#)
        );
        assert_eq!(
            hash(None, false, r#"{"a":1e2}"#),
            hash(None, false, r#"{"a":100.0}"#)
        );
        let mut out = Vec::new();
        integer(&mut out, 12_345_678_901_234_567_890);
        assert_eq!(out[..3], [tag::SMALL_BIG, 8, 0]);
        out.clear();
        integer(&mut out, -2_147_483_649);
        assert_eq!(out, [tag::SMALL_BIG, 4, 1, 1, 0, 0, 128]);
    }

    #[test]
    fn what_couchdb_would_not_hash_this_way_is_refused() {
        assert!(hash(None, false, "[1]").is_none());
        let sha = r#"{"_attachments":{"a":{"content_type":"x","digest":"sha-abc","stub":true}}}"#;
        assert!(hash(None, false, sha).is_none());
    }
}
