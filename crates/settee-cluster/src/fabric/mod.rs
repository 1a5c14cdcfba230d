//! The fabric: a request for a clustered database, answered by asking the
//! copies of its shards on the members (CouchDB's "fabric"). Any node
//! coordinates any request: the HTTP layer hands the request over whole
//! ([`FabricRequest`]) and relays the answer ([`FabricResponse`]).
//!
//! - [`call`]: one request to one shard copy on a member, and the fan-out
//!   that waits for a quorum of copies.
//! - [`docs`]: one document (its attachments, `_local` and design
//!   documents): writes to every copy, `w` of them acknowledged (201) or
//!   fewer but at least one (202); reads from `r` copies, the winning
//!   revision answered and a stale copy repaired.
//! - [`bulk`]: `_bulk_docs`, split by shard and merged back in order.
//! - [`ids`]: `_revs_diff`, `_missing_revs`, `_bulk_get`, split by shard.
//! - [`changes`]: `_changes` (normal, longpoll) with opaque sequences.
//! - [`listing`]: `_all_docs`, `_design_docs`, `_local_docs` merged from
//!   one copy of each shard in id order.
//! - [`design`]: design documents kept on every shard.
//! - [`views`]: view queries, merged (and reduced) from every shard.
//! - [`mango`]: `_find` merged from every shard, `_explain`, `_index`.
//! - [`dbs`]: a database's information, `_shards`, `_sync_shards`,
//!   `_security`. (Creation and deletion are the HTTP layer's, through
//!   [`Coordinator::create_db`] and [`Coordinator::delete_db`], so its one
//!   error table maps their failures.)
//!
//! Invariants: a copy is asked only while its node is live (etcd lists
//! it), so a down node costs no timeout; a coordinator that is not live
//! itself refuses writes (503) rather than place them by a stale map; a shard copy answers through the
//! same HTTP handlers a single node runs (validation, security, error
//! shapes are theirs), reached with the cluster's secret and the user the
//! request is for; what the fabric does not do yet answers 501
//! `not_implemented` with the endpoint named, never a wrong answer.

pub mod bulk;
pub mod call;
pub mod changes;
pub mod dbs;
pub mod design;
pub mod docs;
pub mod ids;
pub mod listing;
pub mod mango;
pub mod views;

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::{json, Value};

use crate::coordinator::Coordinator;

/// The header that carries the cluster's secret on a node's request to
/// another node.
pub const SECRET_HEADER: &str = "x-settee-cluster-secret";
/// The header a shard copy's information, `_all_docs` and `_design_docs`
/// answers carry for the cluster: how many of its design documents are
/// copies whose home is another shard (see [`design`]).
pub const FOREIGN_DESIGNS_HEADER: &str = "x-settee-foreign-designs";
/// The header that names (as JSON `{"name","roles"}`) the user a node's
/// request to another node is made for.
pub const USER_HEADER: &str = "x-settee-cluster-user";

/// The requester, as the coordinator authenticated them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct User {
    pub name: Option<String>,
    pub roles: Vec<String>,
}

impl User {
    /// The cluster's own requests between nodes (internal replication,
    /// moves): an admin named `_cluster`.
    pub fn internal() -> User {
        User {
            name: Some("_cluster".into()),
            roles: vec!["_admin".into()],
        }
    }
}

/// A request for a clustered database: `segments[0]` is the database.
#[derive(Clone, Debug)]
pub struct FabricRequest {
    pub method: Method,
    /// The decoded path segments, the database's name first.
    pub segments: Vec<String>,
    /// The decoded query, in order.
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub user: User,
}

impl FabricRequest {
    /// The last value of query parameter `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The answer the HTTP layer sends.
#[derive(Clone, Debug)]
pub struct FabricResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// A body sent as it is made (a live feed), after `body`.
    pub stream: Option<BodyStream>,
}

/// The chunks of a body sent as they come; the sender ends it (and learns
/// the client went away when a send fails).
#[derive(Clone)]
pub struct BodyStream(Arc<parking_lot::Mutex<Option<tokio::sync::mpsc::Receiver<Bytes>>>>);

impl BodyStream {
    pub fn new(rx: tokio::sync::mpsc::Receiver<Bytes>) -> BodyStream {
        BodyStream(Arc::new(parking_lot::Mutex::new(Some(rx))))
    }

    /// The receiver (once).
    pub fn take(&self) -> Option<tokio::sync::mpsc::Receiver<Bytes>> {
        self.0.lock().take()
    }
}

impl std::fmt::Debug for BodyStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BodyStream")
    }
}

impl FabricResponse {
    /// A JSON answer.
    pub fn json(status: StatusCode, v: &Value) -> FabricResponse {
        let mut body = serde_json::to_vec(v).unwrap_or_default();
        body.push(b'\n');
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        FabricResponse {
            status,
            headers,
            body: Bytes::from(body),
            stream: None,
        }
    }

    /// A CouchDB error answer.
    pub fn error(status: StatusCode, error: &str, reason: impl Into<String>) -> FabricResponse {
        FabricResponse::json(status, &json!({"error": error, "reason": reason.into()}))
    }

    /// What the fabric does not do yet.
    pub fn not_implemented(what: &str) -> FabricResponse {
        FabricResponse::error(
            StatusCode::NOT_IMPLEMENTED,
            "not_implemented",
            format!("{what} is not available on a clustered database yet"),
        )
    }

    /// No copy of a shard could be reached.
    pub fn unavailable(reason: impl Into<String>) -> FabricResponse {
        FabricResponse::error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", reason)
    }
}

/// Whether a request changes documents or settings (and so needs a
/// coordinator whose view of the shard maps is current).
fn is_write(m: &Method, seg: &[&str]) -> bool {
    match *m {
        Method::GET | Method::HEAD | Method::OPTIONS => false,
        Method::POST => matches!(
            seg,
            [_] | [_, "_bulk_docs" | "_purge" | "_index"] | [_, "_design", _, "_update", ..]
        ),
        _ => true,
    }
}

/// Answers one request for a clustered database (see the module doc).
/// A node whose lease is not certainly alive (cut off from etcd, or paused
/// past its lease) coordinates no writes: the maps it would place them by
/// may have changed without it.
pub async fn handle(c: Arc<Coordinator>, req: FabricRequest) -> FabricResponse {
    let seg: Vec<&str> = req.segments.iter().map(String::as_str).collect();
    let m = &req.method;
    if is_write(m, &seg) && !c.is_live() {
        return FabricResponse::unavailable(
            "this node has lost its place in the cluster (its etcd lease is not alive) and \
             coordinates no writes until it rejoins; send them to another node",
        );
    }
    match seg.as_slice() {
        [_] if *m == Method::GET || *m == Method::HEAD => dbs::info(&c, &req).await,
        [_] if *m == Method::POST => docs::post(&c, &req).await,
        [_] => dbs::method_not_allowed("DELETE,GET,HEAD,POST,PUT"),
        [db, "_shards"] => dbs::shards(&c, &req, db),
        [db, "_shards", id @ ..] => dbs::shard_of(&c, &req, db, &id.join("/")),
        [db, "_sync_shards"] => dbs::sync_shards(&c, &req, db),
        [_, "_security"] => dbs::security(&c, &req).await,
        [_, "_bulk_docs"] => bulk::bulk_docs(&c, &req).await,
        [_, "_bulk_get"] => ids::bulk_get(&c, &req).await,
        [_, "_revs_diff"] => ids::by_id_object(&c, &req, "_revs_diff").await,
        [_, "_missing_revs"] => ids::by_id_object(&c, &req, "_missing_revs").await,
        [_, "_changes"] => changes::changes(&c, &req).await,
        [_, "_find"] => mango::find(&c, &req).await,
        [_, "_explain"] => mango::explain(&c, &req).await,
        [_, "_index", ..] => mango::index(&c, &req).await,
        [_, "_all_docs"] => listing::list(&c, &req, listing::Kind::All).await,
        [_, "_design_docs"] => listing::list(&c, &req, listing::Kind::Design).await,
        [_, "_local_docs"] => listing::list(&c, &req, listing::Kind::Local).await,
        [_, "_ensure_full_commit" | "_view_cleanup"] | [_, "_compact", ..] => {
            dbs::every_copy(&c, &req).await
        }
        [_, "_local", id] => docs::doc(&c, &req, &format!("_local/{id}")).await,
        [_, "_design", d, "_info"] => views::info(&c, &req, d).await,
        [_, "_design", name] | [_, "_design", name, _] => {
            docs::doc(&c, &req, &format!("_design/{name}")).await
        }
        [_, "_design", d, "_view", v] => views::view(&c, &req, d, v).await,
        [_, "_design", _, "_show", _, id @ ..] if !id.is_empty() => {
            docs::on_home(&c, &req, &id.join("/")).await
        }
        [_, "_design", _, "_show", _] => {
            let Some(map) = c.map_of(&req.segments[0]).await else {
                return dbs::no_db();
            };
            dbs::first_range(&c, &req, &map).await
        }
        [_, "_design", _, endpoint, ..] => {
            FabricResponse::not_implemented(&format!("_design/{{ddoc}}/{endpoint}"))
        }
        [_, id, ..] if !id.starts_with('_') => docs::doc(&c, &req, id).await,
        [_, endpoint, ..] => FabricResponse::not_implemented(endpoint),
        [] => FabricResponse::error(StatusCode::NOT_FOUND, "not_found", "missing"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_told_from_reads() {
        let w = |m: Method, path: &str| is_write(&m, &path.split('/').collect::<Vec<_>>());
        for (m, path) in [
            (Method::PUT, "db/doc"),
            (Method::DELETE, "db/doc"),
            (Method::POST, "db"),
            (Method::POST, "db/_bulk_docs"),
            (Method::POST, "db/_purge"),
            (Method::POST, "db/_index"),
            (Method::PUT, "db/_security"),
            (Method::POST, "db/_design/d/_update/u/doc"),
        ] {
            assert!(w(m.clone(), path), "{m} {path}");
        }
        for (m, path) in [
            (Method::GET, "db/doc"),
            (Method::HEAD, "db"),
            (Method::POST, "db/_find"),
            (Method::POST, "db/_all_docs"),
            (Method::POST, "db/_bulk_get"),
            (Method::POST, "db/_revs_diff"),
            (Method::POST, "db/_design/d/_view/v"),
            (Method::POST, "db/_changes"),
        ] {
            assert!(!w(m.clone(), path), "{m} {path}");
        }
    }
}
