//! Design documents on every shard. A design document's home is the shard
//! its id hashes to (reads, `_all_docs` and `_changes` rows come from
//! there), but every shard keeps a copy of it, so each shard copy answers
//! view, Mango, show and list requests through its own handlers and its own
//! indexes, exactly as a single node does.
//!
//! - [`spread`] copies every leaf of a design document (with its revision
//!   history and attachments) from the live copies of its home shard to
//!   every copy of every other shard, by `_bulk_docs` with
//!   `new_edits: false`: the same revision tree everywhere, so a copy never
//!   makes a revision of its own and spreading twice changes nothing.
//! - [`current`] reads a design document for a query from its home shard
//!   and spreads it first when this node has not yet seen that revision
//!   spread ([`SpreadCache`]), so a query never runs on a shard that has
//!   an older definition than the home shard answered.
//! - [`foreign`] names the copies that are not at home, which the
//!   listings, `_changes` and counts leave out.
//!
//! Invariants: a write of a design document is answered only after it
//! was spread (or its spreading was tried on every live copy); the cache
//! holds at most [`CACHE_MAX`] entries and only revisions this node saw
//! every live copy of every shard accept.

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use parking_lot::Mutex;
use serde_json::{json, Value};

use super::call::Call;
use super::{FabricResponse, User};
use crate::coordinator::Coordinator;
use crate::layout::{Range, ShardMap};

/// Most design documents whose spread revision a node remembers.
pub const CACHE_MAX: usize = 4096;

/// The revision of each design document this node last spread:
/// (database, id) → revision.
#[derive(Debug, Default)]
pub struct SpreadCache(Mutex<HashMap<(String, String), String>>);

impl SpreadCache {
    fn get(&self, db: &str, id: &str) -> Option<String> {
        self.0
            .lock()
            .get(&(db.to_string(), id.to_string()))
            .cloned()
    }

    fn put(&self, db: &str, id: &str, rev: String) {
        let mut m = self.0.lock();
        if m.len() >= CACHE_MAX {
            m.clear();
        }
        m.insert((db.to_string(), id.to_string()), rev);
    }

    fn forget(&self, db: &str, id: &str) {
        self.0.lock().remove(&(db.to_string(), id.to_string()));
    }
}

/// Whether `id` names a design document.
pub fn is_design(id: &str) -> bool {
    id.starts_with("_design/")
}

/// Whether a row of `id` read from shard `range` is a design document's
/// copy away from its home shard.
pub fn foreign(map: &ShardMap, range: Range, id: &str) -> bool {
    is_design(id) && map.shard_of(id).is_some_and(|(home, _)| home != range)
}

/// The path segments of a document's id (`_design/` and `_local/` ids
/// are two).
pub fn path_of(id: &str) -> Vec<String> {
    if !id.starts_with("_design/") && !id.starts_with("_local/") {
        return vec![id.to_string()];
    }
    segments(id)
}

/// The path segments of a design document's id.
fn segments(id: &str) -> Vec<String> {
    match id.split_once('/') {
        Some((a, b)) => vec![a.to_string(), b.to_string()],
        None => vec![id.to_string()],
    }
}

/// Every leaf of `id` on the live copies of shard `home` (each leaf
/// once, with its history and attachments).
async fn leaves(c: &Arc<Coordinator>, map: &Arc<ShardMap>, id: &str, home: Range) -> Vec<Value> {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::ACCEPT,
        HeaderValue::from_static("application/json"),
    );
    let call = Call {
        method: Method::GET,
        rest: segments(id),
        query: vec![
            ("open_revs".into(), "all".into()),
            ("revs".into(), "true".into()),
            ("attachments".into(), "true".into()),
        ],
        headers,
        body: bytes::Bytes::new(),
    };
    let copies = c.live_copies(map, home).len();
    let got = c
        .fan_out(map, home, call, &User::internal(), copies, false)
        .await;
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for a in got.answers.iter().flatten().filter(|a| a.ok()) {
        for leaf in a.json().as_array().into_iter().flatten() {
            let Some(doc) = leaf.get("ok") else { continue };
            let rev = doc["_rev"].as_str().unwrap_or_default().to_string();
            if seen.insert(rev) {
                out.push(doc.clone());
            }
        }
    }
    out
}

/// Copies design document `id` from its home shard to every copy of every
/// other shard (see the module doc); true when every live copy took it.
pub async fn spread(c: &Arc<Coordinator>, map: &Arc<ShardMap>, id: &str) -> bool {
    match map.shard_of(id) {
        Some((home, _)) => spread_from(c, map, id, home).await,
        None => false,
    }
}

/// [`spread`] from shard `home` (a design document written on another
/// shard than its home is spread from there, its home among the others).
pub async fn spread_from(c: &Arc<Coordinator>, map: &Arc<ShardMap>, id: &str, home: Range) -> bool {
    let docs = leaves(c, map, id, home).await;
    if docs.is_empty() {
        c.spread_cache().forget(&map.db, id);
        return false;
    }
    let call = Call::json(
        Method::POST,
        &["_bulk_docs"],
        Vec::new(),
        &json!({"docs": docs, "new_edits": false}),
    );
    let sends = map
        .ranges()
        .into_iter()
        .filter(|r| *r != home)
        .map(|range| {
            let (c, map, call) = (Arc::clone(c), Arc::clone(map), call.clone());
            async move {
                let copies = c.live_copies(&map, range).len();
                let got = c
                    .fan_out(&map, range, call, &User::internal(), copies, true)
                    .await;
                got.successes() == copies
            }
        });
    let all = futures_util::future::join_all(sends)
        .await
        .into_iter()
        .all(|ok| ok);
    if !all {
        c.spread_cache().forget(&map.db, id);
    }
    all
}

/// The design document `id` as its home shard answers it to `user`,
/// spread to every shard first if this node has not spread that revision
/// yet; the home shard's refusal (404, 401, 403) as it is.
pub async fn current(
    c: &Arc<Coordinator>,
    map: &Arc<ShardMap>,
    id: &str,
    user: &User,
) -> Result<Value, FabricResponse> {
    let Some((home, _)) = map.shard_of(id) else {
        return Err(FabricResponse::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "error",
            "no shard holds the id",
        ));
    };
    let call = Call {
        method: Method::GET,
        rest: segments(id),
        query: Vec::new(),
        headers: HeaderMap::new(),
        body: bytes::Bytes::new(),
    };
    let got = c.fan_out(map, home, call, user, 1, false).await;
    let a = match got.best() {
        Some(a) if a.ok() => a,
        Some(a) => return Err(a.clone().into_response()),
        None => {
            return Err(FabricResponse::unavailable(
                "no copy of the design document's shard is reachable",
            ))
        }
    };
    let ddoc = a.json();
    let rev = ddoc["_rev"].as_str().unwrap_or_default().to_string();
    if c.spread_cache().get(&map.db, id).as_deref() != Some(rev.as_str())
        && spread(c, map, id).await
    {
        c.spread_cache().put(&map.db, id, rev);
    }
    Ok(ddoc)
}

/// After a write that touched design documents `ids`: each spread, and
/// remembered as spread at its new revision when every copy took it.
pub async fn after_write(c: &Arc<Coordinator>, map: &Arc<ShardMap>, ids: &[String]) {
    let each = ids.iter().filter(|id| is_design(id)).map(|id| {
        let (c, map) = (Arc::clone(c), Arc::clone(map));
        async move {
            c.spread_cache().forget(&map.db, id);
            spread(&c, &map, id).await;
        }
    });
    futures_util::future::join_all(each).await;
}

/// How many design documents' copies away from home the shards hold, from
/// the answers of one copy of each shard when every one said
/// ([`super::FOREIGN_DESIGNS_HEADER`]), else by asking each shard.
pub async fn foreign_in(
    c: &Arc<Coordinator>,
    map: &Arc<ShardMap>,
    user: &User,
    answers: &[super::call::Answer],
) -> u64 {
    let said: Option<u64> = answers
        .iter()
        .map(|a| {
            a.headers
                .get(super::FOREIGN_DESIGNS_HEADER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum();
    match said {
        Some(n) if answers.len() == map.q() => n,
        _ => foreign_count(c, map, user).await,
    }
}

/// How many design documents' copies away from home the shards hold (one
/// copy of each shard asked): what sums of the shards' counts leave out.
pub async fn foreign_count(c: &Arc<Coordinator>, map: &Arc<ShardMap>, user: &User) -> u64 {
    let asks = map.ranges().into_iter().map(|range| {
        let (c, map, user) = (Arc::clone(c), Arc::clone(map), user.clone());
        async move {
            let got = c
                .fan_out(&map, range, Call::get(&["_design_docs"]), &user, 1, false)
                .await;
            let Some(page) = got.best().filter(|a| a.ok()).map(|a| a.json()) else {
                return 0;
            };
            let rows = page["rows"].as_array().cloned().unwrap_or_default();
            rows.iter()
                .filter(|r| foreign(&map, range, r["id"].as_str().unwrap_or("")))
                .count() as u64
        }
    });
    futures_util::future::join_all(asks).await.into_iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_design_id_is_two_segments() {
        assert_eq!(segments("_design/a/b"), ["_design", "a/b"]);
        assert!(is_design("_design/x") && !is_design("_local/x") && !is_design("x"));
    }

    #[test]
    fn the_cache_is_bounded() {
        let c = SpreadCache::default();
        for i in 0..CACHE_MAX + 10 {
            c.put("db", &format!("_design/{i}"), "1-a".into());
        }
        assert!(c.0.lock().len() <= CACHE_MAX);
        c.put("db", "_design/x", "2-b".into());
        assert_eq!(c.get("db", "_design/x").as_deref(), Some("2-b"));
        c.forget("db", "_design/x");
        assert_eq!(c.get("db", "_design/x"), None);
    }
}
