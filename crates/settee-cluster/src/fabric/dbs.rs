//! A clustered database as a whole: its information summed over one copy
//! of each shard, its shard map (`_shards`), a forced internal
//! replication (`_sync_shards`), its `_security` (read from one copy,
//! written to every copy), and requests every copy must see.
//!
//! Invariants: `update_seq` and `purge_seq` are opaque sequences
//! ([`crate::seq`]) naming each shard's sequence on the copy it was read
//! from; sizes and counts are sums over exactly one copy per shard.

use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::{json, Map, Value};

use super::call::{quorum, Call};
use super::{FabricRequest, FabricResponse};
use crate::coordinator::Coordinator;
use crate::layout::ShardMap;
use crate::seq::{encode, ShardSeq};

/// 404 for a database with no shard map.
pub fn no_db() -> FabricResponse {
    FabricResponse::error(
        StatusCode::NOT_FOUND,
        "not_found",
        "Database does not exist.",
    )
}

/// 405 naming the methods a path takes.
pub fn method_not_allowed(allowed: &'static str) -> FabricResponse {
    let mut r = FabricResponse::error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("Only {allowed} allowed"),
    );
    r.headers
        .insert(http::header::ALLOW, http::HeaderValue::from_static(allowed));
    r
}

/// The request relayed as it is to a copy of the first shard: for bodies
/// the fabric does not take apart (a copy answers what a single node
/// answers to them).
pub async fn first_range(
    c: &Arc<Coordinator>,
    req: &FabricRequest,
    map: &ShardMap,
) -> FabricResponse {
    let call = Call::of(req);
    let got = c
        .fan_out(map, map.ranges()[0], call, &req.user, 1, false)
        .await;
    match got.best() {
        Some(a) => a.clone().into_response(),
        None => FabricResponse::unavailable("no copy of the database's first shard is reachable"),
    }
}

/// `GET /db`: the database's information, summed over its shards.
pub async fn info(c: &Arc<Coordinator>, req: &FabricRequest) -> FabricResponse {
    let db = &req.segments[0];
    let Some(map) = c.map_of(db).await else {
        return no_db();
    };
    let call = Call::relay(Method::GET, &[], &[], &req.headers, bytes::Bytes::new());
    let answers = match c.ask_each_shard(&map, &req.user, |_, _| call.clone()).await {
        Ok(a) => a,
        Err(e) => return e,
    };
    let (mut docs, mut deleted) = (0u64, 0u64);
    let (mut file, mut external, mut active) = (0u64, 0u64, 0u64);
    let (mut update, mut purge) = (Vec::new(), Vec::new());
    let mut compacting = false;
    let mut first: Option<Map<String, Value>> = None;
    for (a, range) in answers.iter().zip(map.ranges()) {
        let v = a.json();
        let num = |k: &str| v[k].as_u64().unwrap_or(0);
        docs += num("doc_count");
        deleted += num("doc_del_count");
        let size = |k: &str| v["sizes"][k].as_u64().unwrap_or(0);
        file += size("file");
        external += size("external");
        active += size("active");
        compacting |= v["compact_running"] == Value::Bool(true);
        let seq_of = |k: &str| crate::seq::number(&v[k]);
        update.push(ShardSeq {
            range,
            node: a.node.clone(),
            seq: seq_of("update_seq"),
        });
        purge.push(ShardSeq {
            range,
            node: a.node.clone(),
            seq: seq_of("purge_seq"),
        });
        if first.is_none() {
            first = v.as_object().cloned();
        }
    }
    let n = map.by_range.values().map(Vec::len).max().unwrap_or(1);
    let mut out = first.unwrap_or_default();
    out.insert("db_name".into(), json!(db));
    out.insert("update_seq".into(), json!(encode(&update)));
    out.insert("purge_seq".into(), json!(encode(&purge)));
    // Design documents' copies away from home are not documents of theirs.
    let foreign = super::design::foreign_in(c, &map, &req.user, &answers).await;
    let docs = docs.saturating_sub(foreign);
    out.insert("doc_count".into(), json!(docs));
    out.insert("doc_del_count".into(), json!(deleted));
    out.insert(
        "sizes".into(),
        json!({"file": file, "external": external, "active": active}),
    );
    out.insert("compact_running".into(), json!(compacting));
    out.insert("instance_start_time".into(), json!("0"));
    out.insert(
        "cluster".into(),
        json!({"q": map.q(), "n": n, "w": quorum(n), "r": quorum(n)}),
    );
    FabricResponse::json(StatusCode::OK, &Value::Object(out))
}

/// `GET /db/_shards`: each range's nodes.
pub fn shards(c: &Arc<Coordinator>, req: &FabricRequest, db: &str) -> FabricResponse {
    if req.method != Method::GET && req.method != Method::HEAD {
        return method_not_allowed("GET,HEAD");
    }
    let Some(map) = c.view().map(db) else {
        return no_db();
    };
    let shards: Map<String, Value> = map
        .by_range
        .iter()
        .map(|(r, nodes)| (r.to_string(), json!(nodes)))
        .collect();
    let live = c.view().live().into_keys().collect();
    let under = crate::decider::under_replicated(&map, &live);
    let mut body = json!({"shards": shards});
    if !under.is_empty() {
        // Settee's own: ranges with fewer live copies than listed.
        body["under_replicated"] = json!(under);
    }
    FabricResponse::json(StatusCode::OK, &body)
}

/// `GET /db/_shards/{docid}`: the range and nodes of a document.
pub fn shard_of(c: &Arc<Coordinator>, req: &FabricRequest, db: &str, id: &str) -> FabricResponse {
    if req.method != Method::GET && req.method != Method::HEAD {
        return method_not_allowed("GET,HEAD");
    }
    let Some(map) = c.view().map(db) else {
        return no_db();
    };
    match map.shard_of(id) {
        Some((r, nodes)) => FabricResponse::json(
            StatusCode::OK,
            &json!({"range": r.to_string(), "nodes": nodes}),
        ),
        None => FabricResponse::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "error",
            "no shard holds the id",
        ),
    }
}

/// `POST /db/_sync_shards`: every shard's copies replicated to each other
/// now (server admins only).
pub fn sync_shards(c: &Arc<Coordinator>, req: &FabricRequest, db: &str) -> FabricResponse {
    if req.method != Method::POST {
        return method_not_allowed("POST");
    }
    if !req.user.roles.iter().any(|r| r == "_admin") {
        return FabricResponse::error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "You are not a server admin.",
        );
    }
    let Some(map) = c.view().map(db) else {
        return no_db();
    };
    for range in map.ranges() {
        c.sync().schedule_range(c, &map, range);
    }
    FabricResponse::json(StatusCode::ACCEPTED, &json!({"ok": true}))
}

/// `/db/_security`: read from a copy of the first shard; written to every
/// copy of every shard (each shard needs one copy to take it; the others
/// get it from internal replication).
pub async fn security(c: &Arc<Coordinator>, req: &FabricRequest) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return no_db();
    };
    if req.method != Method::PUT {
        return first_range(c, req, &map).await;
    }
    every_copy_of(c, req, &map).await
}

/// A request every copy of every shard must see (`_ensure_full_commit`).
pub async fn every_copy(c: &Arc<Coordinator>, req: &FabricRequest) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return no_db();
    };
    every_copy_of(c, req, &map).await
}

async fn every_copy_of(
    c: &Arc<Coordinator>,
    req: &FabricRequest,
    map: &Arc<ShardMap>,
) -> FabricResponse {
    let call = Call::of(req);
    let asks = map.ranges().into_iter().map(|range| {
        let (c, map, call, user) = (
            Arc::clone(c),
            Arc::clone(map),
            call.clone(),
            req.user.clone(),
        );
        async move { c.fan_out(&map, range, call, &user, usize::MAX, true).await }
    });
    let got = futures_util::future::join_all(asks).await;
    let mut answer = None;
    for g in &got {
        match g.best() {
            Some(a) if a.ok() => {
                answer.get_or_insert_with(|| a.clone());
            }
            Some(a) => return a.clone().into_response(),
            None => return FabricResponse::unavailable("no copy of a shard is reachable"),
        }
    }
    match answer {
        Some(a) => a.into_response(),
        None => FabricResponse::unavailable("no copy of a shard is reachable"),
    }
}

impl Coordinator {
    /// Waits, at most `limit`, until every copy `map` places on another
    /// live member exists there (each node creates its copies as the map
    /// reaches it); whether they all do. A creation answers 201 only
    /// then, so a write right after it finds every copy, and 202 (the
    /// map is stored; the copies follow) when some node was too slow.
    pub async fn await_copies(
        self: &Arc<Self>,
        map: &ShardMap,
        limit: std::time::Duration,
    ) -> bool {
        let started = std::time::Instant::now();
        let get = Call::get(&[]);
        let user = super::User::internal();
        let mut pending: Vec<(crate::membership::NodeInfo, String)> = map
            .by_range
            .iter()
            .flat_map(|(range, nodes)| {
                let shard = map.shard_name(*range);
                nodes
                    .iter()
                    .filter(|n| **n != self.node_name())
                    .filter_map(|n| self.view().member(n))
                    .map(move |info| (info, shard.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        loop {
            let mut left = Vec::with_capacity(pending.len());
            for (node, shard) in pending {
                match self.call_copy(&node, &shard, &get, &user).await {
                    Some(a) if a.ok() => {}
                    _ => left.push((node, shard)),
                }
            }
            pending = left;
            if pending.is_empty() {
                return true;
            }
            if started.elapsed() >= limit {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}
