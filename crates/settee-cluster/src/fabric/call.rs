//! One request to one shard copy on a member, and the fan-out over a
//! shard's copies that answers once enough of them did.
//!
//! A copy is a database of the member's engine named as CouchDB names
//! shard files; it is reached at `ADVERTISE/ENCODED-SHARD-NAME/REST` with
//! the cluster's secret and the user the request is for, and answers
//! through the member's ordinary handlers.
//!
//! Invariants: every call is bounded ([`CALL_TIMEOUT`], [`ANSWER_MAX`]
//! bytes); a fan-out returns as soon as `need` copies succeeded or every
//! copy answered, the others finishing in the background; a write that a
//! copy missed schedules that shard's internal replication, so the copy
//! catches up promptly rather than at the next sweep.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Method, StatusCode};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::{User, SECRET_HEADER, USER_HEADER};
use crate::coordinator::Coordinator;
use crate::layout::{Range, ShardMap};
use crate::membership::NodeInfo;

/// The longest one call to a copy may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest answer a copy may send (it is held in memory).
pub const ANSWER_MAX: usize = 256 << 20;

/// Everything but RFC 3986's unreserved characters is escaped.
const ESCAPE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Request headers a copy never sees from the client (hop-by-hop, the
/// client's own credentials, sizes the client computed for its body).
const DROPPED_REQUEST: &[&str] = &[
    "host",
    "authorization",
    "cookie",
    "connection",
    "content-length",
    "transfer-encoding",
    "accept-encoding",
    "expect",
    "keep-alive",
    "te",
    "upgrade",
    "x-couch-request-id",
    SECRET_HEADER,
    USER_HEADER,
];

/// Answer headers not relayed to the client (the serving node sets its
/// own).
const DROPPED_ANSWER: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "date",
    "server",
    "keep-alive",
    "set-cookie",
    "x-couch-request-id",
    "x-couchdb-body-time",
    "location",
    "vary",
];

/// One request to send to a copy (the path after the database).
#[derive(Clone, Debug)]
pub struct Call {
    pub method: Method,
    pub rest: Vec<String>,
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Call {
    /// The client's request as it goes to a copy: same method, path after
    /// the database, query and headers (those a copy may see).
    pub fn relay(
        method: Method,
        rest: &[String],
        query: &[(String, String)],
        headers: &HeaderMap,
        body: Bytes,
    ) -> Call {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            if !DROPPED_REQUEST.contains(&k.as_str()) {
                h.append(k.clone(), v.clone());
            }
        }
        Call {
            method,
            rest: rest.to_vec(),
            query: query.to_vec(),
            headers: h,
            body,
        }
    }

    /// The client's whole request (`req`) as it goes to a copy.
    pub fn of(req: &super::FabricRequest) -> Call {
        Call::relay(
            req.method.clone(),
            &req.segments[1..],
            &req.query,
            &req.headers,
            req.body.clone(),
        )
    }

    /// A JSON request of the fabric's own.
    pub fn json(
        method: Method,
        rest: &[&str],
        query: Vec<(String, String)>,
        body: &serde_json::Value,
    ) -> Call {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Call {
            method,
            rest: rest.iter().map(|s| s.to_string()).collect(),
            query,
            headers,
            body: Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
        }
    }

    /// A bodiless `GET` of the fabric's own.
    pub fn get(rest: &[&str]) -> Call {
        Call {
            method: Method::GET,
            rest: rest.iter().map(|s| s.to_string()).collect(),
            query: Vec::new(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    /// The same call with another query.
    pub fn with_query(&self, query: Vec<(String, String)>) -> Call {
        Call {
            query,
            ..self.clone()
        }
    }
}

/// A copy's answer.
#[derive(Clone, Debug)]
pub struct Answer {
    pub node: String,
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn ok(&self) -> bool {
        self.status.is_success()
    }

    /// The body as JSON (`Null` when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The answer for the client: status, relayable headers, body.
    pub fn into_response(self) -> super::FabricResponse {
        let mut headers = HeaderMap::new();
        for (k, v) in &self.headers {
            if !DROPPED_ANSWER.contains(&k.as_str()) {
                headers.append(k.clone(), v.clone());
            }
        }
        super::FabricResponse {
            status: self.status,
            headers,
            body: self.body,
            stream: None,
        }
    }
}

/// The URL of `shard` on a member, with the path and query of `call`.
pub fn url(advertise: &str, shard: &str, call: &Call) -> String {
    let mut u = advertise.trim_end_matches('/').to_string();
    u.push('/');
    u.extend(utf8_percent_encode(shard, ESCAPE));
    for s in &call.rest {
        u.push('/');
        u.extend(utf8_percent_encode(s, ESCAPE));
    }
    for (i, (k, v)) in call.query.iter().enumerate() {
        u.push(if i == 0 { '?' } else { '&' });
        u.extend(utf8_percent_encode(k, ESCAPE));
        u.push('=');
        u.extend(utf8_percent_encode(v, ESCAPE));
    }
    u
}

/// The URL of database `shard` itself on a member.
pub fn shard_url(advertise: &str, shard: &str) -> String {
    format!(
        "{}/{}",
        advertise.trim_end_matches('/'),
        utf8_percent_encode(shard, ESCAPE)
    )
}

impl Coordinator {
    /// Sends `call` to the copy `shard` on `node`; `None` when the node
    /// did not answer (down, timed out, answered garbage).
    pub async fn call_copy(
        &self,
        node: &NodeInfo,
        shard: &str,
        call: &Call,
        user: &User,
    ) -> Option<Answer> {
        let url = url(&node.advertise, shard, call);
        let mut req = self
            .http()
            .request(call.method.clone(), &url)
            .headers(call.headers.clone())
            .header(HeaderName::from_static(SECRET_HEADER), self.secret())
            .header(
                HeaderName::from_static(USER_HEADER),
                serde_json::to_string(user).unwrap_or_default(),
            )
            .timeout(CALL_TIMEOUT);
        if !call.body.is_empty() || call.method == Method::PUT || call.method == Method::POST {
            req = req.body(call.body.clone());
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(node = %node.name, shard, error = %e, "shard copy did not answer");
                return None;
            }
        };
        let status = resp.status();
        let headers = resp.headers().clone();
        if resp.content_length().is_some_and(|l| l > ANSWER_MAX as u64) {
            tracing::warn!(node = %node.name, shard, "shard copy's answer too large");
            return None;
        }
        match resp.bytes().await {
            Ok(body) if body.len() <= ANSWER_MAX => Some(Answer {
                node: node.name.clone(),
                status,
                headers,
                body,
            }),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(node = %node.name, shard, error = %e, "shard copy's answer cut short");
                None
            }
        }
    }

    /// The live members holding copies of `range` of `map`, this node
    /// first (its copy is the cheapest to ask).
    pub fn live_copies(&self, map: &ShardMap, range: Range) -> Vec<NodeInfo> {
        let mut out: Vec<NodeInfo> = map
            .by_range
            .get(&range)
            .map(|nodes| nodes.iter().filter_map(|n| self.view().member(n)).collect())
            .unwrap_or_default();
        out.sort_by_key(|n| n.name != self.node_name());
        out
    }

    /// Sends `call` to every live copy of `range` and returns once `need`
    /// of them succeeded (a 2xx answer) or all answered: the answers so
    /// far, in arrival order (`None`: a copy that did not answer). When
    /// `write` is set, a copy that fails or does not answer (now or after
    /// the return) has the shard's internal replication scheduled.
    pub async fn fan_out(
        self: &Arc<Self>,
        map: &ShardMap,
        range: Range,
        call: Call,
        user: &User,
        need: usize,
        write: bool,
    ) -> FanOut {
        let copies = self.live_copies(map, range);
        let shard = map.shard_name(range);
        let total = copies.len();
        let (tx, mut rx) = tokio::sync::mpsc::channel(total.max(1));
        let call = Arc::new(call);
        for node in copies {
            let (c, call, user, shard, tx) = (
                Arc::clone(self),
                Arc::clone(&call),
                user.clone(),
                shard.clone(),
                tx.clone(),
            );
            let map = map.clone();
            tokio::spawn(async move {
                let answer = c.call_copy(&node, &shard, &call, &user).await;
                let failed = answer.as_ref().is_none_or(|a| a.status.is_server_error());
                if write && failed {
                    c.sync().schedule_range(&c, &map, range);
                }
                let _ = tx.send(answer).await;
            });
        }
        drop(tx);
        if write {
            // Copies being added receive the write too; they do not count
            // towards `need` (they are not full copies yet).
            for name in map.joining(range) {
                let Some(node) = self.view().member(name) else {
                    continue;
                };
                let (c, call, user, shard) = (
                    Arc::clone(self),
                    Arc::clone(&call),
                    user.clone(),
                    shard.clone(),
                );
                let map = map.clone();
                tokio::spawn(async move {
                    let answer = c.call_copy(&node, &shard, &call, &user).await;
                    if answer.as_ref().is_none_or(|a| a.status.is_server_error()) {
                        c.sync().schedule_range(&c, &map, range);
                    }
                });
            }
        }
        let mut out = FanOut {
            answers: Vec::new(),
            copies: total,
        };
        while let Some(a) = rx.recv().await {
            out.answers.push(a);
            if out.successes() >= need.max(1) {
                break;
            }
        }
        if write && total < map.by_range.get(&range).map_or(0, Vec::len) {
            // A copy on a node that is down missed this write.
            self.sync().schedule_range(self, map, range);
        }
        out
    }
}

impl Coordinator {
    /// Asks one live copy of every shard of `map` (in range order) the
    /// call `make` gives for it: every shard's successful answer, else the
    /// first shard's refusal as the client's answer (503 when a shard had
    /// no copy that answered).
    pub async fn ask_each_shard(
        self: &Arc<Self>,
        map: &Arc<ShardMap>,
        user: &User,
        make: impl Fn(usize, Range) -> Call,
    ) -> Result<Vec<Answer>, super::FabricResponse> {
        let asks = map.ranges().into_iter().enumerate().map(|(i, range)| {
            let (c, map, call, user) = (
                Arc::clone(self),
                Arc::clone(map),
                make(i, range),
                user.clone(),
            );
            async move { c.fan_out(&map, range, call, &user, 1, false).await }
        });
        let mut out = Vec::new();
        for got in futures_util::future::join_all(asks).await {
            match got.best() {
                Some(a) if a.ok() => out.push(a.clone()),
                Some(a) => return Err(a.clone().into_response()),
                None => {
                    return Err(super::FabricResponse::unavailable(
                        "no copy of a shard is reachable",
                    ))
                }
            }
        }
        Ok(out)
    }
}

/// What a fan-out gathered.
#[derive(Debug)]
pub struct FanOut {
    pub answers: Vec<Option<Answer>>,
    /// How many live copies were asked.
    pub copies: usize,
}

impl FanOut {
    pub fn successes(&self) -> usize {
        self.answers.iter().flatten().filter(|a| a.ok()).count()
    }

    /// The first successful answer, else the first answer at all.
    pub fn best(&self) -> Option<&Answer> {
        let answered = || self.answers.iter().flatten();
        answered().find(|a| a.ok()).or_else(|| answered().next())
    }
}

/// `quorum` of `n` copies: more than half.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_escape_every_segment() {
        let call = Call::json(
            Method::GET,
            &["_design", "a b/c"],
            vec![("startkey".into(), "\"a+b\"".into())],
            &serde_json::Value::Null,
        );
        assert_eq!(
            url("http://127.0.0.1:1/", "shards/00000000-7fffffff/db+x.1", &call),
            "http://127.0.0.1:1/shards%2F00000000-7fffffff%2Fdb%2Bx.1/_design/a%20b%2Fc?startkey=%22a%2Bb%22"
        );
    }

    #[test]
    fn quorums() {
        assert_eq!([1, 2, 3, 4, 5].map(quorum), [1, 2, 2, 3, 3]);
    }
}
