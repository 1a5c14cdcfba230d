//! `_all_docs`, `_design_docs` and `_local_docs` through the cluster: the
//! same request to one live copy of every shard (each asked for `skip +
//! limit` rows, skipping none), the rows merged in id order (bytes,
//! reversed when `descending`), then `skip` and `limit` applied;
//! `total_rows` and `offset` are the shards' sums. With `keys`, each row
//! comes from the shard that holds its key, in the keys' order.
//!
//! Design documents' copies away from their home shard
//! ([`super::design`]) are left out of the rows and of `total_rows`.
//!
//! Invariants: the options are checked by the copies (a refusal is
//! relayed, so errors are a single node's); no shard is asked for more
//! than `skip + limit` rows.

use std::sync::Arc;

use http::Method;
use serde_json::{json, Value};

use super::call::Call;
use super::{FabricRequest, FabricResponse};
use crate::coordinator::Coordinator;

/// Which listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `_all_docs`
    All,
    /// `_design_docs`
    Design,
    /// `_local_docs`
    Local,
}

/// The listing's answer.
pub async fn list(c: &Arc<Coordinator>, req: &FabricRequest, kind: Kind) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    if !matches!(req.method, Method::GET | Method::HEAD | Method::POST) {
        return super::dbs::method_not_allowed("GET,HEAD,POST");
    }
    let body: Value = if req.method == Method::POST {
        match serde_json::from_slice(&req.body) {
            Ok(v @ Value::Object(_)) => v,
            _ => return super::dbs::first_range(c, req, &map).await,
        }
    } else {
        Value::Null
    };
    let last = |k: &str| req.param(k).map(str::to_string);
    let int = |k: &str| -> Option<u64> {
        body.get(k)
            .and_then(Value::as_u64)
            .or_else(|| last(k).and_then(|v| v.parse().ok()))
    };
    let skip = int("skip").unwrap_or(0);
    let limit = int("limit");
    let descending = body.get("descending") == Some(&Value::Bool(true))
        || last("descending").as_deref() == Some("true");
    let keys: Option<Vec<Value>> =
        body.get("keys")
            .and_then(Value::as_array)
            .cloned()
            .or_else(|| {
                last("keys")
                    .and_then(|k| serde_json::from_str::<Value>(&k).ok())
                    .and_then(|v| v.as_array().cloned())
            });
    // Each shard reads from the start of the window: no skip, skip + limit rows.
    let mut query: Vec<(String, String)> = req
        .query
        .iter()
        .filter(|(k, _)| k != "skip" && k != "limit")
        .cloned()
        .collect();
    if let Some(l) = limit {
        query.push(("limit".into(), (l.saturating_add(skip)).to_string()));
    }
    let mut shard_body = body.clone();
    if let Some(o) = shard_body.as_object_mut() {
        o.remove("skip");
        if let Some(l) = limit {
            o.insert("limit".into(), json!(l.saturating_add(skip)));
        }
    }
    let name = match kind {
        Kind::All => "_all_docs",
        Kind::Design => "_design_docs",
        Kind::Local => "_local_docs",
    };
    let mut call = Call::relay(
        req.method.clone(),
        &[name.to_string()],
        &query,
        &req.headers,
        bytes::Bytes::new(),
    );
    if req.method == Method::POST {
        call.body = bytes::Bytes::from(serde_json::to_vec(&shard_body).unwrap_or_default());
    }
    let ranges = map.ranges();
    let answers = match c.ask_each_shard(&map, &req.user, |_, _| call.clone()).await {
        Ok(a) => a,
        Err(e) => return e,
    };
    let pages: Vec<Value> = answers.iter().map(|a| a.json()).collect();
    let mut total: u64 = pages.iter().filter_map(|p| p["total_rows"].as_u64()).sum();
    if kind != Kind::Local {
        let foreign = super::design::foreign_in(c, &map, &req.user, &answers).await;
        total = total.saturating_sub(foreign);
    }
    let offset: u64 = pages.iter().filter_map(|p| p["offset"].as_u64()).sum();
    let rows_of = |p: &Value| p["rows"].as_array().cloned().unwrap_or_default();
    let mut rows: Vec<Value> = match &keys {
        Some(keys) => keys
            .iter()
            .enumerate()
            .filter_map(|(j, key)| {
                let home = key
                    .as_str()
                    .and_then(|k| map.shard_of(k))
                    .and_then(|(r, _)| ranges.iter().position(|x| *x == r))
                    .unwrap_or(0);
                pages.get(home).and_then(|p| p["rows"].get(j).cloned())
            })
            .collect(),
        None => {
            // A design document is listed from its home shard only.
            let map = &map;
            let mut all: Vec<Value> = pages
                .iter()
                .zip(&ranges)
                .flat_map(|(p, &range)| {
                    rows_of(p).into_iter().filter(move |r| {
                        !super::design::foreign(map, range, r["id"].as_str().unwrap_or(""))
                    })
                })
                .collect();
            all.sort_by(|a, b| {
                let (x, y) = (
                    a["id"].as_str().unwrap_or(""),
                    b["id"].as_str().unwrap_or(""),
                );
                if descending {
                    y.cmp(x)
                } else {
                    x.cmp(y)
                }
            });
            all
        }
    };
    let skip = usize::try_from(skip).unwrap_or(usize::MAX);
    rows = rows.into_iter().skip(skip).collect();
    if let Some(l) = limit {
        rows.truncate(usize::try_from(l).unwrap_or(usize::MAX));
    }
    let mut out =
        json!({"total_rows": total, "offset": offset.saturating_add(skip as u64), "rows": rows});
    // `_local_docs` counts nothing (null); a shard's null stays null.
    for k in ["total_rows", "offset"] {
        if pages
            .first()
            .is_some_and(|p| p.get(k).is_none_or(Value::is_null))
        {
            out[k] = Value::Null;
        }
    }
    FabricResponse::json(http::StatusCode::OK, &out)
}
