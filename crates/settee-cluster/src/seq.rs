//! Opaque sequences of a clustered database, as CouchDB's: `SUM-PAYLOAD`,
//! SUM the shards' sequences added up (clients may compare it, as they do
//! CouchDB's), PAYLOAD the URL-safe base64 of a JSON list of `[RANGE,
//! NODE, SEQ]`: each shard's sequence on the copy it was read from, so a
//! feed can resume from it on that copy.
//!
//! Invariant: [`decode`] accepts exactly what [`encode`] writes (or `0`):
//! anything else is `None`, which callers answer as a malformed sequence.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use crate::layout::Range;

/// One shard's sequence on one copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSeq {
    pub range: Range,
    pub node: String,
    pub seq: u64,
}

/// The opaque sequence of `shards`.
pub fn encode(shards: &[ShardSeq]) -> String {
    let sum: u64 = shards.iter().map(|s| s.seq).fold(0, u64::saturating_add);
    let list: Vec<serde_json::Value> = shards
        .iter()
        .map(|s| serde_json::json!([s.range.to_string(), s.node, s.seq]))
        .collect();
    let payload = serde_json::to_vec(&list).unwrap_or_default();
    format!("{sum}-{}", URL_SAFE_NO_PAD.encode(payload))
}

/// A shard's sequence as a number (a single node's are decimal strings,
/// or numbers; anything else counts as 0).
pub fn number(v: &serde_json::Value) -> u64 {
    match v {
        serde_json::Value::Number(n) => n.as_u64().unwrap_or(0),
        serde_json::Value::String(s) => s
            .split('-')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

/// The shards' sequences of an opaque sequence (`0`: none, every shard
/// from its start).
pub fn decode(s: &str) -> Option<Vec<ShardSeq>> {
    if s == "0" {
        return Some(Vec::new());
    }
    let (_, payload) = s.split_once('-')?;
    let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
    let list: Vec<(String, String, u64)> = serde_json::from_slice(&bytes).ok()?;
    list.into_iter()
        .map(|(r, node, seq)| {
            Some(ShardSeq {
                range: r.parse().ok()?,
                node,
                seq,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = crate::layout::ranges(2).unwrap();
        let s = vec![
            ShardSeq {
                range: r[0],
                node: "a@x".into(),
                seq: 5,
            },
            ShardSeq {
                range: r[1],
                node: "b@x".into(),
                seq: 7,
            },
        ];
        let e = encode(&s);
        assert!(e.starts_with("12-"));
        assert_eq!(decode(&e).unwrap(), s);
        assert_eq!(decode("0").unwrap(), vec![]);
        for bad in ["", "12", "12-!!", "x-e30", "3-W1tdXQ"] {
            assert!(decode(bad).is_none(), "{bad}");
        }
    }
}
