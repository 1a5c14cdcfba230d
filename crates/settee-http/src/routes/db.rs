//! Database endpoints: `/{db}` (info, create, delete, POST a document),
//! `_revs_limit`, `_compact`, `_view_cleanup`, `_ensure_full_commit`,
//! `_purge`, `_purged_infos`, `_purged_infos_limit`, `_security`.
//!
//! Sequences (`update_seq`, `purge_seq`) are sent as strings, as CouchDB
//! sends its opaque ones.
//!
//! Invariant: creation, deletion, compaction, purge, `_revs_limit` and
//! `_purged_infos_limit` changes need a server admin; engine calls that
//! block (create/delete fsync and stop writer threads, `info` asks storage
//! for sizes) run on the blocking pool.

use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value};
use settee_db::DbInfo;

use super::allow;
use crate::auth::{require_admin, require_db_admin, require_db_reader};
use crate::error::{ApiError, ApiResult};
use crate::render::{json_response, json_value};
use crate::request::{parse_id_revs, Req};
use crate::state::App;

/// Most documents one `_purge` request may name (CouchDB's default).
const PURGE_DOCS_MAX: usize = 100;
/// Most revisions one `_purge` request may name (CouchDB's default).
const PURGE_REVS_MAX: usize = 1000;

pub fn info_json(info: &DbInfo) -> Value {
    json!({
        "db_name": info.name,
        // Sequences are strings, as CouchDB's opaque ones are.
        "purge_seq": info.purge_seq.to_string(),
        "update_seq": info.update_seq.to_string(),
        "sizes": {"file": info.sizes.file, "external": info.sizes.external, "active": info.sizes.active},
        "props": if info.partitioned { json!({"partitioned": true}) } else { json!({}) },
        "doc_del_count": info.doc_del_count,
        "doc_count": info.doc_count,
        "disk_format_version": 8,
        "compact_running": info.compact_running,
        "cluster": {"q": 1, "n": 1, "w": 1, "r": 1},
        "instance_start_time": info.instance_start_time,
    })
}

/// The creation parameters CouchDB checks: `q` (shards; one node, one
/// shard here, but a bad value is still an error) and `partitioned`
/// (whether the database is partitioned; never a system database).
pub(crate) fn creation_params(req: &Req, name: &str) -> ApiResult<bool> {
    if let Some(q) = req.query.get("q") {
        if !q.parse::<u64>().is_ok_and(|n| n > 0) {
            return Err(ApiError::bad_request(
                "The `q` value should be a positive integer.",
            ));
        }
    }
    match req.query.get("partitioned") {
        None | Some("false") => Ok(false),
        Some("true") if name.starts_with('_') => {
            Err(ApiError::bad_request("Cannot partition a system database"))
        }
        Some("true") => Ok(true),
        Some(_) => Err(ApiError::bad_request("Invalid `partitioned` parameter")),
    }
}

fn ok_json(status: StatusCode) -> Response {
    json_response(status, "{\"ok\":true}".to_string())
}

pub async fn db(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(
        req,
        &[
            Method::GET,
            Method::HEAD,
            Method::PUT,
            Method::DELETE,
            Method::POST,
        ],
        // CouchDB's list (it leaves out PUT, which it allows).
        "DELETE,GET,HEAD,POST",
    )?;
    match req.method {
        Method::PUT => {
            require_admin(&req.user)?;
            settee_core::name::validate_db_name(name)?;
            let partitioned = creation_params(req, name)?;
            let (engine, n) = (app.engine.clone(), name.to_string());
            let sec = crate::auth::default_security(&req.settings)
                .as_json()
                .to_string();
            tokio::task::spawn_blocking(move || engine.create_db_with(&n, Some(&sec), partitioned))
                .await??;
            let mut resp = ok_json(StatusCode::CREATED);
            if let Some(loc) = location(req, name, None) {
                resp.headers_mut().insert(header::LOCATION, loc);
            }
            Ok(resp)
        }
        Method::DELETE => {
            if req.query.has("rev") {
                return Err(ApiError::bad_request(
                    "You tried to DELETE a database with a ?=rev parameter. Did you mean to DELETE a document instead?",
                ));
            }
            require_admin(&req.user)?;
            // An illegal name names no database: 404, as CouchDB answers.
            if settee_core::name::validate_db_name(name).is_err() {
                return Err(settee_db::Error::NotFound("Database does not exist.").into());
            }
            let (engine, n, app) = (app.engine.clone(), name.to_string(), app.clone());
            tokio::task::spawn_blocking(move || -> ApiResult<()> {
                engine.delete_db(&n)?;
                // Its search indexes' files go with it.
                app.search.forget_db(&n)?;
                Ok(())
            })
            .await??;
            Ok(ok_json(StatusCode::OK))
        }
        Method::POST => {
            let db = app.db(name)?;
            req.require_json_ctype()?;
            let value = req.json_value().await?;
            let Value::Object(map) = value else {
                return Err(ApiError::bad_request("Document must be a JSON object"));
            };
            let id = match map.get("_id") {
                Some(Value::String(s)) => s.clone(),
                Some(_) => return Err(settee_core::name::NameError::NotString.into()),
                None => app.new_uuid(),
            };
            super::doc::write(app, req, &db, &id, map).await
        }
        _ => {
            require_db_reader(req)?;
            let db = app.db(name)?;
            let info = tokio::task::spawn_blocking(move || db.info()).await??;
            Ok(json_value(StatusCode::OK, &info_json(&info)))
        }
    }
}

/// What CouchDB leaves unencoded in URLs it builds (`Location`): letters,
/// digits and `- . _ :`; everything else, `/` of `_design/` ids included,
/// is percent-encoded.
pub const URL_ENCODE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b':');

/// An absolute `Location` for a created resource (the request's
/// `X-Forwarded-Host` or `Host`, and `X-Forwarded-Proto` or `http`).
pub fn location(req: &Req, db: &str, id: Option<&str>) -> Option<HeaderValue> {
    use percent_encoding::utf8_percent_encode;
    let host = req
        .header("x-forwarded-host")
        .or_else(|| req.header(header::HOST))?;
    let scheme = req.header("x-forwarded-proto").unwrap_or("http");
    let mut url = format!("{scheme}://{host}/{}", utf8_percent_encode(db, URL_ENCODE));
    if let Some(id) = id {
        url.push('/');
        url.push_str(&utf8_percent_encode(id, URL_ENCODE).to_string());
    }
    HeaderValue::from_str(&url).ok()
}

/// An absolute URL on this server for `path` (a `next` redirect): a full
/// URL as given, else the request's host and scheme before it.
pub fn absolute_url(req: &Req, path: &str) -> String {
    if path.starts_with("http://") || path.starts_with("https://") {
        return path.to_string();
    }
    let host = req
        .header("x-forwarded-host")
        .or_else(|| req.header(header::HOST))
        .unwrap_or("localhost");
    let scheme = req.header("x-forwarded-proto").unwrap_or("http");
    let slash = if path.starts_with('/') { "" } else { "/" };
    format!("{scheme}://{host}{slash}{path}")
}

pub async fn ensure_full_commit(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    require_db_reader(req)?;
    req.require_json_ctype()?;
    let db = app.db(name)?;
    db.ensure_full_commit_async().await?;
    let start = tokio::task::spawn_blocking(move || db.info())
        .await??
        .instance_start_time;
    Ok(json_value(
        StatusCode::CREATED,
        &json!({"ok": true, "instance_start_time": start}),
    ))
}

pub async fn revs_limit(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(req, &[Method::GET, Method::HEAD, Method::PUT], "PUT,GET")?;
    if req.method == Method::PUT {
        require_db_admin(req)?;
        let db = app.db(name)?;
        let limit = match req.json_value().await? {
            Value::Number(n) => n.as_u64().filter(|n| *n > 0),
            _ => None,
        }
        .ok_or_else(|| ApiError::bad_request("`revs_limit` must be a positive integer"))?;
        db.set_revs_limit_async(limit).await?;
        return Ok(ok_json(StatusCode::OK));
    }
    require_db_reader(req)?;
    let db = app.db(name)?;
    Ok(json_response(StatusCode::OK, db.revs_limit().to_string()))
}

pub async fn compact(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    crate::auth::require_db_admin_to_compact(req)?;
    let db = app.db(name)?;
    req.require_json_ctype()?;
    if db.compact()? {
        app.compactions.lock().insert(name.to_string());
    }
    Ok(ok_json(StatusCode::ACCEPTED))
}

/// View compaction: there are no views yet, so a design document that
/// exists has nothing to compact.
pub async fn compact_views(
    app: &App,
    req: &mut Req,
    name: &str,
    ddoc: &str,
) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    crate::auth::require_db_admin_to_compact(req)?;
    let db = app.db(name)?;
    req.require_json_ctype()?;
    let id = format!("_design/{ddoc}");
    let (check_db, check_id) = (db.clone(), id.clone());
    let exists = tokio::task::spawn_blocking(move || check_db.reader()?.rev_tree(&check_id))
        .await??
        .is_some();
    if !exists {
        return Err(ApiError::not_found("missing"));
    }
    // As CouchDB: accepted, then compacted in the background.
    let app = app.clone();
    tokio::task::spawn_blocking(move || {
        if let Err(e) = app.views.compact(&db, &id) {
            tracing::info!(db = %db.name(), ddoc = %id, error = %e, "view compaction not done");
        }
    });
    Ok(ok_json(StatusCode::ACCEPTED))
}

pub async fn purge(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    require_admin(&req.user)?;
    let db = app.db(name)?;
    let body = req.json_object().await?;
    if body.len() > PURGE_DOCS_MAX {
        return Err(ApiError::bad_request(format!(
            "Exceeded maximum number of documents ({PURGE_DOCS_MAX})."
        )));
    }
    let reqs = parse_id_revs(body, "Invalid list of revisions")?;
    let total: usize = reqs.iter().map(|(_, revs)| revs.len()).sum();
    if total > PURGE_REVS_MAX {
        return Err(ApiError::bad_request(format!(
            "Exceeded maximum number of revisions ({PURGE_REVS_MAX})."
        )));
    }
    let outcome = db.purge_async(reqs).await?;
    let purged: Map<String, Value> = outcome
        .purged
        .into_iter()
        .map(|(id, revs)| {
            (
                id,
                Value::Array(revs.iter().map(|r| Value::String(r.to_string())).collect()),
            )
        })
        .collect();
    // CouchDB answers `null`: a clustered purge has no single sequence.
    Ok(json_value(
        StatusCode::CREATED,
        &json!({"purge_seq": null, "purged": purged}),
    ))
}

/// `GET /{db}/_purged_infos`: the purge history, `{"purged_infos":
/// [{"id", "revs"}, …]}` sorted by id.
pub async fn purged_infos(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(req, &[Method::GET, Method::HEAD], "GET")?;
    require_db_reader(req)?;
    let db = app.db(name)?;
    let infos = tokio::task::spawn_blocking(move || db.reader()?.purged_infos()).await??;
    let list: Vec<Value> = infos
        .into_iter()
        .map(|(id, revs)| {
            let revs: Vec<String> = revs.iter().map(ToString::to_string).collect();
            json!({"id": id, "revs": revs})
        })
        .collect();
    Ok(json_value(StatusCode::OK, &json!({ "purged_infos": list })))
}

/// `GET/PUT /{db}/_purged_infos_limit`: how many purge requests the
/// history keeps.
pub async fn purged_infos_limit(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(req, &[Method::GET, Method::HEAD, Method::PUT], "GET,PUT")?;
    if req.method == Method::PUT {
        require_admin(&req.user)?;
        let db = app.db(name)?;
        let limit = match req.json_value().await? {
            Value::Number(n) => n.as_u64().filter(|n| *n > 0),
            _ => None,
        }
        .ok_or_else(|| ApiError::bad_request("`purged_infos_limit` must be positive integer"))?;
        db.set_purged_infos_limit_async(limit).await?;
        return Ok(ok_json(StatusCode::OK));
    }
    require_db_reader(req)?;
    let db = app.db(name)?;
    Ok(json_response(
        StatusCode::OK,
        db.purged_infos_limit().to_string(),
    ))
}

pub async fn security(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(req, &[Method::GET, Method::HEAD, Method::PUT], "PUT,GET")?;
    if req.method == Method::PUT {
        require_db_admin(req)?;
        let db = app.db(name)?;
        if name == crate::auth::USERS_DB && !req.settings.users_db_security_editable {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "You can't edit the security object of the user database.",
            ));
        }
        let value = req.json_value().await?;
        let sec = settee_auth::SecurityObject::parse(&value)?;
        let text = sec.as_json().to_string();
        db.set_security_async(&text).await?;
        return Ok(ok_json(StatusCode::OK));
    }
    require_db_reader(req)?;
    app.db(name)?;
    let sec = crate::auth::security_object(req);
    Ok(json_value(StatusCode::OK, &sec))
}
