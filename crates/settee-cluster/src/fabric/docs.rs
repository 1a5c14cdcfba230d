//! One document through the cluster: its shard found by id, writes sent
//! to every live copy and acknowledged by `w` of them, reads asked of `r`
//! copies with the winning revision answered.
//!
//! - A write (`PUT`, `DELETE`, same-shard `COPY`, `POST /db`) answers the
//!   copies' answer: as it is when `w` copies succeeded, 202 with the same
//!   body when fewer but at least one did (CouchDB's answer when the
//!   write quorum was not met), the copies' error when none did. Revision
//!   ids are deterministic (settee-core's `rev`), so every copy computes
//!   the same new revision for the same edit.
//! - A read answers the successful answer of the highest revision (its
//!   `ETag`); when the copies asked disagree, the shard's internal
//!   replication is scheduled (read repair).
//!
//! Invariants: `w` and `r` are between 1 and the shard's copies (a bad
//! value is CouchDB's 400); a `POST /db` without `_id` gets its id here,
//! once, so every copy stores the same document.

use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::Value;

use super::call::{quorum, Call};
use super::{FabricRequest, FabricResponse};
use crate::coordinator::Coordinator;

/// A request for document `id` (and its attachments) of `req`'s database.
pub async fn doc(c: &Arc<Coordinator>, req: &FabricRequest, id: &str) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    let Some((range, nodes)) = map.shard_of(id) else {
        return FabricResponse::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "error",
            "no shard holds the id",
        );
    };
    let n = nodes.len();
    let call = Call::of(req);
    if req.method == Method::GET || req.method == Method::HEAD {
        let r = match copies_param(req, "r", n) {
            Ok(r) => r,
            Err(e) => return *e,
        };
        let got = c.fan_out(&map, range, call, &req.user, r, false).await;
        let Some(best) = winner(&got.answers) else {
            return FabricResponse::unavailable("no copy of the document's shard is reachable");
        };
        if disagree(&got.answers) {
            c.sync().schedule_range(c, &map, range);
        }
        return best.into_response();
    }
    if req.method.as_str() == "COPY" {
        let dest = req
            .headers
            .get("destination")
            .and_then(|v| v.to_str().ok())
            .map(|d| d.split('?').next().unwrap_or(d).to_string());
        if let Some(dest) = dest {
            let dest = percent_encoding::percent_decode_str(&dest)
                .decode_utf8_lossy()
                .into_owned();
            if map.shard_of(&dest).map(|(r, _)| r) != Some(range) {
                return FabricResponse::not_implemented("COPY to a document of another shard");
            }
        }
    }
    let resp = write(c, req, &map, range, n, call).await;
    if super::design::is_design(id) && resp.status.is_success() {
        super::design::after_write(c, &map, &[id.to_string()]).await;
    }
    resp
}

/// `POST /db`: a new document, its id chosen here when it has none.
pub async fn post(c: &Arc<Coordinator>, req: &FabricRequest) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    let mut doc: serde_json::Map<String, Value> = match serde_json::from_slice(&req.body) {
        Ok(Value::Object(m)) => m,
        // The copies answer what a single node answers to this body.
        _ => return super::dbs::first_range(c, req, &map).await,
    };
    let id = match doc.get("_id") {
        Some(Value::String(id)) => id.clone(),
        Some(_) => return super::dbs::first_range(c, req, &map).await,
        None => {
            let id = new_id();
            doc.insert("_id".into(), Value::String(id.clone()));
            id
        }
    };
    let Some((range, nodes)) = map.shard_of(&id) else {
        return FabricResponse::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "error",
            "no shard holds the id",
        );
    };
    let body = bytes::Bytes::from(serde_json::to_vec(&Value::Object(doc)).unwrap_or_default());
    let call = Call::relay(Method::POST, &[], &req.query, &req.headers, body);
    let resp = write(c, req, &map, range, nodes.len(), call).await;
    if super::design::is_design(&id) && resp.status.is_success() {
        super::design::after_write(c, &map, &[id]).await;
    }
    resp
}

/// Sends a write to every live copy of `range`; answers as the module doc
/// says.
async fn write(
    c: &Arc<Coordinator>,
    req: &FabricRequest,
    map: &crate::layout::ShardMap,
    range: crate::layout::Range,
    n: usize,
    call: Call,
) -> FabricResponse {
    let w = match copies_param(req, "w", n) {
        Ok(w) => w,
        Err(e) => return *e,
    };
    let got = c.fan_out(map, range, call, &req.user, w, true).await;
    let successes = got.successes();
    let Some(best) = got.best().cloned() else {
        return FabricResponse::unavailable("no copy of the document's shard is reachable");
    };
    let mut resp = best.into_response();
    if successes > 0 && successes < w {
        resp.status = StatusCode::ACCEPTED;
    }
    resp
}

/// `r` or `w` from the query (the quorum of `n` when absent): an integer
/// from 1 to `n`, else CouchDB's 400.
pub fn copies_param(
    req: &FabricRequest,
    name: &str,
    n: usize,
) -> Result<usize, Box<FabricResponse>> {
    match req.param(name) {
        None => Ok(quorum(n)),
        Some(v) => match v.parse::<usize>() {
            Ok(k) if k >= 1 => Ok(k.min(n)),
            _ => Err(Box::new(FabricResponse::error(
                StatusCode::BAD_REQUEST,
                "query_parse_error",
                format!("Invalid value for integer: \"{v}\""),
            ))),
        },
    }
}

/// A revision from an `ETag` (`"3-abc"`): its position and hash.
fn etag_rev(a: &super::call::Answer) -> Option<(u64, String)> {
    let t = a
        .headers
        .get(http::header::ETAG)?
        .to_str()
        .ok()?
        .trim_matches('"');
    let (pos, hash) = t.split_once('-')?;
    Some((pos.parse().ok()?, hash.to_string()))
}

/// The successful answer of the highest revision, else the first answer.
fn winner(answers: &[Option<super::call::Answer>]) -> Option<super::call::Answer> {
    let answered: Vec<&super::call::Answer> = answers.iter().flatten().collect();
    answered
        .iter()
        .filter(|a| a.ok())
        .max_by_key(|a| etag_rev(a))
        .or_else(|| answered.first())
        .map(|a| (*a).clone())
}

/// Whether the copies asked answered differently (status or revision).
fn disagree(answers: &[Option<super::call::Answer>]) -> bool {
    let seen: Vec<(StatusCode, Option<(u64, String)>)> = answers
        .iter()
        .flatten()
        .map(|a| (a.status, etag_rev(a)))
        .collect();
    seen.windows(2).any(|w| w[0] != w[1]) || answers.iter().any(Option::is_none)
}

/// A new document id: 32 random hex digits, as CouchDB's `random` uuids.
pub fn new_id() -> String {
    use rand::RngCore;
    let mut b = [0u8; 16];
    rand::rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A read about document `id` answered by one live copy of its home shard
/// as it is (a `_show` of it: the shard holds the design document too).
pub async fn on_home(c: &Arc<Coordinator>, req: &FabricRequest, id: &str) -> FabricResponse {
    let Some(map) = c.map_of(&req.segments[0]).await else {
        return super::dbs::no_db();
    };
    let Some((range, _)) = map.shard_of(id) else {
        return super::dbs::first_range(c, req, &map).await;
    };
    let call = Call::of(req);
    match c
        .fan_out(&map, range, call, &req.user, 1, false)
        .await
        .best()
    {
        Some(a) => a.clone().into_response(),
        None => FabricResponse::unavailable("no copy of the document's shard is reachable"),
    }
}
