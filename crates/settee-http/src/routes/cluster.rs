//! The wire side of a cluster member: requests for clustered databases
//! handed to the coordinator's fabric (settee-cluster) and its answer
//! relayed; a database's creation and deletion through the coordinator,
//! with this layer's checks and error table; CouchDB's cluster endpoints
//! (`/_membership`, `/_up` with the lease's state).
//!
//! Invariants: on a single node nothing here runs; a shard copy's name
//! (`shards/…`) is reachable only by the cluster itself (a request that
//! carried the cluster's secret), and every other database name that is
//! not a system database is a clustered database.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Method, StatusCode};
use axum::response::Response;
use serde_json::json;
use settee_cluster::{Coordinator, CreateDb, FabricRequest, User};

use super::{allow, db};
use crate::auth::require_admin;
use crate::error::{ApiError, ApiResult};
use crate::render::json_value;
use crate::request::Req;

/// Whether a request for database `name` goes to the fabric: a cluster
/// member's request from a client (not from another node) for a name
/// that is not a system database's.
pub fn is_clustered(req: &Req, name: &str) -> bool {
    !req.internal && !name.starts_with('_')
}

/// Makes `c` this server's coordinator, with the views registry doing the
/// fabric's reductions across shards.
pub fn attach(app: &crate::state::App, c: &Arc<Coordinator>) {
    c.set_rereduce(Arc::new(Rereducer(Arc::downgrade(app))));
    let _ = app.cluster.set(Arc::clone(c));
}

/// The fabric's [`settee_cluster::fabric::views::Rereduce`]: the views
/// registry's (the state is held weakly: the coordinator is the state's).
struct Rereducer(std::sync::Weak<crate::state::AppState>);

impl settee_cluster::fabric::views::Rereduce for Rereducer {
    fn rereduce(
        &self,
        ddoc: &serde_json::Value,
        partitioned: bool,
        view: &str,
        values: Vec<serde_json::Value>,
    ) -> Result<serde_json::Value, String> {
        let app = self.0.upgrade().ok_or("the server is stopping")?;
        app.views
            .rereduce(ddoc, partitioned, view, values)
            .map_err(|e| e.to_string())
    }
}

/// On a shard copy's answer to the cluster (its information, `_all_docs`,
/// `_design_docs`): how many of its design documents are copies whose home
/// is another shard ([`settee_cluster::fabric::FOREIGN_DESIGNS_HEADER`]),
/// so the coordinator's sums leave them out without asking again.
pub fn mark_foreign(
    app: &crate::state::App,
    req: &Req,
    name: &str,
    answer: ApiResult<Response>,
) -> ApiResult<Response> {
    let mut resp = answer?;
    if !req.internal || !resp.status().is_success() {
        return Ok(resp);
    }
    let Some((range, _, _)) = settee_cluster::layout::parse_shard_name(name) else {
        return Ok(resp);
    };
    let Ok(db) = app.db(name) else {
        return Ok(resp);
    };
    let Ok(reader) = db.reader() else {
        return Ok(resp);
    };
    let designs = settee_db::IdRange {
        start: Some("_design/".into()),
        end: Some("_design0".into()),
        inclusive_end: false,
        ..settee_db::IdRange::default()
    };
    let partitioned = db.partitioned();
    let mut foreign = 0u64;
    let counted = reader.all_docs(&designs, false, false, &mut |row| {
        if !range.contains(settee_cluster::layout::doc_hash(&row.id, partitioned)) {
            foreign += 1;
        }
        true
    });
    if counted.is_ok() {
        resp.headers_mut().insert(
            settee_cluster::fabric::FOREIGN_DESIGNS_HEADER,
            axum::http::HeaderValue::from(foreign),
        );
    }
    Ok(resp)
}

/// A request for clustered database `segs[0]`.
pub async fn handle(c: &Arc<Coordinator>, req: &mut Req, segs: &[String]) -> ApiResult<Response> {
    let name = segs[0].as_str();
    if segs.len() == 1 && req.method == Method::PUT {
        return create(c, req, name).await;
    }
    if segs.len() == 1 && req.method == Method::DELETE {
        return delete(c, req, name).await;
    }
    let body = req.body_bytes().await?;
    let fr = FabricRequest {
        method: req.method.clone(),
        segments: segs.to_vec(),
        query: req.query.pairs().to_vec(),
        headers: req.headers.clone(),
        body,
        user: User {
            name: req.user.name.clone(),
            roles: req.user.roles.clone(),
        },
    };
    let answer = c.handle(fr).await;
    let body = match answer.stream.as_ref().and_then(|s| s.take()) {
        None => Body::from(answer.body),
        Some(rx) => {
            let first = answer.body;
            let chunks = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
            });
            let head =
                futures_util::stream::iter(
                    (!first.is_empty()).then_some(Ok::<_, std::io::Error>(first)),
                );
            Body::from_stream(futures_util::StreamExt::chain(head, chunks))
        }
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = answer.status;
    *resp.headers_mut() = answer.headers;
    Ok(resp)
}

/// `PUT /db[?q=&n=&partitioned=]` on a member: the shard map and copies.
async fn create(c: &Arc<Coordinator>, req: &Req, name: &str) -> ApiResult<Response> {
    require_admin(&req.user)?;
    settee_core::name::validate_db_name(name)?;
    let partitioned = db::creation_params(req, name)?;
    let int = |k: &str| -> ApiResult<Option<u32>> {
        match req.query.get(k) {
            None => Ok(None),
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .map(Some)
                .ok_or_else(|| {
                    ApiError::bad_request(format!("The `{k}` value should be a positive integer."))
                }),
        }
    };
    let spec = CreateDb {
        db: name.to_string(),
        q: int("q")?,
        n: int("n")?,
        partitioned,
    };
    let map = c.create_db(spec).await?;
    let status = if c
        .await_copies(&map, std::time::Duration::from_secs(10))
        .await
    {
        StatusCode::CREATED
    } else {
        StatusCode::ACCEPTED
    };
    Ok(json_value(status, &json!({"ok": true})))
}

/// `DELETE /db` on a member: the map, then every node's copies.
async fn delete(c: &Arc<Coordinator>, req: &Req, name: &str) -> ApiResult<Response> {
    if req.query.has("rev") {
        return Err(ApiError::bad_request(
            "You tried to DELETE a database with a ?=rev parameter. Did you mean to DELETE a document instead?",
        ));
    }
    require_admin(&req.user)?;
    if settee_core::name::validate_db_name(name).is_err() {
        return Err(settee_db::Error::NotFound("Database does not exist.").into());
    }
    c.delete_db(name).await?;
    Ok(json_value(StatusCode::OK, &json!({"ok": true})))
}

/// `GET /_membership`: the live members and every member that joined.
pub async fn membership(c: &Arc<Coordinator>, req: &Req) -> ApiResult<Response> {
    allow(req, &[Method::GET, Method::HEAD], "GET")?;
    require_admin(&req.user)?;
    let m = c.membership().await?;
    Ok(json_value(
        StatusCode::OK,
        &json!({"all_nodes": m.all_nodes, "cluster_nodes": m.cluster_nodes}),
    ))
}

/// `GET /_cluster/rebalance`: the decider's last status (plan, moves in
/// flight, done, history); `POST` with `{"action": "pause"|"resume"}`.
pub async fn rebalance(c: &Arc<Coordinator>, req: &mut Req) -> ApiResult<Response> {
    allow(
        req,
        &[Method::GET, Method::HEAD, Method::POST],
        "GET,HEAD,POST",
    )?;
    require_admin(&req.user)?;
    if req.method == Method::POST {
        let bytes = req.body_bytes().await?;
        let body = crate::request::parse_json_bytes(&bytes)?;
        let paused = match body.get("action").and_then(|a| a.as_str()) {
            Some("pause") => true,
            Some("resume") | Some("start") => false,
            _ => {
                return Err(ApiError::bad_request(
                    "action must be \"pause\", \"resume\" or \"start\"",
                ))
            }
        };
        c.set_rebalance_paused(paused).await?;
        return Ok(json_value(StatusCode::OK, &json!({"ok": true})));
    }
    let status = c.rebalance_status().await?;
    Ok(json_value(StatusCode::OK, &status))
}

/// `/_node/_local/_nodes/{name}` (server admins): `GET` the node's state
/// (`live`, `down`, `leaving`) and how many shard copies it holds;
/// `DELETE` decommissions it (202: its copies move off, then it holds
/// none and can be stopped); `PUT` takes that mark off (or admits a node
/// in advance: it takes copies once it joins).
pub async fn node_doc(c: &Arc<Coordinator>, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(
        req,
        &[Method::GET, Method::HEAD, Method::PUT, Method::DELETE],
        "GET,HEAD,PUT,DELETE",
    )?;
    require_admin(&req.user)?;
    let missing = || ApiError::new(StatusCode::NOT_FOUND, "not_found", "missing");
    match req.method {
        Method::PUT => {
            let bytes = req.body_bytes().await?;
            if !bytes.is_empty() && !crate::request::parse_json_bytes(&bytes)?.is_object() {
                return Err(ApiError::bad_request("Document must be a JSON object"));
            }
            c.set_leaving(name, false).await?;
            Ok(json_value(
                StatusCode::CREATED,
                &json!({"ok": true, "id": name}),
            ))
        }
        Method::DELETE => {
            if c.node_state(name).await?.is_none() {
                return Err(missing());
            }
            c.set_leaving(name, true).await?;
            Ok(json_value(
                StatusCode::ACCEPTED,
                &json!({"ok": true, "id": name, "state": "leaving"}),
            ))
        }
        _ => match c.node_state(name).await? {
            Some((state, copies)) => Ok(json_value(
                StatusCode::OK,
                &json!({"_id": name, "state": state, "shard_copies": copies}),
            )),
            None => Err(missing()),
        },
    }
}

/// `GET /_up` on a member: 200 while its lease is alive, else 503 (it no
/// longer coordinates writes).
pub fn up(c: &Arc<Coordinator>, req: &Req) -> ApiResult<Response> {
    allow(req, &[Method::GET, Method::HEAD], "GET,HEAD")?;
    if c.is_live() {
        let mut body = json!({"status": "ok", "seeds": {}});
        let under = c.under_replicated();
        if !under.is_empty() {
            // Settee's own: shards with fewer live copies than their map
            // names (still served, from the copies that are live).
            body["under_replicated"] = json!(under);
        }
        Ok(json_value(StatusCode::OK, &body))
    } else {
        let mut r = json_value(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"status": "nolease", "seeds": {}, "reason": "the node's etcd lease is not known to be alive; it does not coordinate writes"}),
        );
        r.headers_mut().insert(
            header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
        Ok(r)
    }
}

/// `GET /_node/_local/_dbs/{db}`: the database's shard map, as CouchDB
/// shows its `_dbs` document (server admins only).
pub async fn dbs_doc(c: &Arc<Coordinator>, req: &Req, db: &str) -> ApiResult<Response> {
    allow(req, &[Method::GET, Method::HEAD], "GET,HEAD")?;
    require_admin(&req.user)?;
    match c.map_of(db).await {
        Some(map) => {
            let v = serde_json::to_value(&*map).map_err(|e| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "error", e.to_string())
            })?;
            Ok(json_value(StatusCode::OK, &v))
        }
        None => Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", "missing")),
    }
}

/// The clustered databases and this node's system databases, sorted.
pub fn all_db_names(c: &Arc<Coordinator>, local: Vec<String>) -> Vec<String> {
    let mut names = c.view().dbs();
    names.extend(local.into_iter().filter(|n| n.starts_with('_')));
    names.sort();
    names.dedup();
    names
}
