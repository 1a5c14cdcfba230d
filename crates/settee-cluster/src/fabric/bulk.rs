//! `_bulk_docs` through the cluster: the documents split by shard, each
//! shard's part sent to all its live copies at once (every shard in
//! parallel), the results put back in the request's order.
//!
//! A document is written when `w` copies report it written; the answer is
//! 201 when every document was, 202 when some reached fewer copies (but at
//! least one). A document no copy wrote gets the first copy's error for it.
//! With `new_edits: false` copies list only failures, so a document is
//! written on a copy unless that copy lists it.
//!
//! Invariants: ids missing from new documents are chosen here once; a body
//! that is not an object with a `docs` array goes whole to one copy, which
//! answers what a single node answers.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::{json, Value};

use super::call::Call;
use super::docs::{copies_param, new_id};
use super::{FabricRequest, FabricResponse};
use crate::coordinator::Coordinator;
use crate::layout::Range;

/// `POST /db/_bulk_docs`.
pub async fn bulk_docs(c: &Arc<Coordinator>, req: &FabricRequest) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    if req.method != Method::POST {
        return super::dbs::method_not_allowed("POST");
    }
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(&req.body) else {
        return super::dbs::first_range(c, req, &map).await;
    };
    let Some(Value::Array(mut docs)) = body.remove("docs") else {
        return super::dbs::first_range(c, req, &map).await;
    };
    if docs.iter().any(|d| !d.is_object()) {
        return super::dbs::first_range(c, req, &map).await;
    }
    let new_edits = body.get("new_edits") != Some(&Value::Bool(false));
    let first = map.ranges()[0];
    let mut parts: BTreeMap<Range, Vec<usize>> = BTreeMap::new();
    for (i, d) in docs.iter_mut().enumerate() {
        let id = match d.get("_id") {
            Some(Value::String(id)) => Some(id.clone()),
            None if new_edits => {
                let id = new_id();
                d["_id"] = Value::String(id.clone());
                Some(id)
            }
            _ => None,
        };
        let range = id
            .and_then(|id| map.shard_of(&id).map(|(r, _)| r))
            .unwrap_or(first);
        parts.entry(range).or_default().push(i);
    }
    let mut w_of = BTreeMap::new();
    for range in parts.keys() {
        let n = map.by_range.get(range).map_or(1, Vec::len);
        match copies_param(req, "w", n) {
            Ok(w) => w_of.insert(*range, w),
            Err(e) => return *e,
        };
    }
    let sends = parts.iter().map(|(range, idx)| {
        let mut part = body.clone();
        part.insert(
            "docs".into(),
            Value::Array(idx.iter().map(|&i| docs[i].clone()).collect()),
        );
        let mut call = Call::json(
            Method::POST,
            &["_bulk_docs"],
            req.query.clone(),
            &Value::Object(part),
        );
        if let Some(v) = req.headers.get("x-couch-full-commit") {
            call.headers.insert("x-couch-full-commit", v.clone());
        }
        let (c, map, user, w) = (
            Arc::clone(c),
            Arc::clone(&map),
            req.user.clone(),
            w_of[range],
        );
        let range = *range;
        async move { (range, c.fan_out(&map, range, call, &user, w, true).await) }
    });
    let gathered = futures_util::future::join_all(sends).await;
    let mut results: Vec<Option<Value>> = vec![None; docs.len()];
    let mut short = false;
    for (range, got) in gathered {
        let idx = &parts[&range];
        let w = w_of[&range];
        let ok_answers: Vec<Vec<Value>> = got
            .answers
            .iter()
            .flatten()
            .filter(|a| a.ok())
            .filter_map(|a| a.json().as_array().cloned())
            .collect();
        if ok_answers.is_empty() {
            // No copy took the request: its refusal is the answer.
            return match got.best() {
                Some(a) => a.clone().into_response(),
                None => FabricResponse::unavailable("no copy of a document's shard is reachable"),
            };
        }
        for (k, &i) in idx.iter().enumerate() {
            let id = docs[i].get("_id").cloned().unwrap_or(Value::Null);
            let mut written = 0;
            let mut first_ok = None;
            let mut first_err = None;
            for rows in &ok_answers {
                let row = if new_edits {
                    rows.get(k).cloned()
                } else {
                    rows.iter().find(|r| r.get("id") == Some(&id)).cloned()
                };
                match row {
                    Some(r) if r.get("error").is_some() => {
                        first_err.get_or_insert(r);
                    }
                    Some(r) => {
                        written += 1;
                        first_ok.get_or_insert(r);
                    }
                    None if !new_edits => written += 1,
                    None => {}
                }
            }
            if written > 0 && written < w {
                short = true;
            }
            results[i] = if written > 0 {
                first_ok
            } else {
                Some(first_err.unwrap_or_else(|| {
                    json!({"id": id, "error": "unknown_error", "reason": "no copy answered for the document"})
                }))
            };
        }
    }
    // Design documents written go to every shard before the answer (with
    // `new_edits: false` a written document has no row).
    let designs: Vec<String> = docs
        .iter()
        .zip(&results)
        .filter(|(_, r)| r.as_ref().is_none_or(|r| r.get("error").is_none()))
        .filter_map(|(d, _)| d.get("_id").and_then(Value::as_str))
        .filter(|id| super::design::is_design(id))
        .map(str::to_string)
        .collect();
    let rows: Vec<Value> = results.into_iter().flatten().collect();
    super::design::after_write(c, &map, &designs).await;
    let status = if short {
        StatusCode::ACCEPTED
    } else {
        StatusCode::CREATED
    };
    FabricResponse::json(status, &Value::Array(rows))
}
