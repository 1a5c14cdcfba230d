//! CouchDB's shard layout, computed as CouchDB 3's mem3 computes it, so a
//! CouchDB user's knowledge (and tooling) carries over:
//!
//! - **Ranges** ([`ranges`]): the 32-bit hash space `0..=ffffffff` cut into
//!   `q` contiguous ranges. Each range is `2^32 div q` wide, except the last,
//!   which runs to `ffffffff` and so takes the remainder (`q=3`:
//!   `00000000-55555554`, `55555555-aaaaaaa9`, `aaaaaaaa-ffffffff`). Names
//!   are `BEGIN-END` in 8 lowercase hex digits each.
//! - **Hash** ([`doc_hash`]): CRC-32 (IEEE, zlib's) of the document id's
//!   UTF-8 bytes; in a partitioned database, of the partition (the part
//!   before the first `:`), except for ids starting with `_` (design and
//!   local documents), which hash whole. A document belongs to the range
//!   holding its hash.
//! - **Shard names** ([`shard_name`]): `shards/BEGIN-END/DB.SUFFIX`, the
//!   suffix being `.` and the database's creation time in Unix seconds.
//! - **The shard map** ([`ShardMap`]): one document per database in the
//!   shape of CouchDB's `_dbs` documents (`_id`, `shard_suffix` as a list of
//!   character codes, `changelog`, `by_node`, `by_range`, `props`), parsed
//!   from and written as the same JSON.
//! - **Placement** ([`place`]): `n` copies of each range over the nodes, in
//!   CouchDB's round-robin (ranges in order, each taking the next `n` nodes
//!   of a rotated node list), deterministic here: the nodes sorted and
//!   rotated by the CRC-32 of the database name (CouchDB rotates at random).
//!
//! Invariants: the ranges of a layout tile the hash space (contiguous, no
//! gap, no overlap, first begins at 0, last ends at `ffffffff`), so every
//! id belongs to exactly one range; a [`ShardMap`] that passed
//! [`ShardMap::validate`] keeps that, has at least one copy of every range,
//! no node twice in a range, and `by_node` exactly the transpose of
//! `by_range`. Everything here is a pure function of its inputs (the
//! creation time is an argument), with no I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::{ClusterError, Result};

/// The size of the hash space (CRC-32 values).
pub const RING_SIZE: u64 = 1 << 32;
/// The largest `q` accepted (CouchDB has no limit; this bounds a shard map).
pub const MAX_Q: u32 = 1024;
/// The largest `n` accepted.
pub const MAX_N: u32 = 32;

/// One range of the hash space, both ends included.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Range {
    begin: u32,
    end: u32,
}

impl Range {
    /// The whole hash space (`q=1`).
    pub const FULL: Range = Range {
        begin: 0,
        end: u32::MAX,
    };

    /// A range from `begin` to `end`, both included.
    pub fn new(begin: u32, end: u32) -> Result<Range> {
        if begin > end {
            return Err(ClusterError::InvalidRange(format!("{begin:08x}-{end:08x}")));
        }
        Ok(Range { begin, end })
    }

    pub fn begin(&self) -> u32 {
        self.begin
    }

    pub fn end(&self) -> u32 {
        self.end
    }

    /// Whether a hash falls in this range.
    pub fn contains(&self, hash: u32) -> bool {
        self.begin <= hash && hash <= self.end
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}-{:08x}", self.begin, self.end)
    }
}

impl FromStr for Range {
    type Err = ClusterError;

    /// `BEGIN-END`, 8 hex digits each (either case, as mem3 reads them).
    fn from_str(s: &str) -> Result<Range> {
        let bad = || ClusterError::InvalidRange(s.to_string());
        let (b, e) = s.split_once('-').ok_or_else(bad)?;
        let hex8 = |t: &str| {
            if t.len() == 8 && t.bytes().all(|c| c.is_ascii_hexdigit()) {
                u32::from_str_radix(t, 16).map_err(|_| bad())
            } else {
                Err(bad())
            }
        };
        Range::new(hex8(b)?, hex8(e)?).map_err(|_| bad())
    }
}

impl Serialize for Range {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Range {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Range, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The `q` ranges of the hash space, in order, as mem3 makes them.
pub fn ranges(q: u32) -> Result<Vec<Range>> {
    if q == 0 || q > MAX_Q {
        return Err(ClusterError::InvalidQ {
            q: q.into(),
            max: MAX_Q,
        });
    }
    let inc = RING_SIZE / u64::from(q);
    let mut out = Vec::with_capacity(q as usize);
    let mut start = 0u64;
    // Each step advances by at least `inc` (>= 2^22), so this ends after q steps.
    while start < RING_SIZE {
        let end = if start + 2 * inc > RING_SIZE {
            RING_SIZE - 1
        } else {
            start + inc - 1
        };
        // Both ends are < 2^32 here.
        out.push(Range {
            begin: start as u32,
            end: end as u32,
        });
        start = end + 1;
    }
    Ok(out)
}

/// The shard hash of a document id: CRC-32 of the id, or in a partitioned
/// database of its partition (ids starting with `_` always hash whole).
/// A partitioned database's other ids always have a partition (the HTTP
/// layer checks `partition:id`); one without a colon hashes whole.
pub fn doc_hash(id: &str, partitioned: bool) -> u32 {
    let key = if partitioned && !id.starts_with('_') {
        settee_core::name::partition_of(id).unwrap_or(id)
    } else {
        id
    };
    crc32fast::hash(key.as_bytes())
}

/// The index of the range holding `hash`, in ranges that tile the hash
/// space in order (`None` only if they do not cover it).
pub fn range_index(ranges: &[Range], hash: u32) -> Option<usize> {
    let i = ranges.partition_point(|r| r.end < hash);
    ranges.get(i).filter(|r| r.contains(hash)).map(|_| i)
}

/// Checks that ranges, in order, tile the hash space exactly.
pub fn check_tiling(ranges: &[Range]) -> std::result::Result<(), String> {
    let first = ranges.first().ok_or("no ranges")?;
    if first.begin != 0 {
        return Err(format!(
            "the first range {first} does not begin at 00000000"
        ));
    }
    for w in ranges.windows(2) {
        if u64::from(w[0].end) + 1 != u64::from(w[1].begin) {
            return Err(format!("ranges {} and {} are not contiguous", w[0], w[1]));
        }
    }
    let last = ranges[ranges.len() - 1];
    if last.end != u32::MAX {
        return Err(format!("the last range {last} does not end at ffffffff"));
    }
    Ok(())
}

/// The shard suffix of a database created at `unix_secs` (`.1796475782`).
pub fn shard_suffix(unix_secs: u64) -> String {
    format!(".{unix_secs}")
}

/// A shard database's name, as CouchDB names it: `shards/BEGIN-END/DB.SUFFIX`.
pub fn shard_name(range: Range, db: &str, suffix: &str) -> String {
    format!("shards/{range}/{db}{suffix}")
}

/// The parts of a shard database name: its range, database and suffix
/// (`.` included, empty when there is none). Database names have no `.`,
/// so the suffix is what follows the last one.
pub fn parse_shard_name(name: &str) -> Option<(Range, &str, &str)> {
    let rest = name.strip_prefix("shards/")?;
    let (range, db_suffix) = rest.split_at_checked(17)?;
    let range: Range = range.parse().ok()?;
    let db_suffix = db_suffix.strip_prefix('/')?;
    let (db, suffix) = match db_suffix.rfind('.') {
        Some(i) => db_suffix.split_at(i),
        None => (db_suffix, ""),
    };
    if db.is_empty() {
        return None;
    }
    Some((range, db, suffix))
}

/// mem3's `n_val`: the copies a database gets when `requested` (or the
/// `[cluster] n` default) is asked of a cluster of `node_count` nodes:
/// at most the node count, at least 1.
pub fn effective_n(requested: u32, node_count: usize) -> u32 {
    let nodes = u32::try_from(node_count).unwrap_or(u32::MAX);
    requested.min(nodes).clamp(1, MAX_N)
}

/// Places `n` copies of each range on distinct nodes, CouchDB's
/// round-robin: the distinct nodes sorted, rotated by the CRC-32 of
/// `seed` (the database name), and each range in order takes the next
/// `n` of them, cyclically. Every node holds `floor` or `ceil` of
/// `ranges × n / nodes` copies. Each range's nodes are listed sorted by
/// name, as CouchDB's `by_range` lists them.
pub fn place(
    ranges: &[Range],
    n: u32,
    nodes: &[String],
    seed: &str,
) -> Result<BTreeMap<Range, Vec<String>>> {
    let distinct: Vec<&String> = nodes.iter().collect::<BTreeSet<_>>().into_iter().collect();
    if distinct.is_empty() {
        return Err(ClusterError::NoNodes);
    }
    if n == 0 || n > MAX_N || n as usize > distinct.len() {
        return Err(ClusterError::InvalidN {
            n: n.into(),
            nodes: distinct.len(),
            max: MAX_N,
        });
    }
    let len = distinct.len();
    let mut cursor = crc32fast::hash(seed.as_bytes()) as usize % len;
    let mut out = BTreeMap::new();
    for range in ranges {
        let mut copies: Vec<String> = (0..n as usize)
            .map(|i| distinct[(cursor + i) % len].clone())
            .collect();
        copies.sort();
        cursor = (cursor + n as usize) % len;
        out.insert(*range, copies);
    }
    Ok(out)
}

/// What a changelog entry did.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeAction {
    Add,
    Delete,
}

/// One `changelog` entry: `["add", "00000000-7fffffff", "node"]`.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ChangelogEntry(pub ChangeAction, pub Range, pub String);

/// A shard map's `props`: `partitioned` (with CouchDB's `hash` member that
/// goes with it) and whatever else a map carries, kept as it came.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
pub struct Props {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partitioned: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<Value>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl Props {
    /// The props of a new database: `{}`, or as CouchDB writes a
    /// partitioned one, `{"partitioned": true, "hash": ["couch_partition", "hash", []]}`.
    pub fn new(partitioned: bool) -> Props {
        Props {
            partitioned,
            hash: partitioned.then(|| serde_json::json!(["couch_partition", "hash", []])),
            other: Map::new(),
        }
    }
}

/// One database's shard map, in the shape of a CouchDB `_dbs` document
/// (a `_rev` member, when parsing CouchDB's own, is ignored: the version
/// of a stored map is its etcd revision).
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct ShardMap {
    #[serde(rename = "_id")]
    pub db: String,
    #[serde(with = "erlang_string")]
    pub shard_suffix: String,
    #[serde(default)]
    pub changelog: Vec<ChangelogEntry>,
    pub by_node: BTreeMap<String, Vec<Range>>,
    pub by_range: BTreeMap<Range, Vec<String>>,
    #[serde(default)]
    pub props: Props,
    /// Copies being added (issue 39's moves, see `crate::mover`): each
    /// receives the range's writes while it is filled, and becomes a full
    /// copy (replacing `from`, when given) in one later update. Not in
    /// CouchDB's documents; absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<Move>,
}

/// A copy of `range` being added on node `to`, replacing `from`'s when
/// given (a rebalance or a heal), or adding one (a heal with no copy to
/// replace).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Move {
    pub range: Range,
    pub to: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

impl ShardMap {
    /// A new database's map: `q` ranges, `n` copies each placed over
    /// `nodes` ([`place`]), created at `unix_secs`.
    pub fn new(
        db: &str,
        q: u32,
        n: u32,
        nodes: &[String],
        unix_secs: u64,
        partitioned: bool,
    ) -> Result<ShardMap> {
        let ranges = ranges(q)?;
        let by_range = place(&ranges, n, nodes, db)?;
        let mut map = ShardMap {
            db: db.to_string(),
            shard_suffix: shard_suffix(unix_secs),
            changelog: Vec::new(),
            by_node: BTreeMap::new(),
            by_range,
            props: Props::new(partitioned),
            moves: Vec::new(),
        };
        map.changelog = map
            .by_range
            .iter()
            .flat_map(|(r, ns)| {
                ns.iter()
                    .map(|node| ChangelogEntry(ChangeAction::Add, *r, node.clone()))
            })
            .collect();
        map.by_node = transpose(&map.by_range);
        map.validate()?;
        Ok(map)
    }

    /// Checks the map's invariants (see the module doc).
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| ClusterError::InvalidShardMap {
            db: self.db.clone(),
            reason,
        };
        if self.db.is_empty() {
            return Err(bad("empty database name".into()));
        }
        if self.shard_suffix.contains('/') {
            return Err(bad(format!(
                "shard suffix {:?} contains '/'",
                self.shard_suffix
            )));
        }
        let ranges: Vec<Range> = self.by_range.keys().copied().collect();
        if ranges.len() > MAX_Q as usize {
            return Err(bad(format!("{} ranges, more than {MAX_Q}", ranges.len())));
        }
        check_tiling(&ranges).map_err(bad)?;
        for (r, nodes) in &self.by_range {
            if nodes.is_empty() {
                return Err(bad(format!("range {r} has no copy")));
            }
            if nodes.len() > MAX_N as usize {
                return Err(bad(format!("range {r} has more than {MAX_N} copies")));
            }
            if nodes.iter().collect::<BTreeSet<_>>().len() != nodes.len() {
                return Err(bad(format!("range {r} names a node twice")));
            }
        }
        let mut by_node = self.by_node.clone();
        for ranges in by_node.values_mut() {
            ranges.sort();
        }
        by_node.retain(|_, r| !r.is_empty());
        if by_node != transpose(&self.by_range) {
            return Err(bad("by_node is not the transpose of by_range".into()));
        }
        let mut moving = BTreeSet::new();
        for m in &self.moves {
            let Some(nodes) = self.by_range.get(&m.range) else {
                return Err(bad(format!("a move of range {} not in the map", m.range)));
            };
            if nodes.contains(&m.to) || !moving.insert((m.range, &m.to)) {
                return Err(bad(format!("{} already holds range {}", m.to, m.range)));
            }
            if m.from.as_ref().is_some_and(|f| !nodes.contains(f)) {
                return Err(bad(format!(
                    "a move of range {} from a node without it",
                    m.range
                )));
            }
        }
        Ok(())
    }

    /// `q`: the number of ranges.
    pub fn q(&self) -> usize {
        self.by_range.len()
    }

    /// The ranges, in order.
    pub fn ranges(&self) -> Vec<Range> {
        self.by_range.keys().copied().collect()
    }

    /// Whether the database is partitioned.
    pub fn partitioned(&self) -> bool {
        self.props.partitioned
    }

    /// The range (and its nodes) a document id belongs to.
    pub fn shard_of(&self, doc_id: &str) -> Option<(Range, &[String])> {
        let hash = doc_hash(doc_id, self.props.partitioned);
        self.by_range
            .range(
                ..=Range {
                    begin: hash,
                    end: u32::MAX,
                },
            )
            .next_back()
            .and_then(|(r, nodes)| r.contains(hash).then_some((*r, nodes.as_slice())))
    }

    /// The name of this database's shard of `range`.
    pub fn shard_name(&self, range: Range) -> String {
        shard_name(range, &self.db, &self.shard_suffix)
    }

    /// The ranges a node holds full copies of.
    pub fn ranges_of(&self, node: &str) -> &[Range] {
        self.by_node.get(node).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The ranges a node keeps a copy of: full copies and those being
    /// added to it.
    pub fn held_by(&self, node: &str) -> Vec<Range> {
        let mut out = self.ranges_of(node).to_vec();
        out.extend(self.moves.iter().filter(|m| m.to == node).map(|m| m.range));
        out.sort();
        out.dedup();
        out
    }

    /// The nodes copies of `range` are being added to.
    pub fn joining(&self, range: Range) -> impl Iterator<Item = &str> {
        self.moves
            .iter()
            .filter(move |m| m.range == range)
            .map(|m| m.to.as_str())
    }

    /// Makes `mv`'s copy a full one: `to` added to its range (and the
    /// changelog), `from` dropped when given, the move taken off.
    pub fn complete(&mut self, mv: &Move) -> Result<()> {
        self.moves.retain(|m| m != mv);
        let nodes = self.by_range.entry(mv.range).or_default();
        if !nodes.contains(&mv.to) {
            nodes.push(mv.to.clone());
            nodes.sort();
            self.changelog
                .push(ChangelogEntry(ChangeAction::Add, mv.range, mv.to.clone()));
        }
        if let Some(from) = &mv.from {
            nodes.retain(|n| n != from);
            self.changelog
                .push(ChangelogEntry(ChangeAction::Delete, mv.range, from.clone()));
        }
        self.by_node = transpose(&self.by_range);
        self.validate()
    }
}

/// `by_node` from `by_range`: each node's ranges, in order.
fn transpose(by_range: &BTreeMap<Range, Vec<String>>) -> BTreeMap<String, Vec<Range>> {
    let mut by_node: BTreeMap<String, Vec<Range>> = BTreeMap::new();
    for (r, nodes) in by_range {
        for node in nodes {
            by_node.entry(node.clone()).or_default().push(*r);
        }
    }
    by_node
}

/// An Erlang string as CouchDB's JSON has it: a list of character codes
/// (`".1796475782"` is `[46,49,55,...]`). A JSON string is read as well.
mod erlang_string {
    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(s: &str, ser: S) -> Result<S::Ok, S::Error> {
        ser.collect_seq(s.chars().map(u32::from))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = String;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of character codes or a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
                Ok(v.to_string())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<String, A::Error> {
                let mut out = String::new();
                while let Some(code) = seq.next_element::<u32>()? {
                    let c = char::from_u32(code).ok_or_else(|| {
                        de::Error::custom(format!("{code} is not a character code"))
                    })?;
                    if out.len() >= 256 {
                        return Err(de::Error::custom("shard suffix longer than 256 bytes"));
                    }
                    out.push(c);
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(q: u32) -> Vec<String> {
        ranges(q).unwrap().iter().map(Range::to_string).collect()
    }

    #[test]
    fn ranges_as_mem3_makes_them() {
        assert_eq!(names(1), ["00000000-ffffffff"]);
        assert_eq!(names(2), ["00000000-7fffffff", "80000000-ffffffff"]);
        assert_eq!(
            names(3),
            [
                "00000000-55555554",
                "55555555-aaaaaaa9",
                "aaaaaaaa-ffffffff"
            ]
        );
        assert_eq!(names(4)[3], "c0000000-ffffffff");
        let q8 = names(8);
        assert_eq!(q8[1], "20000000-3fffffff");
        assert_eq!(q8[7], "e0000000-ffffffff");
        // q=7: 2^32 div 7 = 613566756; the last range takes the remainder (4).
        let q7 = ranges(7).unwrap();
        assert_eq!(q7[0].to_string(), "00000000-24924923");
        assert_eq!(q7[6].to_string(), "db6db6d8-ffffffff");
        assert_eq!(u64::from(q7[6].end - q7[6].begin) + 1, 613566756 + 4);
    }

    #[test]
    fn bad_q() {
        assert_eq!(ranges(0), Err(ClusterError::InvalidQ { q: 0, max: MAX_Q }));
        assert!(ranges(MAX_Q).is_ok());
        assert!(ranges(MAX_Q + 1).is_err());
    }

    #[test]
    fn range_parse_and_print() {
        let r: Range = "55555555-aaaaaaa9".parse().unwrap();
        assert_eq!((r.begin(), r.end()), (0x5555_5555, 0xaaaa_aaa9));
        assert_eq!("55555555-AAAAAAA9".parse::<Range>().unwrap(), r);
        for bad in [
            "",
            "-",
            "0-1",
            "00000000-",
            "0000000g-ffffffff",
            "80000000-7fffffff",
            "00000000_ffffffff",
            "+0000000-ffffffff",
            "00000000-ffffffff0",
        ] {
            assert!(bad.parse::<Range>().is_err(), "{bad}");
        }
        assert_eq!(serde_json::to_string(&r).unwrap(), "\"55555555-aaaaaaa9\"");
        assert_eq!(
            serde_json::from_str::<Range>("\"55555555-aaaaaaa9\"").unwrap(),
            r
        );
        assert!(serde_json::from_str::<Range>("\"nope\"").is_err());
    }

    #[test]
    fn hash_is_crc32_of_the_id_or_partition() {
        assert_eq!(doc_hash("a", false), 0xe8b7_be43);
        assert_eq!(doc_hash("hello world", false), 0x0d4a_1185);
        assert_eq!(doc_hash("user:alice", true), crc32fast::hash(b"user"));
        assert_eq!(
            doc_hash("_design/app", true),
            doc_hash("_design/app", false)
        );
        assert_eq!(doc_hash("nocolon", true), doc_hash("nocolon", false));
    }

    #[test]
    fn shard_names() {
        let r = Range::new(0, 0x7fff_ffff).unwrap();
        assert_eq!(
            shard_name(r, "db", ".1796475782"),
            "shards/00000000-7fffffff/db.1796475782"
        );
        assert_eq!(
            parse_shard_name("shards/00000000-7fffffff/a/b.17"),
            Some((r, "a/b", ".17"))
        );
        assert_eq!(
            parse_shard_name("shards/00000000-7fffffff/db"),
            Some((r, "db", ""))
        );
        for bad in [
            "shards/00000000-7fffffff/",
            "shards/00000000-7fffffffx/db",
            "shard/00000000-7fffffff/db",
            "shards/0000",
            "shards/€€€€€€€€€€€€€€€€€€/x",
        ] {
            assert_eq!(parse_shard_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn placement_round_robin() {
        let nodes: Vec<String> = ["c", "a", "b", "a"].iter().map(|s| s.to_string()).collect();
        let r = ranges(4).unwrap();
        let p = place(&r, 2, &nodes, "db").unwrap();
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for copies in p.values() {
            assert_eq!(copies.len(), 2);
            assert_ne!(copies[0], copies[1]);
            for c in copies {
                *count.entry(c).or_default() += 1;
            }
        }
        // 8 copies over 3 nodes: 3, 3, 2.
        let mut c: Vec<usize> = count.values().copied().collect();
        c.sort();
        assert_eq!(c, [2, 3, 3]);
        assert_eq!(place(&r, 2, &nodes, "db").unwrap(), p, "deterministic");
        assert_eq!(
            place(&r, 4, &nodes, "db"),
            Err(ClusterError::InvalidN {
                n: 4,
                nodes: 3,
                max: MAX_N
            })
        );
        assert_eq!(
            place(&r, 0, &nodes, "db"),
            Err(ClusterError::InvalidN {
                n: 0,
                nodes: 3,
                max: MAX_N
            })
        );
        assert_eq!(place(&r, 1, &[], "db"), Err(ClusterError::NoNodes));
        assert_eq!(effective_n(3, 1), 1);
        assert_eq!(effective_n(0, 3), 1);
        assert_eq!(effective_n(3, 5), 3);
    }

    #[test]
    fn shard_map_shape() {
        let nodes: Vec<String> = ["n1", "n2", "n3"].iter().map(|s| s.to_string()).collect();
        let m = ShardMap::new("db", 2, 3, &nodes, 1796475782, false).unwrap();
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "_id": "db",
                "shard_suffix": [46, 49, 55, 57, 54, 52, 55, 53, 55, 56, 50],
                "changelog": [
                    ["add", "00000000-7fffffff", "n1"], ["add", "00000000-7fffffff", "n2"], ["add", "00000000-7fffffff", "n3"],
                    ["add", "80000000-ffffffff", "n1"], ["add", "80000000-ffffffff", "n2"], ["add", "80000000-ffffffff", "n3"]
                ],
                "by_node": {
                    "n1": ["00000000-7fffffff", "80000000-ffffffff"],
                    "n2": ["00000000-7fffffff", "80000000-ffffffff"],
                    "n3": ["00000000-7fffffff", "80000000-ffffffff"]
                },
                "by_range": {
                    "00000000-7fffffff": ["n1", "n2", "n3"],
                    "80000000-ffffffff": ["n1", "n2", "n3"]
                },
                "props": {}
            })
        );
        let back: ShardMap = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
        assert_eq!(
            m.shard_name(m.ranges()[1]),
            "shards/80000000-ffffffff/db.1796475782"
        );
        let p = ShardMap::new("pdb", 4, 1, &nodes, 1, true).unwrap();
        assert_eq!(
            serde_json::to_value(&p.props).unwrap(),
            serde_json::json!({"partitioned": true, "hash": ["couch_partition", "hash", []]})
        );
    }

    #[test]
    fn validate_refuses_broken_maps() {
        let nodes: Vec<String> = ["n1", "n2"].iter().map(|s| s.to_string()).collect();
        let good = ShardMap::new("db", 4, 2, &nodes, 1, false).unwrap();
        let mut m = good.clone();
        let first = m.ranges()[0];
        m.by_range.remove(&first);
        assert!(m.validate().is_err(), "gap");
        let mut m = good.clone();
        m.by_range.values_mut().next().unwrap().push("n1".into());
        assert!(m.validate().is_err(), "node twice");
        let mut m = good.clone();
        m.by_node.get_mut("n1").unwrap().pop();
        assert!(m.validate().is_err(), "not the transpose");
        let mut m = good.clone();
        m.by_range.values_mut().next().unwrap().clear();
        assert!(m.validate().is_err(), "no copy");
        let mut m = good;
        m.by_range
            .insert(Range::new(0, 5).unwrap(), vec!["n1".into()]);
        assert!(m.validate().is_err(), "overlap");
    }

    #[test]
    fn suffix_codes_are_checked() {
        let j = r#"{"_id":"d","shard_suffix":[1114112],"by_node":{},"by_range":{}}"#;
        assert!(serde_json::from_str::<ShardMap>(j).is_err());
        let j = r#"{"_id":"d","shard_suffix":".17","by_node":{"a":["00000000-ffffffff"]},"by_range":{"00000000-ffffffff":["a"]}}"#;
        let m: ShardMap = serde_json::from_str(j).unwrap();
        assert_eq!(m.shard_suffix, ".17");
        m.validate().unwrap();
    }

    proptest! {
        #[test]
        fn ranges_tile_and_every_id_has_one(q in 1u32..=MAX_Q, ids in proptest::collection::vec(".{0,40}", 1..20)) {
            let rs = ranges(q).unwrap();
            prop_assert_eq!(rs.len(), q as usize);
            prop_assert!(check_tiling(&rs).is_ok());
            let total: u64 = rs.iter().map(|r| u64::from(r.end - r.begin) + 1).sum();
            prop_assert_eq!(total, RING_SIZE);
            for id in &ids {
                for partitioned in [false, true] {
                    let h = doc_hash(id, partitioned);
                    let holders = rs.iter().filter(|r| r.contains(h)).count();
                    prop_assert_eq!(holders, 1);
                    let i = range_index(&rs, h).unwrap();
                    prop_assert!(rs[i].contains(h));
                }
            }
        }

        #[test]
        fn placement_is_balanced(q in 1u32..64, node_count in 1usize..8, n in 1u32..5, seed in "[a-z]{1,8}") {
            let nodes: Vec<String> = (0..node_count).map(|i| format!("node{i}")).collect();
            let n = n.min(node_count as u32);
            let m = ShardMap::new(&seed, q, n, &nodes, 0, false).unwrap();
            let copies = q as usize * n as usize;
            let (lo, hi) = (copies / node_count, copies.div_ceil(node_count));
            for node in &nodes {
                let held = m.ranges_of(node).len();
                prop_assert!(lo <= held && held <= hi, "{} holds {}, expected {}..={}", node, held, lo, hi);
            }
            prop_assert_eq!(m.changelog.len(), copies);
            let back: ShardMap = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
            prop_assert_eq!(&back, &m);
            back.validate().unwrap();
        }

        #[test]
        fn shard_of_matches_range_index(id in ".{0,30}", q in 1u32..32) {
            let nodes = vec!["a".to_string()];
            let m = ShardMap::new("db", q, 1, &nodes, 0, false).unwrap();
            let (r, held) = m.shard_of(&id).unwrap();
            let rs = ranges(q).unwrap();
            prop_assert_eq!(r, rs[range_index(&rs, doc_hash(&id, false)).unwrap()]);
            prop_assert_eq!(held, nodes.as_slice());
        }
    }
}
