//! `_changes` of a clustered database: each shard's feed read from one
//! live copy, from the sequence the client's opaque `since` names for it,
//! the rows put together with every row's `seq` the opaque sequence of
//! the feed just after it, so a client resumes from any row
//! ([`crate::seq`]). `feed=normal` and `feed=longpoll` (every shard
//! waited on at once; the first with rows answers). A shard whose copy in
//! `since` is not live (or no longer holds it) is read from its start on
//! another copy: rows may repeat, none is missed, as in CouchDB.
//!
//! Invariant: `limit` bounds the rows of the whole answer; a shard's
//! position advances only past rows the answer holds.

use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::{json, Value};

use super::call::Call;
use super::{FabricRequest, FabricResponse};
use crate::coordinator::Coordinator;
use crate::layout::Range;
use crate::membership::NodeInfo;
use crate::seq::{decode, encode, ShardSeq};

/// `GET`/`POST /db/_changes`.
pub async fn changes(c: &Arc<Coordinator>, req: &FabricRequest) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    if !matches!(req.method, Method::GET | Method::HEAD | Method::POST) {
        return super::dbs::method_not_allowed("GET,HEAD,POST");
    }
    let feed = req.param("feed").unwrap_or("normal");
    if !matches!(feed, "normal" | "longpoll") {
        return FabricResponse::not_implemented(&format!("_changes?feed={feed}"));
    }
    let since = req.param("since").unwrap_or("0");
    let now = since == "now";
    let given = if now { Some(Vec::new()) } else { decode(since) };
    let Some(given) = given else {
        return FabricResponse::error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "Malformed sequence supplied in 'since' parameter.",
        );
    };
    let limit: Option<usize> = req.param("limit").and_then(|l| l.parse().ok());
    // Each shard: the copy to read and where to start on it.
    let mut starts: Vec<(Range, NodeInfo, String)> = Vec::new();
    for range in map.ranges() {
        let copies = c.live_copies(&map, range);
        let named = given.iter().find(|s| s.range == range).and_then(|s| {
            copies
                .iter()
                .find(|n| n.name == s.node)
                .map(|n| (n.clone(), s.seq.to_string()))
        });
        let start = match named {
            Some(x) => x,
            None => match copies.first() {
                Some(n) => (n.clone(), if now { "now".into() } else { "0".into() }),
                None => return FabricResponse::unavailable("no copy of a shard is reachable"),
            },
        };
        starts.push((range, start.0, start.1));
    }
    let map = &map;
    let ask = |feed: &'static str| {
        starts.iter().map(move |(range, node, since)| {
            let mut query: Vec<(String, String)> = req
                .query
                .iter()
                .filter(|(k, _)| k != "since" && k != "feed")
                .cloned()
                .collect();
            query.push(("since".into(), since.clone()));
            query.push(("feed".into(), feed.into()));
            let call = Call::relay(
                req.method.clone(),
                &req.segments[1..],
                &query,
                &req.headers,
                req.body.clone(),
            );
            let (c, node, shard, user) = (
                Arc::clone(c),
                node.clone(),
                map.shard_name(*range),
                req.user.clone(),
            );
            async move { c.call_copy(&node, &shard, &call, &user).await }
        })
    };
    let mut pages: Vec<Option<Value>> = Vec::with_capacity(starts.len());
    for a in futures_util::future::join_all(ask("normal")).await {
        match a {
            Some(a) if a.ok() => pages.push(Some(a.json())),
            Some(a) => return a.into_response(),
            None => return FabricResponse::unavailable("a shard's copy did not answer"),
        }
    }
    let empty = pages
        .iter()
        .flatten()
        .all(|p| p["results"].as_array().is_none_or(Vec::is_empty));
    if feed == "longpoll" && empty {
        let waits: Vec<_> = ask("longpoll").map(Box::pin).collect();
        let (first, i, _) = futures_util::future::select_all(waits).await;
        match first {
            Some(a) if a.ok() => {
                for (k, p) in pages.iter_mut().enumerate() {
                    if k != i {
                        // Unchanged: its position stays where it started.
                        if let Some(p) = p {
                            p["results"] = json!([]);
                        }
                    }
                }
                pages[i] = Some(a.json());
            }
            Some(a) => return a.into_response(),
            None => return FabricResponse::unavailable("a shard's copy did not answer"),
        }
    }
    let mut pos: Vec<ShardSeq> = starts
        .iter()
        .map(|(range, node, since)| ShardSeq {
            range: *range,
            node: node.name.clone(),
            seq: since.parse().unwrap_or(0),
        })
        .collect();
    let mut rows = Vec::new();
    let mut pending: u64 = 0;
    for (k, page) in pages.iter().enumerate() {
        let Some(page) = page else { continue };
        let results = page["results"].as_array().cloned().unwrap_or_default();
        let mut taken = 0;
        for mut row in results.iter().cloned() {
            if limit.is_some_and(|l| rows.len() >= l) {
                break;
            }
            pos[k].seq = crate::seq::number(&row["seq"]);
            taken += 1;
            if super::design::foreign(map, starts[k].0, row["id"].as_str().unwrap_or("")) {
                // A design document's copy away from home: its home shard
                // lists the change.
                continue;
            }
            row["seq"] = json!(encode(&pos));
            rows.push(row);
        }
        if taken == results.len() {
            pos[k].seq = crate::seq::number(&page["last_seq"]).max(pos[k].seq);
            pending += page["pending"].as_u64().unwrap_or(0);
        } else {
            pending += (results.len() - taken) as u64 + page["pending"].as_u64().unwrap_or(0);
        }
    }
    FabricResponse::json(
        StatusCode::OK,
        &json!({"results": rows, "last_seq": encode(&pos), "pending": pending}),
    )
}
