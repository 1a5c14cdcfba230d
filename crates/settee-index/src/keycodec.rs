//! Order-preserving ("memcomparable") byte encoding of view keys and rows.
//!
//! This module owns the bytes under which an index stores its rows, so that
//! a store sorting keys byte-wise (RocksDB) keeps them in CouchDB's view
//! order, and the byte bounds that CouchDB's range queries and groups map to.
//!
//! # Invariants (property-tested in `keycodec/tests.rs`)
//!
//! * **Order.** For [`Collation::Couch`],
//!   `encode_key(a).cmp(&encode_key(b)) == settee_core::collate::collate(a, b)`
//!   for all JSON values; for [`Collation::Raw`] the same holds against
//!   [`collate_raw`]. Both are total orders, so encoding is also
//!   **injective**: equal bytes if and only if the order says `Equal`.
//! * **Rows.** [`encode_row_key`] sorts by (key under the *loose* order of
//!   CouchDB, doc id byte-wise, key under the total order), which is
//!   CouchDB's view row order (`less_json_ids`: the key by collation, then
//!   the doc id as raw bytes) refined into a total order. Keys CouchDB's
//!   collation calls equal (`1` and `1.0`; `"\u{e9}"` and `"e\u{301}"`)
//!   interleave by doc id exactly as in CouchDB; recorded from CouchDB
//!   3.4.3 in the tests.
//! * **Prefix-free.** No loose encoding of a value is a proper prefix of
//!   another's, which is what makes the range bounds below exact.
//! * **Not reversible.** The key JSON cannot be recovered from the bytes
//!   (ICU sort keys lose it); callers store the key JSON in the row value.
//!   [`decode_row_key`] only splits a row key into its parts.
//!
//! # Byte layout
//!
//! A key is encoded as `LOOSE ++ TIE` and a row key as
//! `LOOSE ++ DOCID ++ TIE`, where:
//!
//! * `LOOSE` orders by CouchDB's comparison as-is (a total *preorder*:
//!   [`settee_core::collate::collate_loose`], or [`collate_raw_loose`]). It
//!   is a tag byte per value, followed by:
//!
//!   | value | Couch tag | Raw tag | then |
//!   |---|---|---|---|
//!   | end of array / object | `00` | `00` | — |
//!   | `null` | `10` | `32` | — |
//!   | `false` | `11` | `31` | — |
//!   | `true` | `12` | `33` | — |
//!   | number < 0 | `20` | `20` | 10 bytes: the bitwise NOT of the positive layout of its magnitude |
//!   | number = 0 (`0`, `0.0`, `-0.0`) | `21` | `21` | — |
//!   | number > 0 | `22` | `22` | 2 bytes big-endian `e + 1075`, 8 bytes big-endian fraction (below) |
//!   | string | `30` | `60` | Couch: the ICU sort key, escaped; Raw: the UTF-8 bytes, escaped |
//!   | array | `40` | `50` | each element, then `00` |
//!   | object | `50` | `40` | Couch: per member the key as a string (tag `30`…) then the value; Raw: per member `01`, the escaped key bytes, the value; then `00` |
//!
//!   A positive number `v` is written as `v = 2^e * (1 + f)` with `f` in
//!   `[0, 1)`: every `u64`, `i64` and finite `f64` has such a form with
//!   `-1074 <= e <= 1023` and at most 63 fraction bits, which are stored
//!   left-aligned in a `u64`. The form is canonical, so equal values (`3`
//!   and `3.0`, integers beyond 2^53 and the float nearest to them
//!   compared exactly) get equal or correctly ordered bytes; larger `e`
//!   means larger `v` because `1 + f < 2`.
//!
//!   *Escaped* bytes: every `00` becomes `00 FF`, and `00 01` terminates.
//!   This keeps byte order and makes the field prefix-free (a shorter string
//!   ends with `00 01`, which sorts below any continuation). ICU sort keys
//!   never contain `00`; they are escaped anyway so that the order never
//!   depends on that.
//!
//!   Type tags rise in collation order and the end marker `00` is below
//!   every tag, so "arrays element-wise, then shorter first" and "objects
//!   member by member, then fewer members first" are plain byte order.
//! * `DOCID` is the doc id's UTF-8 bytes, escaped: CouchDB compares doc ids
//!   of equal keys as raw bytes (`"A1" < "B" < "a" < "~" < "\u{e9}"`,
//!   recorded from CouchDB 3.4.3), for both collations.
//! * `TIE` breaks ties between keys that `LOOSE` calls equal, in the way of
//!   [`settee_core::collate::collate`]: one entry per number and (Couch
//!   only) per string, including object member names, in traversal order —
//!   `00` for an integer and `01` for a float (integers first), the
//!   escaped UTF-8 bytes of a string (code point order). `TIE` is only ever
//!   compared between keys with equal `LOOSE`, which have the same shape,
//!   so the entries line up.
//!
//! An ICU sort key is specific to the collation data it was made with (the
//! `icu_collator` crate version); an index built with one version must be
//! rebuilt when the data changes.

use std::borrow::Cow;

use serde_json::Value;
use settee_core::collate::{classify, collator, Num};

#[cfg(test)]
mod tests;

/// Which ordering of view keys an index uses (the view option
/// `"collation"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collation {
    /// CouchDB's default view collation (`settee_core::collate`): ICU root
    /// collation for strings, `null < false < true < numbers < strings <
    /// arrays < objects`.
    Couch,
    /// `"options": {"collation": "raw"}`: Erlang term order, as CouchDB's
    /// documentation describes — `numbers < false < null < true < objects <
    /// arrays < strings`, strings as raw bytes (code points). See
    /// [`collate_raw`].
    Raw,
}

const END: u8 = 0x00;
const RAW_MEMBER: u8 = 0x01;
const NUM_NEG: u8 = 0x20;
const NUM_ZERO: u8 = 0x21;
const NUM_POS: u8 = 0x22;
/// Bytes after the tag of a non-zero number: 2 exponent + 8 fraction.
const NUM_BODY_LEN: usize = 10;
/// `e + EXP_BIAS` is in `1..=2098` for every finite `f64` and every 64-bit
/// integer, so it fits the two exponent bytes.
const EXP_BIAS: i32 = 1075;
const TIE_INT: u8 = 0x00;
const TIE_FLOAT: u8 = 0x01;
/// Nesting the decoder accepts; `serde_json` refuses to parse documents
/// nested deeper than 128 levels, so encoded keys never come close.
const DECODE_DEPTH_MAX: usize = 512;

/// Tag bytes of one collation. Numbers share their tags across collations.
struct Tags {
    null: u8,
    false_: u8,
    true_: u8,
    string: u8,
    array: u8,
    object: u8,
}

const COUCH_TAGS: Tags = Tags {
    null: 0x10,
    false_: 0x11,
    true_: 0x12,
    string: 0x30,
    array: 0x40,
    object: 0x50,
};

const RAW_TAGS: Tags = Tags {
    null: 0x32,
    false_: 0x31,
    true_: 0x33,
    string: 0x60,
    array: 0x50,
    object: 0x40,
};

impl Collation {
    fn tags(self) -> &'static Tags {
        match self {
            Collation::Couch => &COUCH_TAGS,
            Collation::Raw => &RAW_TAGS,
        }
    }
}

/// A row key that does not have the layout this module writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyDecodeError {
    #[error("encoded key ends early at byte {0}")]
    Truncated(usize),
    #[error("unexpected byte {byte:#04x} at {at} in an encoded key")]
    BadByte { at: usize, byte: u8 },
    #[error("encoded key nested deeper than {DECODE_DEPTH_MAX} levels")]
    TooDeep,
    #[error("doc id in a row key is not UTF-8")]
    DocIdNotUtf8,
    #[error("{0} trailing bytes after an encoded row key")]
    Trailing(usize),
}

// ---------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------

/// The order-preserving encoding of a view key (`LOOSE ++ TIE`).
pub fn encode_key(key: &Value, collation: Collation) -> Vec<u8> {
    let mut enc = Encoder::new(collation);
    enc.value(key);
    let Encoder { mut loose, tie, .. } = enc;
    loose.extend_from_slice(&tie);
    loose
}

/// The order-preserving encoding of a view row key (`LOOSE ++ DOCID ++
/// TIE`): rows sort by key (CouchDB's loose comparison), then doc id (raw
/// bytes), then key (total order).
pub fn encode_row_key(key: &Value, doc_id: &str, collation: Collation) -> Vec<u8> {
    let mut enc = Encoder::new(collation);
    enc.value(key);
    let Encoder { mut loose, tie, .. } = enc;
    put_escaped(&mut loose, doc_id.as_bytes());
    loose.extend_from_slice(&tie);
    loose
}

/// Only the `LOOSE` part of a key's encoding: equal for exactly the keys
/// CouchDB's collation calls equal. It is the group identity of
/// `group=true` and the prefix every row with that key starts with.
pub fn encode_loose_key(key: &Value, collation: Collation) -> Vec<u8> {
    let mut enc = Encoder::new(collation);
    enc.value(key);
    enc.loose
}

struct Encoder {
    collation: Collation,
    tags: &'static Tags,
    loose: Vec<u8>,
    tie: Vec<u8>,
    /// Reused buffer for ICU sort keys.
    scratch: Vec<u8>,
}

impl Encoder {
    fn new(collation: Collation) -> Self {
        Encoder {
            collation,
            tags: collation.tags(),
            loose: Vec::with_capacity(32),
            tie: Vec::new(),
            scratch: Vec::new(),
        }
    }

    fn value(&mut self, v: &Value) {
        match v {
            Value::Null => self.loose.push(self.tags.null),
            Value::Bool(false) => self.loose.push(self.tags.false_),
            Value::Bool(true) => self.loose.push(self.tags.true_),
            Value::Number(n) => {
                let num = classify(n);
                put_number(&mut self.loose, num);
                self.tie.push(match num {
                    Num::Int(_) => TIE_INT,
                    Num::Float(_) => TIE_FLOAT,
                });
            }
            Value::String(s) => {
                self.loose.push(self.tags.string);
                self.string_body(s);
            }
            Value::Array(items) => {
                self.loose.push(self.tags.array);
                for item in items {
                    self.value(item);
                }
                self.loose.push(END);
            }
            Value::Object(members) => {
                self.loose.push(self.tags.object);
                for (name, value) in members {
                    match self.collation {
                        Collation::Couch => self.loose.push(self.tags.string),
                        Collation::Raw => self.loose.push(RAW_MEMBER),
                    }
                    self.string_body(name);
                    self.value(value);
                }
                self.loose.push(END);
            }
        }
    }

    /// A string after its tag: the sort key (and a tie entry) for Couch,
    /// the bytes themselves for Raw.
    fn string_body(&mut self, s: &str) {
        match self.collation {
            Collation::Couch => {
                self.scratch.clear();
                let Ok(()) = collator().write_sort_key_to(s, &mut self.scratch);
                put_escaped(&mut self.loose, &self.scratch);
                put_escaped(&mut self.tie, s.as_bytes());
            }
            Collation::Raw => put_escaped(&mut self.loose, s.as_bytes()),
        }
    }
}

fn put_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        if b == 0 {
            out.extend_from_slice(&[0x00, 0xFF]);
        } else {
            out.push(b);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

/// `(e, fraction)` of a positive magnitude `2^e * (1 + fraction / 2^64)`.
fn int_parts(magnitude: u64) -> (i32, u64) {
    debug_assert!(magnitude > 0);
    let e = 63 - magnitude.leading_zeros() as i32;
    // The bits below the leading one, left-aligned.
    let fraction = if e == 0 { 0 } else { magnitude << (64 - e) };
    (e, fraction)
}

fn float_parts(magnitude: f64) -> (i32, u64) {
    debug_assert!(magnitude > 0.0 && magnitude.is_finite());
    let bits = magnitude.to_bits();
    let exponent_field = ((bits >> 52) & 0x7ff) as i32;
    let mantissa = bits & ((1u64 << 52) - 1);
    if exponent_field == 0 {
        // Subnormal: mantissa * 2^-1074, normalized here.
        let (e, fraction) = int_parts(mantissa);
        (e - 1074, fraction)
    } else {
        (exponent_field - 1023, mantissa << 12)
    }
}

fn put_number(out: &mut Vec<u8>, num: Num) {
    let (negative, parts) = match num {
        Num::Int(0) => (false, None),
        Num::Int(i) => (i < 0, Some(int_parts(i.unsigned_abs() as u64))),
        Num::Float(f) if f == 0.0 || f.is_nan() => (false, None),
        Num::Float(f) => (f < 0.0, Some(float_parts(f.abs()))),
    };
    let Some((e, fraction)) = parts else {
        out.push(NUM_ZERO);
        return;
    };
    let biased = u16::try_from(e + EXP_BIAS).expect("exponent of a finite number fits");
    let mut body = [0u8; NUM_BODY_LEN];
    body[..2].copy_from_slice(&biased.to_be_bytes());
    body[2..].copy_from_slice(&fraction.to_be_bytes());
    if negative {
        // Larger magnitudes must sort lower.
        for b in &mut body {
            *b = !*b;
        }
        out.push(NUM_NEG);
    } else {
        out.push(NUM_POS);
    }
    out.extend_from_slice(&body);
}

// ---------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------

/// A row key split into its parts (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowKey<'a> {
    loose: &'a [u8],
    doc_id: Cow<'a, str>,
    tie: &'a [u8],
}

impl<'a> RowKey<'a> {
    /// The key's `LOOSE` part: its [`encode_loose_key`].
    pub fn loose_key(&self) -> &'a [u8] {
        self.loose
    }

    /// The key as [`encode_key`] encodes it.
    pub fn key_bytes(&self) -> Vec<u8> {
        [self.loose, self.tie].concat()
    }

    pub fn doc_id(&self) -> &str {
        &self.doc_id
    }

    pub fn into_doc_id(self) -> Cow<'a, str> {
        self.doc_id
    }
}

/// Splits a row key written by [`encode_row_key`] into key bytes and doc
/// id, checking its whole structure on the way.
pub fn decode_row_key(bytes: &[u8], collation: Collation) -> Result<RowKey<'_>, KeyDecodeError> {
    let mut ties = Vec::new();
    let loose_end = skip_value(bytes, 0, collation, &mut ties, 0)?;
    let (doc_bytes, doc_end) = read_escaped(bytes, loose_end)?;
    let tie_end = skip_ties(bytes, doc_end, &ties)?;
    if tie_end != bytes.len() {
        return Err(KeyDecodeError::Trailing(bytes.len() - tie_end));
    }
    let doc_id = match doc_bytes {
        Cow::Borrowed(b) => {
            Cow::Borrowed(std::str::from_utf8(b).map_err(|_| KeyDecodeError::DocIdNotUtf8)?)
        }
        Cow::Owned(b) => {
            Cow::Owned(String::from_utf8(b).map_err(|_| KeyDecodeError::DocIdNotUtf8)?)
        }
    };
    Ok(RowKey {
        loose: &bytes[..loose_end],
        doc_id,
        tie: &bytes[doc_end..],
    })
}

/// Kinds of `TIE` entries, in order, found while skipping a `LOOSE` value.
#[derive(Clone, Copy)]
enum TieEntry {
    Number,
    String,
}

fn byte_at(bytes: &[u8], at: usize) -> Result<u8, KeyDecodeError> {
    bytes.get(at).copied().ok_or(KeyDecodeError::Truncated(at))
}

/// Returns the position after the encoded value starting at `at`.
fn skip_value(
    bytes: &[u8],
    at: usize,
    collation: Collation,
    ties: &mut Vec<TieEntry>,
    depth: usize,
) -> Result<usize, KeyDecodeError> {
    if depth > DECODE_DEPTH_MAX {
        return Err(KeyDecodeError::TooDeep);
    }
    let tags = collation.tags();
    let tag = byte_at(bytes, at)?;
    let mut pos = at + 1;
    match tag {
        NUM_ZERO => ties.push(TieEntry::Number),
        NUM_NEG | NUM_POS => {
            if bytes.len() < pos + NUM_BODY_LEN {
                return Err(KeyDecodeError::Truncated(bytes.len()));
            }
            pos += NUM_BODY_LEN;
            ties.push(TieEntry::Number);
        }
        t if t == tags.null || t == tags.false_ || t == tags.true_ => {}
        t if t == tags.string => {
            pos = skip_escaped(bytes, pos)?;
            if collation == Collation::Couch {
                ties.push(TieEntry::String);
            }
        }
        t if t == tags.array => loop {
            if byte_at(bytes, pos)? == END {
                pos += 1;
                break;
            }
            pos = skip_value(bytes, pos, collation, ties, depth + 1)?;
        },
        t if t == tags.object => loop {
            let lead = byte_at(bytes, pos)?;
            if lead == END {
                pos += 1;
                break;
            }
            let member = match collation {
                Collation::Couch => tags.string,
                Collation::Raw => RAW_MEMBER,
            };
            if lead != member {
                return Err(KeyDecodeError::BadByte {
                    at: pos,
                    byte: lead,
                });
            }
            pos = skip_escaped(bytes, pos + 1)?;
            if collation == Collation::Couch {
                ties.push(TieEntry::String);
            }
            pos = skip_value(bytes, pos, collation, ties, depth + 1)?;
        },
        byte => return Err(KeyDecodeError::BadByte { at, byte }),
    }
    Ok(pos)
}

/// Position after an escaped field starting at `at` (after its `00 01`).
fn skip_escaped(bytes: &[u8], at: usize) -> Result<usize, KeyDecodeError> {
    let mut pos = at;
    loop {
        let Some(offset) = bytes[pos.min(bytes.len())..].iter().position(|&b| b == 0) else {
            return Err(KeyDecodeError::Truncated(bytes.len()));
        };
        let zero = pos + offset;
        match byte_at(bytes, zero + 1)? {
            0x01 => return Ok(zero + 2),
            0xFF => pos = zero + 2,
            byte => return Err(KeyDecodeError::BadByte { at: zero + 1, byte }),
        }
    }
}

/// The unescaped content of the field at `at`, and the position after it.
fn read_escaped(bytes: &[u8], at: usize) -> Result<(Cow<'_, [u8]>, usize), KeyDecodeError> {
    let end = skip_escaped(bytes, at)?;
    let body = &bytes[at..end - 2];
    if !body.contains(&0) {
        return Ok((Cow::Borrowed(body), end));
    }
    let mut out = Vec::with_capacity(body.len());
    let mut iter = body.iter();
    while let Some(&b) = iter.next() {
        out.push(b);
        if b == 0 {
            // `skip_escaped` has checked that an `FF` follows.
            iter.next();
        }
    }
    Ok((Cow::Owned(out), end))
}

fn skip_ties(bytes: &[u8], at: usize, ties: &[TieEntry]) -> Result<usize, KeyDecodeError> {
    let mut pos = at;
    for entry in ties {
        match entry {
            TieEntry::Number => match byte_at(bytes, pos)? {
                TIE_INT | TIE_FLOAT => pos += 1,
                byte => return Err(KeyDecodeError::BadByte { at: pos, byte }),
            },
            TieEntry::String => pos = skip_escaped(bytes, pos)?,
        }
    }
    Ok(pos)
}

// ---------------------------------------------------------------------------
// Groups and ranges
// ---------------------------------------------------------------------------

/// How rows are grouped for a reduce query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupLevel {
    /// `group=true`: one group per key (keys CouchDB's collation calls
    /// equal share a group, as in CouchDB).
    Exact,
    /// `group_level=N`: array keys grouped by their first `N` elements
    /// (other keys by the whole key); `N = 0` is one group for all rows,
    /// like `group=false`.
    Level(usize),
}

/// The identity of the group a row belongs to, from its encoded key or row
/// key: rows are in the same group exactly when their group keys are equal,
/// and each group is a contiguous run of rows. It is the `LOOSE` encoding
/// of the group's key (CouchDB shows the first row's key, truncated to
/// `N` elements for `group_level`).
pub fn group_key(
    encoded: &[u8],
    level: GroupLevel,
    collation: Collation,
) -> Result<Cow<'_, [u8]>, KeyDecodeError> {
    let mut ties = Vec::new();
    let loose_end = skip_value(encoded, 0, collation, &mut ties, 0)?;
    let loose = &encoded[..loose_end];
    let n = match level {
        GroupLevel::Exact => return Ok(Cow::Borrowed(loose)),
        GroupLevel::Level(0) => return Ok(Cow::Borrowed(&[])),
        GroupLevel::Level(n) => n,
    };
    if loose[0] != collation.tags().array {
        return Ok(Cow::Borrowed(loose));
    }
    let mut pos = 1;
    for _ in 0..n {
        if loose[pos] == END {
            // Not longer than the level: the group is the whole key.
            return Ok(Cow::Borrowed(loose));
        }
        pos = skip_value(loose, pos, collation, &mut ties, 1)?;
    }
    if loose[pos] == END {
        return Ok(Cow::Borrowed(loose));
    }
    let mut truncated = loose[..pos].to_vec();
    truncated.push(END);
    Ok(Cow::Owned(truncated))
}

/// A range of encoded row keys: `lower <= bytes < upper`, either side
/// absent when unbounded — the shape of RocksDB's iterate bounds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ByteRange {
    /// Inclusive lower bound.
    pub lower: Option<Vec<u8>>,
    /// Exclusive upper bound.
    pub upper: Option<Vec<u8>>,
}

impl ByteRange {
    pub fn contains(&self, bytes: &[u8]) -> bool {
        self.lower.as_deref().is_none_or(|lower| bytes >= lower)
            && self.upper.as_deref().is_none_or(|upper| bytes < upper)
    }

    /// No byte string lies in the range.
    pub fn is_empty(&self) -> bool {
        match (&self.lower, &self.upper) {
            (Some(lower), Some(upper)) => lower >= upper,
            _ => false,
        }
    }
}

/// A doc id bound of a range query, with CouchDB's defaults: an absent
/// `startkey_docid`/`endkey_docid` is the lowest doc id at the low end and
/// the highest at the high end (CouchDB's `<<>>` and `<<255>>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocIdBound<'a> {
    /// Below every doc id.
    Min,
    Id(&'a str),
    /// Above every doc id.
    Max,
}

/// The parameters of a view query that select a range of rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ViewRange<'a> {
    pub start_key: Option<&'a Value>,
    /// Ignored without `start_key`, as in CouchDB.
    pub start_key_doc_id: Option<&'a str>,
    pub end_key: Option<&'a Value>,
    /// Ignored without `end_key`, as in CouchDB.
    pub end_key_doc_id: Option<&'a str>,
    pub inclusive_end: bool,
    /// With `descending`, `start_key` is the high end of the range and
    /// `end_key` the low end; the bounds returned are still ascending byte
    /// bounds (the caller scans them backwards).
    pub descending: bool,
}

impl Default for ViewRange<'_> {
    fn default() -> Self {
        ViewRange {
            start_key: None,
            start_key_doc_id: None,
            end_key: None,
            end_key_doc_id: None,
            inclusive_end: true,
            descending: false,
        }
    }
}

/// The byte bounds of exactly the rows a CouchDB view query with these
/// parameters visits. Comparisons follow CouchDB: row `(k, id)` against a
/// bound `(K, D)` compares `k` with `K` by the loose collation, then `id`
/// with `D` as bytes; `inclusive_end=false` without `endkey_docid` leaves
/// out every row whose key equals `endkey`.
pub fn view_range(query: &ViewRange<'_>, collation: Collation) -> ByteRange {
    fn doc<'a>(id: Option<&'a str>, default: DocIdBound<'static>) -> DocIdBound<'a> {
        id.map_or(default, DocIdBound::Id)
    }
    // CouchDB flips the default doc id of an exclusive end
    // (`reverse_key_default`), which excludes every row of that key.
    fn flip(bound: DocIdBound<'_>) -> DocIdBound<'_> {
        match bound {
            DocIdBound::Min => DocIdBound::Max,
            DocIdBound::Max => DocIdBound::Min,
            id => id,
        }
    }
    let mut range = ByteRange::default();
    if !query.descending {
        if let Some(start) = query.start_key {
            let d = doc(query.start_key_doc_id, DocIdBound::Min);
            range.lower = Some(bound_before(start, d, collation));
        }
        if let Some(end) = query.end_key {
            let d = doc(query.end_key_doc_id, DocIdBound::Max);
            range.upper = if query.inclusive_end {
                bound_after(end, d, collation)
            } else {
                Some(bound_before(end, flip(d), collation))
            };
        }
    } else {
        if let Some(start) = query.start_key {
            let d = doc(query.start_key_doc_id, DocIdBound::Max);
            range.upper = bound_after(start, d, collation);
        }
        if let Some(end) = query.end_key {
            let d = doc(query.end_key_doc_id, DocIdBound::Min);
            range.lower = if query.inclusive_end {
                Some(bound_before(end, d, collation))
            } else {
                bound_after(end, flip(d), collation)
            };
        }
    }
    range
}

/// The rows whose key equals `key` under CouchDB's collation (`key=`).
pub fn key_range(key: &Value, collation: Collation) -> ByteRange {
    let loose = encode_loose_key(key, collation);
    ByteRange {
        upper: prefix_successor(&loose),
        lower: Some(loose),
    }
}

/// The rows whose key is an array starting with `prefix` (each element
/// equal under the collation), including the array `prefix` itself: the
/// rows of one `group_level` group, or `startkey=[a]&endkey=[a, {}]`
/// without the caveat that `{}` only tops non-object elements.
pub fn array_prefix_range(prefix: &[Value], collation: Collation) -> ByteRange {
    let mut enc = Encoder::new(collation);
    enc.loose.push(collation.tags().array);
    for item in prefix {
        enc.value(item);
    }
    ByteRange {
        upper: prefix_successor(&enc.loose),
        lower: Some(enc.loose),
    }
}

/// Lowest bytes of the rows at or after `(key, doc)`.
fn bound_before(key: &Value, doc: DocIdBound<'_>, collation: Collation) -> Vec<u8> {
    let mut bytes = encode_loose_key(key, collation);
    match doc {
        DocIdBound::Min => bytes,
        DocIdBound::Id(id) => {
            put_escaped(&mut bytes, id.as_bytes());
            bytes
        }
        DocIdBound::Max => {
            prefix_successor(&bytes).expect("a loose key starts with a tag below 0xFF")
        }
    }
}

/// Lowest bytes after every row at or before `(key, doc)`; `None` would be
/// "unbounded", which no encoded key needs (tags are below `FF`).
fn bound_after(key: &Value, doc: DocIdBound<'_>, collation: Collation) -> Option<Vec<u8>> {
    let mut bytes = encode_loose_key(key, collation);
    match doc {
        // No doc id is below `Min`: nothing with this key is included.
        DocIdBound::Min => Some(bytes),
        DocIdBound::Id(id) => {
            put_escaped(&mut bytes, id.as_bytes());
            prefix_successor(&bytes)
        }
        DocIdBound::Max => prefix_successor(&bytes),
    }
}

/// The smallest byte string above every string that starts with `prefix`,
/// or `None` when there is none (`prefix` is all `FF`).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|&b| b != 0xFF)?;
    let mut out = prefix[..=last].to_vec();
    out[last] += 1;
    Some(out)
}

// ---------------------------------------------------------------------------
// Raw collation
// ---------------------------------------------------------------------------

/// Total order of `"collation": "raw"` (settee-core's, shared with Mango's
/// `_id` comparisons).
pub use settee_core::collate::collate_raw;

/// CouchDB's raw collation as-is: Erlang term order of the decoded JSON
/// (`numbers < false < null < true < objects < arrays < strings`; numbers
/// by value, so `1` equals `1.0`; strings and object member names as raw
/// bytes; arrays and objects element by element, then shorter first).
pub use settee_core::collate::compare_raw as collate_raw_loose;
