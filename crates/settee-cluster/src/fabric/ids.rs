//! Requests about many documents by id, split by shard and merged:
//! `_revs_diff` and `_missing_revs` (an object keyed by id: each shard's
//! part to one live copy, the answers' members put together) and
//! `_bulk_get` (a list of `{"id"}` requests: each shard's part to one live
//! copy, the results put back in the request's order).
//!
//! Invariant: a body the fabric cannot take apart goes whole to a copy of
//! the first shard, which answers what a single node answers.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::{json, Map, Value};

use super::call::Call;
use super::{FabricRequest, FabricResponse};
use crate::coordinator::Coordinator;
use crate::layout::Range;

/// `POST /db/_revs_diff` and `/db/_missing_revs`.
pub async fn by_id_object(c: &Arc<Coordinator>, req: &FabricRequest, what: &str) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    if req.method != Method::POST {
        return super::dbs::method_not_allowed("POST");
    }
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&req.body) else {
        return super::dbs::first_range(c, req, &map).await;
    };
    let mut parts: BTreeMap<Range, Map<String, Value>> = BTreeMap::new();
    for (id, revs) in body {
        let Some((range, _)) = map.shard_of(&id) else {
            continue;
        };
        parts.entry(range).or_default().insert(id, revs);
    }
    let asks = parts.into_iter().map(|(range, part)| {
        let call = Call::json(
            Method::POST,
            &[what],
            req.query.clone(),
            &Value::Object(part),
        );
        let (c, map, user) = (Arc::clone(c), Arc::clone(&map), req.user.clone());
        async move { c.fan_out(&map, range, call, &user, 1, false).await }
    });
    let mut out = Map::new();
    for got in futures_util::future::join_all(asks).await {
        match got.best() {
            Some(a) if a.ok() => match a.json() {
                Value::Object(m) if what == "_missing_revs" => {
                    if let Some(Value::Object(missing)) = m.get("missing_revs") {
                        out.extend(missing.clone());
                    }
                }
                Value::Object(m) => out.extend(m),
                _ => {}
            },
            Some(a) => return a.clone().into_response(),
            None => return FabricResponse::unavailable("no copy of a shard is reachable"),
        }
    }
    let v = if what == "_missing_revs" {
        json!({"missing_revs": out})
    } else {
        Value::Object(out)
    };
    FabricResponse::json(StatusCode::OK, &v)
}

/// `POST /db/_bulk_get`.
pub async fn bulk_get(c: &Arc<Coordinator>, req: &FabricRequest) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    if req.method != Method::POST {
        return super::dbs::method_not_allowed("POST");
    }
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(&req.body) else {
        return super::dbs::first_range(c, req, &map).await;
    };
    let Some(Value::Array(docs)) = body.remove("docs") else {
        return super::dbs::first_range(c, req, &map).await;
    };
    let Some(ids) = docs
        .iter()
        .map(|d| d.get("id").and_then(Value::as_str).map(str::to_string))
        .collect::<Option<Vec<String>>>()
    else {
        return super::dbs::first_range(c, req, &map).await;
    };
    let mut parts: BTreeMap<Range, Vec<usize>> = BTreeMap::new();
    for (i, id) in ids.iter().enumerate() {
        if let Some((range, _)) = map.shard_of(id) {
            parts.entry(range).or_default().push(i);
        }
    }
    let asks = parts.iter().map(|(range, idx)| {
        let mut part = body.clone();
        part.insert(
            "docs".into(),
            Value::Array(idx.iter().map(|&i| docs[i].clone()).collect()),
        );
        let call = Call::json(
            Method::POST,
            &["_bulk_get"],
            req.query.clone(),
            &Value::Object(part),
        );
        let (c, map, user, range) = (Arc::clone(c), Arc::clone(&map), req.user.clone(), *range);
        async move { (range, c.fan_out(&map, range, call, &user, 1, false).await) }
    });
    let mut results: Vec<Value> = vec![Value::Null; docs.len()];
    for (range, got) in futures_util::future::join_all(asks).await {
        let rows = match got.best() {
            Some(a) if a.ok() => a.json()["results"].as_array().cloned().unwrap_or_default(),
            Some(a) => return a.clone().into_response(),
            None => return FabricResponse::unavailable("no copy of a shard is reachable"),
        };
        for (k, &i) in parts[&range].iter().enumerate() {
            if let Some(r) = rows.get(k) {
                results[i] = r.clone();
            }
        }
    }
    FabricResponse::json(StatusCode::OK, &json!({"results": results}))
}
