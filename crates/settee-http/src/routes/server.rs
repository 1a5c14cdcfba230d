//! Server-level endpoints: `/`, `/_up`, `/_all_dbs`, `/_dbs_info`,
//! `/_uuids`, `/_session`, `/_active_tasks`, `/_membership` and
//! `/_node/{node}/…` (`_config`, `_stats`, `_system`).
//!
//! Invariant: configuration and node statistics are server-admin only;
//! `/_all_dbs` and `/_dbs_info` too unless `[chttpd] admin_only_all_dbs`
//! is false (CouchDB 3's default is true).

use std::sync::atomic::Ordering;

use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value};

use super::allow;
use crate::auth::require_admin;
use crate::error::{ApiError, ApiResult};
use crate::render::json_value;
use crate::request::Req;
use crate::state::{App, METHOD_NAMES, NODE_NAME};

/// The CouchDB API version Settee implements (clients check it).
pub const COUCHDB_VERSION: &str = "3.4.3";

const GET: &[Method] = &[Method::GET, Method::HEAD];

pub fn welcome(app: &App, req: &Req) -> ApiResult<Response> {
    allow(req, GET, "GET,HEAD")?;
    Ok(json_value(
        StatusCode::OK,
        &json!({
            "couchdb": "Welcome",
            "version": COUCHDB_VERSION,
            "git_sha": "settee",
            "uuid": app.server_uuid,
            "features": [],
            "vendor": {"name": "Settee", "version": env!("CARGO_PKG_VERSION")},
        }),
    ))
}

pub fn up(req: &Req) -> ApiResult<Response> {
    allow(req, GET, "GET,HEAD")?;
    Ok(json_value(
        StatusCode::OK,
        &json!({"status": "ok", "seeds": {}}),
    ))
}

/// startkey/endkey/limit/skip/descending/inclusive_end over database names.
fn name_window(req: &Req, mut names: Vec<String>) -> ApiResult<Vec<String>> {
    let q = &req.query;
    let key = |names: &[&str]| -> ApiResult<Option<String>> {
        match q.json(names)? {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(ApiError::query_parse("Database name keys must be strings")),
        }
    };
    let start = key(&["startkey", "start_key"])?;
    let end = key(&["endkey", "end_key"])?;
    let descending = q.flag("descending")?;
    let inclusive_end = q.bool("inclusive_end")?.unwrap_or(true);
    if descending {
        names.reverse();
    }
    let before_start = |n: &String| match &start {
        Some(s) if descending => n > s,
        Some(s) => n < s,
        None => false,
    };
    let after_end = |n: &String| match &end {
        Some(e) if descending => n < e || (!inclusive_end && n == e),
        Some(e) => n > e || (!inclusive_end && n == e),
        None => false,
    };
    let skip = usize::try_from(q.u64("skip")?.unwrap_or(0)).unwrap_or(usize::MAX);
    let limit = usize::try_from(q.u64("limit")?.unwrap_or(u64::MAX)).unwrap_or(usize::MAX);
    Ok(names
        .into_iter()
        .skip_while(before_start)
        .take_while(|n| !after_end(n))
        .skip(skip)
        .take(limit)
        .collect())
}

fn check_list_permission(req: &Req) -> ApiResult<()> {
    if req.settings.admin_only_all_dbs {
        require_admin(&req.user)?;
    }
    Ok(())
}

async fn list_dbs(app: &App) -> ApiResult<Vec<String>> {
    let engine = app.engine.clone();
    Ok(tokio::task::spawn_blocking(move || engine.list_dbs()).await??)
}

pub async fn all_dbs(app: &App, req: &mut Req) -> ApiResult<Response> {
    allow(req, GET, "GET,HEAD")?;
    check_list_permission(req)?;
    let names = name_window(req, list_dbs(app).await?)?;
    Ok(json_value(StatusCode::OK, &json!(names)))
}

/// Most names one `POST /_dbs_info` may ask for (CouchDB's default).
const DBS_INFO_KEYS_MAX: usize = 100;

pub async fn dbs_info(app: &App, req: &mut Req) -> ApiResult<Response> {
    allow(
        req,
        &[Method::GET, Method::HEAD, Method::POST],
        "GET,HEAD,POST",
    )?;
    check_list_permission(req)?;
    let (names, by_key) = if req.method == Method::POST {
        let body: Value = req.json().await?;
        let keys = body
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| ApiError::bad_request("`keys` member must exist."))?;
        if keys.len() > DBS_INFO_KEYS_MAX {
            return Err(ApiError::bad_request(format!(
                "`keys` member must be less than or equal to {DBS_INFO_KEYS_MAX}"
            )));
        }
        let names: Vec<String> = keys
            .iter()
            .map(|k| k.as_str().unwrap_or_default().to_string())
            .collect();
        (names, true)
    } else {
        (name_window(req, list_dbs(app).await?)?, false)
    };
    let app2 = app.clone();
    let rows = tokio::task::spawn_blocking(move || {
        names
            .into_iter()
            .map(|name| match app2.db(&name).and_then(|db| Ok(db.info()?)) {
                Ok(info) => json!({"key": name, "info": super::db::info_json(&info)}),
                Err(_) if by_key => json!({"key": name, "error": "not_found"}),
                Err(e) => json!({"key": name, "error": e.error}),
            })
            .collect::<Vec<Value>>()
    })
    .await?;
    Ok(json_value(StatusCode::OK, &Value::Array(rows)))
}

pub fn uuids(app: &App, req: &Req) -> ApiResult<Response> {
    allow(req, GET, "GET,HEAD")?;
    let count = req.query.u64("count")?.unwrap_or(1);
    if count > req.settings.uuid_max_count {
        return Err(ApiError::bad_request("count parameter too large"));
    }
    let ids: Vec<String> = (0..count)
        .map(|_| app.uuids.next(req.settings.uuid_algorithm))
        .collect();
    let mut resp = json_value(StatusCode::OK, &json!({"uuids": ids}));
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("must-revalidate, no-cache"),
    );
    resp.headers_mut()
        .insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    Ok(resp)
}

pub fn session(req: &Req) -> ApiResult<Response> {
    allow(req, GET, "GET,HEAD")?;
    let mut info = json!({"authentication_handlers": ["default"]});
    if req.user.name.is_some() {
        info["authenticated"] = json!("default");
    }
    Ok(json_value(
        StatusCode::OK,
        &json!({"ok": true, "userCtx": {"name": req.user.name, "roles": req.user.roles}, "info": info}),
    ))
}

pub fn active_tasks(app: &App, req: &Req) -> ApiResult<Response> {
    allow(req, GET, "GET,HEAD")?;
    require_admin(&req.user)?;
    let mut tasks = Vec::new();
    let mut compactions = app.compactions.lock();
    compactions.retain(|name| app.engine.db(name).is_ok_and(|db| db.is_compacting()));
    for name in compactions.iter() {
        tasks.push(json!({"type": "database_compaction", "database": name, "node": NODE_NAME, "pid": "<settee>",
            "progress": 0, "changes_done": 0, "total_changes": 0}));
    }
    Ok(json_value(StatusCode::OK, &Value::Array(tasks)))
}

pub fn membership(req: &Req) -> ApiResult<Response> {
    allow(req, GET, "GET,HEAD")?;
    require_admin(&req.user)?;
    Ok(json_value(
        StatusCode::OK,
        &json!({"all_nodes": [NODE_NAME], "cluster_nodes": [NODE_NAME]}),
    ))
}

pub async fn node(app: &App, req: &mut Req, node: &str, rest: &[&str]) -> ApiResult<Response> {
    if node != "_local" && node != NODE_NAME {
        return Err(ApiError::not_found(format!("Node {node} not found")));
    }
    match rest {
        [] => {
            allow(req, GET, "GET,HEAD")?;
            Ok(json_value(StatusCode::OK, &json!({"name": NODE_NAME})))
        }
        ["_config", rest @ ..] => config(app, req, rest).await,
        ["_stats", ..] => {
            allow(req, GET, "GET,HEAD")?;
            require_admin(&req.user)?;
            Ok(json_value(StatusCode::OK, &stats(app)))
        }
        ["_system"] => {
            allow(req, GET, "GET,HEAD")?;
            require_admin(&req.user)?;
            Ok(json_value(
                StatusCode::OK,
                &json!({"uptime": app.started.elapsed().as_secs(), "memory": {}}),
            ))
        }
        _ => Err(ApiError::not_found("missing")),
    }
}

fn counter(value: u64, desc: &str) -> Value {
    json!({"value": value, "type": "counter", "desc": desc})
}

fn stats(app: &App) -> Value {
    let s = &app.stats;
    let mut methods = Map::new();
    for (i, name) in METHOD_NAMES.iter().enumerate() {
        methods.insert(
            (*name).to_string(),
            counter(
                s.methods[i].load(Ordering::Relaxed),
                &format!("number of HTTP {name} requests"),
            ),
        );
    }
    let mut statuses = Map::new();
    for (code, c) in s.statuses.iter().enumerate() {
        let n = c.load(Ordering::Relaxed);
        if n > 0 {
            statuses.insert(
                code.to_string(),
                counter(n, &format!("number of HTTP {code} responses")),
            );
        }
    }
    json!({"couchdb": {
        "httpd": {
            "requests": counter(s.requests.load(Ordering::Relaxed), "number of HTTP requests"),
            "bulk_requests": counter(s.bulk_requests.load(Ordering::Relaxed), "number of bulk requests"),
        },
        "database_reads": counter(s.docs_read.load(Ordering::Relaxed), "number of times a document was read from a database"),
        "database_writes": counter(s.docs_written.load(Ordering::Relaxed), "number of times a database was changed"),
        "httpd_request_methods": methods,
        "httpd_status_codes": statuses,
    }})
}

async fn config(app: &App, req: &mut Req, rest: &[&str]) -> ApiResult<Response> {
    match rest {
        [] => {
            allow(req, GET, "GET,HEAD")?;
            require_admin(&req.user)?;
            Ok(json_value(StatusCode::OK, &json!(app.config.all())))
        }
        ["_reload"] => {
            allow(req, &[Method::POST], "POST")?;
            require_admin(&req.user)?;
            Ok(json_value(StatusCode::OK, &json!({"ok": true})))
        }
        [section] => {
            allow(req, GET, "GET,HEAD")?;
            require_admin(&req.user)?;
            Ok(json_value(
                StatusCode::OK,
                &json!(app.config.section(section)),
            ))
        }
        [section, key] => {
            allow(
                req,
                &[Method::GET, Method::HEAD, Method::PUT, Method::DELETE],
                "GET,HEAD,PUT,DELETE",
            )?;
            require_admin(&req.user)?;
            let unknown = || ApiError::not_found("unknown_config_value");
            match req.method {
                Method::PUT => {
                    let value = match req.json_value().await? {
                        Value::String(s) => s,
                        _ => {
                            return Err(ApiError::bad_request("Config values must be JSON strings"))
                        }
                    };
                    let old = if *section == "admins" {
                        app.auth.set_admin(key, &value)?
                    } else {
                        app.config.set(section, key, &value)?
                    };
                    Ok(json_value(StatusCode::OK, &json!(old.unwrap_or_default())))
                }
                Method::DELETE => {
                    if *section == "admins"
                        && app.config.section("admins").len() <= 1
                        && app.config.get(section, key).is_some()
                    {
                        return Err(ApiError::bad_request(
                            "Refusing to delete the last server admin (no admin party)",
                        ));
                    }
                    let old = app.config.delete(section, key)?.ok_or_else(unknown)?;
                    Ok(json_value(StatusCode::OK, &json!(old)))
                }
                _ => {
                    let v = app.config.get(section, key).ok_or_else(unknown)?;
                    Ok(json_value(StatusCode::OK, &json!(v)))
                }
            }
        }
        _ => Err(ApiError::not_found("missing")),
    }
}
