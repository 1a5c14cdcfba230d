//! `/_cluster_setup` (server admins), CouchDB's set-up endpoint, for the
//! tools and scripts that call it. A Settee node needs no set-up steps: a
//! single node creates its system databases at start, and a node is a
//! cluster member when it was started with `--cluster-etcd` (no Erlang
//! cookie, no bind address to change). So:
//!
//! - `GET`: `single_node_enabled` / `cluster_finished` when the databases
//!   of `ensure_dbs_exist` (a JSON array; `_users` and `_replicator` by
//!   default) all exist, else `single_node_disabled` / `cluster_enabled`.
//! - `POST {"action": …}`: `enable_single_node` on a single node and
//!   `enable_cluster` on a member are done already (201); `add_node` on a
//!   member admits the node at `host:port` if it has joined (it is asked
//!   its name with the credentials given), else 400 saying how to start
//!   it; `remove_node` decommissions `node` (its copies move off);
//!   `finish_cluster` is "already finished"; what a node of the other kind
//!   cannot do is 400 with the reason.
//!
//! Invariant: nothing here changes a node's configuration; cluster changes
//! go through the coordinator (settee-cluster).

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::allow;
use crate::auth::require_admin;
use crate::error::{ApiError, ApiResult};
use crate::render::json_value;
use crate::request::Req;
use crate::state::App;

pub async fn cluster_setup(app: &App, req: &mut Req) -> ApiResult<Response> {
    allow(req, &[Method::GET, Method::HEAD, Method::POST], "GET,POST")?;
    require_admin(&req.user)?;
    if req.method == Method::POST {
        return action(app, req).await;
    }
    let wanted: Vec<String> = match req.query.get("ensure_dbs_exist") {
        None => vec!["_users".into(), "_replicator".into()],
        Some(v) => match serde_json::from_str::<Value>(v) {
            Ok(Value::Array(names)) => names
                .iter()
                .map(|n| n.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    ApiError::bad_request("ensure_dbs_exist must be an array of names")
                })?,
            _ => return Err(ApiError::bad_request("invalid UTF-8 JSON")),
        },
    };
    let have = super::server::list_dbs(app).await?;
    let all = wanted.iter().all(|w| have.contains(w));
    let state = match (app.coordinator().is_some(), all) {
        (false, true) => "single_node_enabled",
        (false, false) => "single_node_disabled",
        (true, true) => "cluster_finished",
        (true, false) => "cluster_enabled",
    };
    Ok(json_value(StatusCode::OK, &json!({"state": state})))
}

fn ok() -> Response {
    json_value(StatusCode::CREATED, &json!({"ok": true}))
}

async fn action(app: &App, req: &mut Req) -> ApiResult<Response> {
    let bytes = req.body_bytes().await?;
    let body = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(o)) => o,
        _ => return Err(ApiError::bad_request("Missing JSON body'")),
    };
    let text = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_string);
    let coordinator = app.coordinator();
    let not_enabled = || ApiError::bad_request("Cluster is not enabled.");
    match (text("action").as_deref(), coordinator) {
        (Some("enable_single_node"), None) | (Some("enable_cluster"), Some(_)) => Ok(ok()),
        (Some("enable_single_node"), Some(_)) => Err(ApiError::bad_request(
            "this node is a cluster member (started with --cluster-etcd); start it without \
             that option to run it alone",
        )),
        (Some("enable_cluster"), None) => Err(ApiError::bad_request(
            "a Settee node joins a cluster when it starts with --cluster-etcd (the cluster's \
             etcd endpoints) and --node NAME; restart it so",
        )),
        (Some("finish_cluster"), _) => Err(ApiError::bad_request("Cluster is already finished")),
        (Some("add_node" | "remove_node"), None) => Err(not_enabled()),
        (Some("add_node"), Some(c)) => {
            let host = text("host").ok_or_else(|| ApiError::bad_request("host is required"))?;
            let port = match body.get("port") {
                None => 5984,
                Some(p) => p
                    .as_u64()
                    .or_else(|| p.as_str().and_then(|s| s.parse().ok()))
                    .filter(|p| (1..=65_535).contains(p))
                    .ok_or_else(|| ApiError::bad_request("port must be a port number"))?,
            };
            let auth = text("username").map(|u| (u, text("password").unwrap_or_default()));
            let url = format!("http://{host}:{port}");
            c.add_node(&url, auth).await?;
            Ok(ok())
        }
        (Some("remove_node"), Some(c)) => {
            let node = text("node").ok_or_else(|| ApiError::bad_request("node is required"))?;
            if c.node_state(&node).await?.is_none() {
                return Err(ApiError::not_found("missing"));
            }
            c.set_leaving(&node, true).await?;
            Ok(ok())
        }
        _ => Err(ApiError::bad_request("Invalid Action'")),
    }
}
