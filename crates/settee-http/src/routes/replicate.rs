//! `POST /_replicate` and `GET /_scheduler/jobs`: the wire side of
//! [`settee_replicator`]. Local database names in a replication become
//! URLs of this server, reached with the requester's own credentials
//! (their Authorization, Cookie or proxy headers are forwarded), so a
//! replication can do no more than its requester could.

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::Value;
use settee_replicator::{Local, Spec};

use super::allow;
use crate::auth::require_admin;
use crate::error::{ApiError, ApiResult};
use crate::render::json_value;
use crate::request::Req;
use crate::state::App;

/// Request headers that carry the requester's identity.
const FORWARDED: [&str; 5] = [
    "authorization",
    "cookie",
    "x-auth-couchdb-username",
    "x-auth-couchdb-roles",
    "x-auth-couchdb-token",
];

/// This server as the replicator reaches it: the listening address, with
/// a wildcard bind reached on loopback.
fn local(app: &App, req: &Req) -> ApiResult<Local> {
    let addr = app
        .local_addr
        .get()
        .ok_or_else(|| ApiError::bad_request("local endpoints are not available"))?;
    let host = match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => "127.0.0.1".to_string(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => "[::1]".to_string(),
        std::net::IpAddr::V4(ip) => ip.to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
    };
    let base = url::Url::parse(&format!("http://{host}:{}/", addr.port()))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let headers = FORWARDED
        .iter()
        .filter_map(|h| Some((h.to_string(), req.header(*h)?.to_string())))
        .collect();
    Ok(Local {
        base,
        credentials: None,
        headers,
        user: req.user.name.clone(),
    })
}

pub async fn replicate(app: &App, req: &mut Req) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    if req.user.name.is_none() {
        return Err(ApiError::unauthorized("You are not an authenticated user"));
    }
    let body: Value = Value::Object(req.json_object().await?);
    let local = local(app, req)?;
    let spec = Spec::parse(&body, Some(&local))?;
    // A continuous job started answers 202, as CouchDB.
    let status = if spec.continuous && !spec.cancel {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    let out = app
        .replicator
        .replicate(spec, req.user.name.clone())
        .await?;
    Ok(json_value(status, &out))
}

pub fn scheduler_jobs(app: &App, req: &Req) -> ApiResult<Response> {
    allow(req, &[Method::GET, Method::HEAD], "GET,HEAD")?;
    require_admin(&req.user)?;
    Ok(json_value(StatusCode::OK, &app.replicator.jobs_json()))
}

/// `GET /_scheduler/docs`, `…/docs/{db}`, `…/docs/{db}/{docid}`: `db` is
/// `_replicator` or a `…/_replicator` database, its slash encoded (`%2F`)
/// or not.
pub fn scheduler_docs(app: &App, req: &Req, rest: &[&str]) -> ApiResult<Response> {
    allow(req, &[Method::GET, Method::HEAD], "GET,HEAD")?;
    require_admin(&req.user)?;
    let (db, doc) = match rest {
        [] => (None, None),
        // The database name is everything up to its `_replicator` part.
        _ => {
            let end = rest
                .iter()
                .position(|s| crate::replicator_db::is_replicator_db(s))
                .ok_or_else(|| ApiError::not_found("missing"))?;
            let db = rest[..=end].join("/");
            match &rest[end + 1..] {
                [] => (Some(db), None),
                [id] => (Some(db), Some(id.to_string())),
                _ => return Err(ApiError::not_found("missing")),
            }
        }
    };
    match app.replicator_docs.docs_json(db.as_deref(), doc.as_deref()) {
        Some(v) => Ok(json_value(StatusCode::OK, &v)),
        None => Err(ApiError::not_found("missing")),
    }
}
