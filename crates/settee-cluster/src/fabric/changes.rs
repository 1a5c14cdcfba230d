//! `_changes` of a clustered database: each shard's feed read from one
//! live copy, from the sequence the client's opaque `since` names for it,
//! the rows put together with every row's `seq` the opaque sequence of
//! the feed just after it, so a client resumes from any row
//! ([`crate::seq`]). `feed=normal` and `feed=longpoll` (every shard
//! waited on at once; the first with rows answers). A shard whose copy in
//! `since` is not live (or no longer holds it) is read from its start on
//! another copy: rows may repeat, none is missed, as in CouchDB.
//!
//! `feed=continuous` and `feed=eventsource` stream: rounds of the
//! longpoll feed from the last sequence sent, each waiting at most the
//! heartbeat (a newline, or an eventsource heartbeat event, when nothing
//! came) or what is left of `timeout` (60 s by default, as CouchDB's);
//! `limit` rows in all, then the `last_seq` line.
//!
//! Invariant: `limit` bounds the rows of the whole answer; a shard's
//! position advances only past rows the answer holds; a live feed's task
//! ends when the client goes away (a send fails), at its timeout without
//! heartbeats, or at its limit.

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
    match req.param("feed") {
        Some(feed @ ("continuous" | "eventsource")) => live(c, req, feed == "eventsource").await,
        _ => once(c, req).await,
    }
}

/// One answer of the normal or longpoll feed.
async fn once(c: &Arc<Coordinator>, req: &FabricRequest) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    if !matches!(req.method, Method::GET | Method::HEAD | Method::POST) {
        return super::dbs::method_not_allowed("GET,HEAD,POST");
    }
    let feed = req.param("feed").unwrap_or("normal");
    if !matches!(feed, "normal" | "longpoll") {
        // A single node's answer to a feed it does not know.
        return super::dbs::first_range(c, req, &map).await;
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

/// A live feed's default `timeout` without heartbeats (CouchDB's).
const LIVE_TIMEOUT_MS: u64 = 60_000;
/// Smallest heartbeat honoured (a single node's).
const HEARTBEAT_MIN_MS: u64 = 10;
/// Chunks a live feed may have made before the client read them.
const LIVE_QUEUE: usize = 16;

/// One round of a live feed: the longpoll feed from `since`, waiting at
/// most `wait_ms`, for at most `left` rows.
fn round(req: &FabricRequest, since: String, wait_ms: u64, left: Option<usize>) -> FabricRequest {
    let mut sub = req.clone();
    sub.query.retain(|(k, _)| {
        !matches!(
            k.as_str(),
            "since" | "feed" | "timeout" | "heartbeat" | "limit"
        )
    });
    sub.query.push(("since".into(), since));
    sub.query.push(("feed".into(), "longpoll".into()));
    sub.query.push(("timeout".into(), wait_ms.to_string()));
    if let Some(l) = left {
        sub.query.push(("limit".into(), l.to_string()));
    }
    sub
}

/// `feed=continuous` (or `eventsource`): see the module doc.
async fn live(c: &Arc<Coordinator>, req: &FabricRequest, eventsource: bool) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    let number = |k: &str| req.param(k).map(|v| v.parse::<i64>().ok());
    let heartbeat = match req.param("heartbeat") {
        None => None,
        Some("true") => Some(60_000),
        Some(v) => match v.parse::<i64>() {
            Ok(n) if n > 0 => Some((n as u64).max(HEARTBEAT_MIN_MS)),
            // One node's refusal, word for word.
            _ => return super::dbs::first_range(c, req, &map).await,
        },
    };
    let timeout = match number("timeout") {
        None => LIVE_TIMEOUT_MS,
        Some(Some(n)) => n.max(0) as u64,
        Some(None) => return super::dbs::first_range(c, req, &map).await,
    };
    let limit = match number("limit") {
        None => None,
        Some(Some(n)) => Some(n.max(0) as usize),
        Some(None) => return super::dbs::first_range(c, req, &map).await,
    };
    // The first round answers now: a refusal is the feed's answer.
    let since = req.param("since").unwrap_or("0").to_string();
    let first = once(c, &round(req, since, 0, limit)).await;
    if !first.status.is_success() {
        return first;
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(LIVE_QUEUE);
    let c2 = Arc::clone(c);
    let started = std::time::Instant::now();
    let base = req.clone();
    tokio::spawn(async move {
        let mut page: Value = serde_json::from_slice(&first.body).unwrap_or(Value::Null);
        let mut sent = 0usize;
        let mut last = page["last_seq"].clone();
        loop {
            let rows = page["results"].as_array().cloned().unwrap_or_default();
            for row in &rows {
                let chunk = if eventsource {
                    format!("data: {row}\nid: {}\n\n", row["seq"].as_str().unwrap_or(""))
                } else {
                    format!("{row}\n")
                };
                if tx.send(chunk.into()).await.is_err() {
                    return;
                }
                sent += 1;
            }
            if !page["last_seq"].is_null() {
                last = page["last_seq"].clone();
            }
            let left = limit.map(|l| l.saturating_sub(sent));
            let elapsed = started.elapsed().as_millis() as u64;
            if left == Some(0) || (heartbeat.is_none() && elapsed >= timeout && rows.is_empty()) {
                break;
            }
            if rows.is_empty() && heartbeat.is_some() {
                let beat = if eventsource {
                    "event: heartbeat\ndata: \n\n"
                } else {
                    "\n"
                };
                if tx.send(beat.into()).await.is_err() {
                    return;
                }
            }
            let wait = heartbeat.unwrap_or_else(|| timeout.saturating_sub(elapsed));
            let since = last.as_str().unwrap_or("0").to_string();
            let next = once(&c2, &round(&base, since, wait, left)).await;
            if !next.status.is_success() {
                break;
            }
            page = serde_json::from_slice(&next.body).unwrap_or(Value::Null);
        }
        if !eventsource {
            let end = json!({"last_seq": last, "pending": page["pending"].as_u64().unwrap_or(0)});
            let _ = tx.send(format!("{end}\n").into()).await;
        }
    });
    let mut resp = FabricResponse::json(StatusCode::OK, &Value::Null);
    resp.body = bytes::Bytes::new();
    if eventsource {
        resp.headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/event-stream"),
        );
    }
    resp.stream = Some(super::BodyStream::new(rx));
    resp
}
