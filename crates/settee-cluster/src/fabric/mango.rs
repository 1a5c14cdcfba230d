//! Mango on a clustered database. Mango indexes are design documents, so
//! every shard holds them all ([`super::design`]) and each shard answers
//! `_find` over its own documents with its own indexes.
//!
//! - `_find`: the plan is learnt from one shard's `_explain` (the same
//!   design documents everywhere, so the same index); every shard asked
//!   for `skip + limit` matches (none skipped) with the fields the merge
//!   needs, the documents merged in the index's order (its fields' key
//!   encoding and the id, or the id for `_all_docs`), `skip` and `limit`
//!   applied, `fields` projected here. The bookmark holds each shard's own
//!   bookmark (after the last of its documents this page used), so the
//!   next page resumes every shard exactly where the merge left it.
//!   `execution_stats` are the shards' sums; warnings the shards' own.
//! - `_explain`: one shard's, with the database's name.
//! - `_index`: listed from one shard; created on one shard and spread to
//!   the others; deleted on its design document's home shard and spread.
//!
//! Invariants: a request the fabric cannot take apart (not an object, a
//! bookmark that is not this fabric's) goes whole to one shard, which
//! answers what a single node answers; no shard is asked for more than
//! `skip + limit` documents.

use std::sync::Arc;

use base64::Engine as _;
use http::{Method, StatusCode};
use serde_json::{json, Map, Value};
use settee_core::fields::{SCAN_RATIO_WARNING as SCAN_RATIO, SCAN_WARNING};
use settee_index::keycodec::{encode_row_key, Collation};

use super::call::Call;
use super::{FabricRequest, FabricResponse};
use crate::coordinator::Coordinator;
use crate::layout::ShardMap;

/// `_find`'s `limit` when none is given (CouchDB's).
const DEFAULT_LIMIT: u64 = 25;

/// The member of a cluster bookmark's JSON that holds the shards' own.
const BOOKMARK_MEMBER: &str = "settee_shards";

/// The order `_find` reads documents in, from the plan.
enum Order {
    /// `_all_docs`: by id.
    Id,
    /// A json index: by its fields' values, then the id.
    Fields(Vec<String>),
}

/// What of the query the merge applies.
#[derive(Clone, Copy)]
struct Window {
    skip: u64,
    limit: u64,
    descending: bool,
    /// `execution_stats` was asked for.
    stats: bool,
}

/// `POST /db/_find`.
pub async fn find(c: &Arc<Coordinator>, req: &FabricRequest) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    if req.method != Method::POST {
        return super::dbs::method_not_allowed("POST");
    }
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&req.body) else {
        return super::dbs::first_range(c, req, &map).await;
    };
    let ranges = map.ranges();
    let given = match body.get("bookmark") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() || s == "nil" => None,
        Some(Value::String(s)) => match decode_bookmark(s, ranges.len()) {
            Some(b) => Some(b),
            None => return super::dbs::first_range(c, req, &map).await,
        },
        Some(_) => return super::dbs::first_range(c, req, &map).await,
    };
    // The plan: one shard's explanation of the same query.
    let mut plain = body.clone();
    plain.remove("bookmark");
    let explain = Call::json(
        Method::POST,
        &["_explain"],
        req.query.clone(),
        &Value::Object(plain),
    );
    let got = c
        .fan_out(&map, ranges[0], explain, &req.user, 1, false)
        .await;
    let Some(plan) = got.best().filter(|a| a.ok()).map(|a| a.json()) else {
        // Its refusal is the query's: one shard says it as one node does.
        return super::dbs::first_range(c, req, &map).await;
    };
    let order = match plan["index"]["type"].as_str() {
        Some("special") => Order::Id,
        _ => Order::Fields(
            plan["index"]["def"]["fields"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_object()?.keys().next().cloned())
                .collect(),
        ),
    };
    let descending = plan["mrargs"]["direction"] == "rev";
    let int = |k: &str, d: u64| body.get(k).and_then(Value::as_u64).unwrap_or(d);
    let (skip, limit) = (int("skip", 0), int("limit", DEFAULT_LIMIT));
    let fields: Option<Vec<String>> = body.get("fields").and_then(Value::as_array).map(|f| {
        f.iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    });
    // Each shard: no skip, skip + limit documents, and what ordering needs.
    let mut shard_body = body.clone();
    shard_body.remove("skip");
    shard_body.insert("limit".into(), json!(skip.saturating_add(limit)));
    let stats = body.get("execution_stats") == Some(&Value::Bool(true));
    shard_body.insert("execution_stats".into(), json!(true));
    if let Some(f) = fields.as_ref().filter(|f| !f.is_empty()) {
        let mut need = f.clone();
        need.push("_id".into());
        if let Order::Fields(index) = &order {
            need.extend(index.iter().cloned());
        }
        need.dedup();
        shard_body.insert("fields".into(), json!(need));
    }
    let shard_call = |i: usize, _| {
        let mut b = shard_body.clone();
        match given.as_ref().and_then(|g| g[i].clone()) {
            Some(bm) => b.insert("bookmark".into(), json!(bm)),
            None => b.remove("bookmark"),
        };
        Call::json(
            Method::POST,
            &["_find"],
            req.query.clone(),
            &Value::Object(b),
        )
    };
    let pages: Vec<Value> = match c.ask_each_shard(&map, &req.user, shard_call).await {
        Ok(answers) => answers.iter().map(|a| a.json()).collect(),
        Err(e) => return e,
    };
    let window = Window {
        skip,
        limit,
        descending,
        stats,
    };
    merge(&pages, &order, &window, fields.as_deref(), given)
}

/// The shards' answers as one (see the module doc).
fn merge(
    pages: &[Value],
    order: &Order,
    w: &Window,
    fields: Option<&[String]>,
    given: Option<Vec<Option<String>>>,
) -> FabricResponse {
    let Window {
        skip,
        limit,
        descending,
        stats,
    } = *w;
    // (sort bytes, shard, bookmark key, document)
    let mut all: Vec<(Vec<u8>, usize, Value, Value)> = Vec::new();
    for (shard, page) in pages.iter().enumerate() {
        for doc in page["docs"].as_array().into_iter().flatten() {
            let id = doc["_id"].as_str().unwrap_or("").to_string();
            let (sort, key) = match order {
                Order::Id => (id.as_bytes().to_vec(), Value::String(id.clone())),
                Order::Fields(f) => {
                    let key: Vec<Value> = f
                        .iter()
                        .map(|name| settee_core::fields::field(doc, name).unwrap_or(Value::Null))
                        .collect();
                    let key = Value::Array(key);
                    (encode_row_key(&key, &id, Collation::Couch), key)
                }
            };
            all.push((sort, shard, key, doc.clone()));
        }
    }
    all.sort_by(|a, b| {
        if descending {
            b.0.cmp(&a.0)
        } else {
            a.0.cmp(&b.0)
        }
    });
    let mut marks: Vec<Option<String>> = given.unwrap_or_else(|| vec![None; pages.len()]);
    let skip = usize::try_from(skip).unwrap_or(usize::MAX);
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let window: Vec<_> = all.into_iter().take(skip.saturating_add(limit)).collect();
    let mut docs = Vec::new();
    if window.len() > skip {
        // Every shard resumes after its last document up to the page's
        // last one (those skipped included).
        for (k, (_, shard, key, doc)) in window.into_iter().enumerate() {
            marks[shard] = Some(shard_bookmark(&key, &doc["_id"]));
            if k >= skip {
                docs.push(settee_core::fields::project(doc, fields));
            }
        }
    }
    let mut out = Map::new();
    out.insert("docs".into(), Value::Array(docs));
    if pages.iter().any(|p| p.get("bookmark").is_some()) {
        let text = if marks.iter().all(Option::is_none) {
            "nil".to_string()
        } else {
            encode_bookmark(&marks)
        };
        out.insert("bookmark".into(), Value::String(text));
    }
    let sum = |k: &str| -> u64 {
        pages
            .iter()
            .filter_map(|p| p["execution_stats"][k].as_u64())
            .sum()
    };
    let returned = out["docs"].as_array().map_or(0, Vec::len) as u64;
    // The plan's warnings are every shard's; the scan ratio's is the
    // whole query's (the shards' examined documents against the page).
    let mut warnings: Vec<&str> = Vec::new();
    for w in pages.iter().filter_map(|p| p["warning"].as_str()) {
        for line in w.split('\n') {
            if line != SCAN_WARNING && !warnings.contains(&line) {
                warnings.push(line);
            }
        }
    }
    let examined = sum("total_docs_examined") + sum("total_quorum_docs_examined");
    if (returned == 0 && examined > SCAN_RATIO)
        || (returned > 0 && examined > SCAN_RATIO * returned)
    {
        warnings.push(SCAN_WARNING);
    }
    if !warnings.is_empty() {
        out.insert("warning".into(), json!(warnings.join("\n")));
    }
    if stats {
        let ms = pages
            .iter()
            .filter_map(|p| p["execution_stats"]["execution_time_ms"].as_f64())
            .fold(0.0, f64::max);
        out.insert(
            "execution_stats".into(),
            json!({
                "total_keys_examined": sum("total_keys_examined"),
                "total_docs_examined": sum("total_docs_examined"),
                "total_quorum_docs_examined": sum("total_quorum_docs_examined"),
                "results_returned": returned,
                "execution_time_ms": ms,
            }),
        );
    }
    FabricResponse::json(StatusCode::OK, &Value::Object(out))
}

/// A single node's bookmark of the row with `key` and `id` (the shards
/// resume after it).
fn shard_bookmark(key: &Value, id: &Value) -> String {
    let v = Value::Array(vec![key.clone(), id.clone()]);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

/// The cluster's bookmark: every shard's own (none for a shard this query
/// has not read from yet).
fn encode_bookmark(marks: &[Option<String>]) -> String {
    let v = json!({ BOOKMARK_MEMBER: marks });
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

/// A cluster bookmark of `q` shards, or none.
fn decode_bookmark(text: &str, q: usize) -> Option<Vec<Option<String>>> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    let marks = v.get(BOOKMARK_MEMBER)?.as_array()?;
    if marks.len() != q {
        return None;
    }
    marks
        .iter()
        .map(|m| match m {
            Value::Null => Some(None),
            Value::String(s) => Some(Some(s.clone())),
            _ => None,
        })
        .collect()
}

/// `POST /db/_explain`: one shard's, named as the database.
pub async fn explain(c: &Arc<Coordinator>, req: &FabricRequest) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    let mut resp = super::dbs::first_range(c, req, &map).await;
    if resp.status.is_success() {
        if let Ok(mut v) = serde_json::from_slice::<Value>(&resp.body) {
            v["dbname"] = json!(req.segments[0]);
            resp = FabricResponse::json(resp.status, &v);
        }
    }
    resp
}

/// `/db/_index[/…]`.
pub async fn index(c: &Arc<Coordinator>, req: &FabricRequest) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    let rest: Vec<&str> = req.segments[2..].iter().map(String::as_str).collect();
    match (&req.method, rest.as_slice()) {
        (&Method::POST, []) => create_index(c, req, &map).await,
        (&Method::DELETE, [d, ..]) => {
            let name = if *d == "_design" {
                rest.get(1).copied().unwrap_or("")
            } else {
                d
            };
            let id = format!("_design/{name}");
            let Some((home, _)) = map.shard_of(&id) else {
                return super::dbs::first_range(c, req, &map).await;
            };
            let resp = write_on(c, req, &map, home).await;
            if resp.status.is_success() {
                super::design::after_write(c, &map, &[id]).await;
            }
            resp
        }
        _ => super::dbs::first_range(c, req, &map).await,
    }
}

/// `POST /db/_index`: written on the first shard's copies, then spread
/// from there to every other shard (its home among them).
async fn create_index(
    c: &Arc<Coordinator>,
    req: &FabricRequest,
    map: &Arc<ShardMap>,
) -> FabricResponse {
    let first = map.ranges()[0];
    let resp = write_on(c, req, map, first).await;
    if resp.status.is_success() {
        if let Some(id) = serde_json::from_slice::<Value>(&resp.body)
            .ok()
            .and_then(|v| v["id"].as_str().map(str::to_string))
        {
            super::design::spread_from(c, map, &id, first).await;
        }
    }
    resp
}

/// The request relayed as a write to every live copy of `range`: the
/// copies' answer, 202 when fewer than a quorum took it.
async fn write_on(
    c: &Arc<Coordinator>,
    req: &FabricRequest,
    map: &Arc<ShardMap>,
    range: crate::layout::Range,
) -> FabricResponse {
    let call = Call::of(req);
    let n = map.by_range.get(&range).map_or(1, Vec::len);
    let w = super::call::quorum(n);
    let got = c.fan_out(map, range, call, &req.user, w, true).await;
    let successes = got.successes();
    let Some(best) = got.best().cloned() else {
        return FabricResponse::unavailable("no copy of a shard is reachable");
    };
    let mut resp = best.into_response();
    if successes > 0 && successes < w && resp.status == StatusCode::OK {
        resp.status = StatusCode::ACCEPTED;
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_bookmarks_round_trip_and_refuse_others() {
        let marks = vec![Some("abc".to_string()), None, Some("x-y_z".into())];
        assert_eq!(
            decode_bookmark(&encode_bookmark(&marks), 3),
            Some(marks.clone())
        );
        assert_eq!(decode_bookmark(&encode_bookmark(&marks), 2), None);
        // A single node's bookmark is not the cluster's.
        assert_eq!(
            decode_bookmark(&shard_bookmark(&json!([1]), &json!("a")), 3),
            None
        );
        assert_eq!(decode_bookmark("not base64!", 3), None);
    }
}
