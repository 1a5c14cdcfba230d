//! Server-level endpoints: `/`, `/_up`, `/_all_dbs`, `/_dbs_info`,
//! `/_uuids`, `/_session`, `/_active_tasks`, `/_membership` and
//! `/_node/{node}/…` (`_config`, `_stats`, `_system`, `_prometheus`).
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
use crate::render::{json_response, json_value};
use crate::request::Req;
use crate::state::{App, METHOD_NAMES, NODE_NAME};

/// The CouchDB API version Settee implements (clients check it).
pub const COUCHDB_VERSION: &str = "3.4.3";

const GET: &[Method] = &[Method::GET, Method::HEAD];

/// The `features` of `GET /`, in CouchDB's order: full-text search (both
/// APIs), partitioned databases and the replication scheduler.
pub const FEATURES: [&str; 4] = ["search", "nouveau", "partitioned", "scheduler"];

pub fn welcome(app: &App, req: &Req) -> ApiResult<Response> {
    allow(req, GET, "GET,HEAD")?;
    Ok(json_value(
        StatusCode::OK,
        &json!({
            "couchdb": "Welcome",
            "version": COUCHDB_VERSION,
            "git_sha": "settee",
            "uuid": app.server_uuid,
            // What CouchDB 3.4 lists that Settee has (not `access-ready`,
            // `pluggable-storage-engines` nor `reshard`).
            "features": FEATURES,
            "vendor": {"name": "Settee", "version": env!("CARGO_PKG_VERSION")},
        }),
    ))
}

/// `/favicon.ico`: CouchDB has none to serve (no Fauxton here either).
pub fn favicon() -> Response {
    let mut resp = Response::new(axum::body::Body::from("Not found."));
    *resp.status_mut() = StatusCode::NOT_FOUND;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000"),
    );
    resp
}

pub fn up(app: &App, req: &Req) -> ApiResult<Response> {
    allow(req, GET, "GET,HEAD")?;
    if let Some(down) = storage_down(app) {
        return Ok(down);
    }
    Ok(json_value(
        StatusCode::OK,
        &json!({"status": "ok", "seeds": {}}),
    ))
}

/// `/_up`'s answer when the engine is poisoned (a storage call failed, so
/// every request fails): 503, so that a load balancer's health check takes
/// the node out instead of routing to it. `None` while storage is healthy.
pub fn storage_down(app: &App) -> Option<Response> {
    match app.engine.check() {
        Err(settee_db::Error::Poisoned(reason)) => Some(json_value(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"status": "storage_failed", "seeds": {}, "reason": reason}),
        )),
        _ => None,
    }
}

/// The options of `/_all_dbs` (and `GET /_dbs_info`) over database names,
/// read as CouchDB reads them: the options of `_all_docs` (it lists its
/// database catalog with them), applied in order (a later `startkey`,
/// `start_key` or `key` overrides an earlier one), checked as a map view's.
/// Names compare as bytes; a key that is not a string sorts before every
/// name (Erlang's term order). `keys` of more than one name lists those
/// that exist, in its order (CouchDB 3.4.3 crashes on it).
fn name_window(req: &Req, mut names: Vec<String>) -> ApiResult<Vec<String>> {
    use settee_views::args::{Src, ViewKind};
    use std::cmp::Ordering;
    let mut args = settee_views::ViewArgs::default();
    for (k, v) in req.query.pairs() {
        if k == "keys" {
            match crate::request::parse_json_bytes(v.as_bytes())? {
                Value::Array(keys) => args.keys = Some(keys),
                _ => return Err(ApiError::bad_request("`keys` parameter must be an array.")),
            }
            if args.keys.as_ref().is_some_and(|k| k.len() == 1) {
                // One key is a `key`, as for `_all_docs`.
                let key = args.keys.take().and_then(|mut k| k.pop());
                args.start_key.clone_from(&key);
                args.end_key = key;
            }
        } else {
            args.apply(k, Src::Text(v))?;
        }
    }
    let partition = args.partition.take();
    args.validate(ViewKind::Map, false)?;
    if partition.is_some() {
        return Err(ApiError::bad_request(
            "partition specified on non-partitioned db",
        ));
    }
    names.sort_unstable();
    let skip = usize::try_from(args.skip).unwrap_or(usize::MAX);
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    if let Some(keys) = &args.keys {
        return Ok(keys
            .iter()
            .filter_map(Value::as_str)
            .filter(|k| names.binary_search_by(|n| n.as_str().cmp(k)).is_ok())
            .skip(skip)
            .take(limit)
            .map(str::to_string)
            .collect());
    }
    // How a name compares with a key.
    let cmp = |name: &str, key: &Value| match key {
        Value::String(k) => name.cmp(k.as_str()),
        _ => Ordering::Greater,
    };
    let (desc, incl) = (args.descending, args.inclusive_end);
    let in_range = |n: &String| {
        let after_start = args.start_key.as_ref().is_none_or(|s| match cmp(n, s) {
            Ordering::Equal => true,
            o => (o == Ordering::Greater) != desc,
        });
        let before_end = args.end_key.as_ref().is_none_or(|e| match cmp(n, e) {
            Ordering::Equal => incl,
            o => (o == Ordering::Less) != desc,
        });
        after_start && before_end
    };
    let mut names: Vec<String> = names.into_iter().filter(in_range).collect();
    if desc {
        names.reverse();
    }
    Ok(names.into_iter().skip(skip).take(limit).collect())
}

fn check_list_permission(req: &Req) -> ApiResult<()> {
    if req.settings.admin_only_all_dbs {
        require_admin(&req.user)?;
    }
    Ok(())
}

pub(crate) async fn list_dbs(app: &App) -> ApiResult<Vec<String>> {
    let engine = app.engine.clone();
    let local = tokio::task::spawn_blocking(move || engine.list_dbs()).await??;
    Ok(match app.coordinator() {
        Some(c) => super::cluster::all_db_names(c, local),
        None => local,
    })
}

pub async fn all_dbs(app: &App, req: &mut Req) -> ApiResult<Response> {
    allow(req, GET, "GET,HEAD")?;
    check_list_permission(req)?;
    let names = name_window(req, list_dbs(app).await?)?;
    Ok(json_with_etag(req, StatusCode::OK, &json!(names)))
}

pub async fn dbs_info(app: &App, req: &mut Req) -> ApiResult<Response> {
    allow(
        req,
        &[Method::GET, Method::HEAD, Method::POST],
        "GET,HEAD,POST",
    )?;
    check_list_permission(req)?;
    let (names, by_key): (Vec<Value>, bool) = if req.method == Method::POST {
        req.require_json_ctype()?;
        let body = req.json_value().await?;
        let Value::Object(body) = body else {
            return Err(ApiError::bad_request("Request body must be a JSON object"));
        };
        let keys = match body.get("keys") {
            None => return Err(ApiError::bad_request("`keys` member must exist.")),
            Some(Value::Array(k)) => k.clone(),
            Some(_) => return Err(ApiError::bad_request("`keys` member must be an array.")),
        };
        if keys.len() > req.settings.max_db_number_for_dbs_info_req {
            return Err(ApiError::bad_request("too_many_keys"));
        }
        (keys, true)
    } else {
        let names = name_window(req, list_dbs(app).await?)?;
        (names.into_iter().map(Value::String).collect(), false)
    };
    let app2 = app.clone();
    let rows = tokio::task::spawn_blocking(move || {
        names
            .into_iter()
            .map(|key| {
                let found = key
                    .as_str()
                    .map(|name| app2.db(name).and_then(|db| Ok(db.info()?)));
                match found {
                    Some(Ok(info)) => json!({"key": key, "info": super::db::info_json(&info)}),
                    Some(Err(_)) | None if by_key => json!({"key": key, "error": "not_found"}),
                    Some(Err(e)) => json!({"key": key, "error": e.error}),
                    None => json!({"key": key, "error": "not_found"}),
                }
            })
            .collect::<Vec<Value>>()
    })
    .await?;
    if by_key {
        Ok(json_value(StatusCode::OK, &Value::Array(rows)))
    } else {
        Ok(json_with_etag(req, StatusCode::OK, &Value::Array(rows)))
    }
}

pub fn uuids(app: &App, req: &Req) -> ApiResult<Response> {
    allow(req, GET, "GET")?;
    let count = match req.query.get("count") {
        None => 1,
        Some(c) => c
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request("count must be a positive integer"))?,
    };
    if count > req.settings.uuid_max_count {
        return Err(ApiError::bad_request("count parameter too large"));
    }
    let ids: Vec<String> = (0..count)
        .map(|_| {
            app.uuids
                .next(req.settings.uuid_algorithm, &req.settings.utc_id_suffix)
        })
        .collect();
    let mut resp = json_with_etag(req, StatusCode::OK, &json!({"uuids": ids}));
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    h.insert(
        header::EXPIRES,
        HeaderValue::from_static("Mon, 01 Jan 1990 00:00:00 GMT"),
    );
    Ok(resp)
}

/// A JSON response with an `ETag` computed from its body (CouchDB tags
/// these server-level listings with a hash of their content).
fn json_with_etag(req: &Req, status: StatusCode, v: &Value) -> Response {
    let body = v.to_string();
    let tag = format!("\"{:016x}\"", xxhash_rust::xxh3::xxh3_64(body.as_bytes()));
    if crate::render::none_match(req.header(header::IF_NONE_MATCH), &tag) {
        return crate::render::not_modified(&tag);
    }
    let mut resp = json_response(status, body);
    if let Ok(v) = HeaderValue::from_str(&tag) {
        resp.headers_mut().insert(header::ETAG, v);
    }
    resp
}

/// `/_session`: who the request is (GET), a login answered with a
/// session cookie (POST, JSON or form body, `next` to redirect), a logout
/// (DELETE).
///
/// CouchDB answers these from its older HTTP layer, which sends no
/// `X-Couch-Request-ID`: every answer of the handler itself (errors too)
/// is marked [`crate::NoRequestId`]; a request the authentication chain
/// refuses before it gets here keeps the header, as on CouchDB.
pub async fn session(app: &App, req: &mut Req) -> ApiResult<Response> {
    let mut resp = session_answer(app, req)
        .await
        .unwrap_or_else(axum::response::IntoResponse::into_response);
    resp.extensions_mut().insert(crate::NoRequestId);
    Ok(resp)
}

async fn session_answer(app: &App, req: &mut Req) -> ApiResult<Response> {
    allow(
        req,
        &[Method::GET, Method::HEAD, Method::POST, Method::DELETE],
        "GET,HEAD,POST,DELETE",
    )?;
    match req.method {
        Method::POST => login(app, req).await,
        Method::DELETE => {
            let cookie = crate::auth::session_cookie(&app.config, "", now_secs());
            let mut resp = json_value(StatusCode::OK, &json!({"ok": true}));
            set_cookie(&mut resp, &cookie);
            Ok(resp)
        }
        _ => {
            let handlers: Vec<&str> = req
                .settings
                .auth_handlers
                .iter()
                .map(|h| h.name())
                .collect();
            let mut info = json!({ "authentication_handlers": handlers });
            if let Some(m) = req.auth_method {
                info["authenticated"] = json!(m);
            }
            Ok(json_value(
                StatusCode::OK,
                &json!({"ok": true, "userCtx": {"name": req.user.name, "roles": req.user.roles}, "info": info}),
            ))
        }
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn set_cookie(resp: &mut Response, cookie: &str) {
    if let Ok(v) = axum::http::HeaderValue::from_str(cookie) {
        resp.headers_mut().insert(axum::http::header::SET_COOKIE, v);
    }
}

/// `POST /_session`: `name` and `password` from a JSON or form body.
async fn login(app: &App, req: &mut Req) -> ApiResult<Response> {
    let ctype = req
        .headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let bytes = req.body_bytes().await?;
    let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let (name, password) = if ctype.starts_with("application/x-www-form-urlencoded") {
        let mut name = None;
        let mut password = None;
        for (k, v) in form_urlencoded::parse(&bytes) {
            match &*k {
                "name" | "username" => name = Some(v.into_owned()),
                "password" => password = Some(v.into_owned()),
                _ => {}
            }
        }
        (name, password)
    } else if ctype.starts_with("application/json") {
        let v: Value = serde_json::from_slice(&bytes).map_err(|_| ApiError::invalid_json())?;
        (
            field(&v, "name").or_else(|| field(&v, "username")),
            field(&v, "password"),
        )
    } else {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "bad_content_type",
            "Content-Type must be application/x-www-form-urlencoded or application/json",
        ));
    };
    let logged_in = match (name, password) {
        (Some(name), Some(password)) => {
            let peer = req.peer;
            app.auth.login(&name, &password, &app.engine, peer).await
        }
        _ => Err(ApiError::unauthorized("Name or password is incorrect.")),
    };
    let (user, cookie) = match logged_in {
        Ok(ok) => ok,
        Err(e) => {
            // A failed login also ends any session (an emptied cookie, as CouchDB).
            let mut resp = axum::response::IntoResponse::into_response(e);
            set_cookie(
                &mut resp,
                &crate::auth::session_cookie(&app.config, "", now_secs()),
            );
            return Ok(resp);
        }
    };
    let body = json!({"ok": true, "name": user.name, "roles": user.roles});
    let next = req.query.get("next").map(str::to_string);
    let mut resp = match next {
        Some(next) => {
            let mut r = json_value(StatusCode::FOUND, &body);
            let location = crate::routes::db::absolute_url(req, &next);
            if let Ok(v) = axum::http::HeaderValue::from_str(&location) {
                r.headers_mut().insert(axum::http::header::LOCATION, v);
            }
            r
        }
        None => json_value(StatusCode::OK, &body),
    };
    set_cookie(&mut resp, &cookie);
    Ok(resp)
}

/// A task of this node's own threads, with the `node` and `pid` CouchDB
/// gives every task.
fn on_this_node(mut task: Value) -> Value {
    if let Value::Object(m) = &mut task {
        m.insert("node".into(), json!(NODE_NAME));
        m.insert("pid".into(), json!("<settee>"));
    }
    task
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
    drop(compactions);
    tasks.extend(app.views.active().into_iter().map(on_this_node));
    tasks.extend(app.search.active().into_iter().map(on_this_node));
    tasks.extend(app.replicator.active_tasks());
    tasks.extend(app.purger.get().and_then(|p| p.active()).map(on_this_node));
    if let Some(c) = app.coordinator() {
        tasks.extend(c.active_tasks());
    }
    Ok(json_value(StatusCode::OK, &Value::Array(tasks)))
}

pub fn membership(req: &Req) -> ApiResult<Response> {
    allow(req, GET, "GET")?;
    require_admin(&req.user)?;
    Ok(json_value(
        StatusCode::OK,
        &json!({"all_nodes": [NODE_NAME], "cluster_nodes": [NODE_NAME]}),
    ))
}

/// `/_node/{node}/…` of this node: `_local` or its name (a cluster
/// member's own, given by `--node`; a single node's [`NODE_NAME`]).
pub async fn node(app: &App, req: &mut Req, node: &str, rest: &[&str]) -> ApiResult<Response> {
    let name = app.coordinator().map_or(NODE_NAME, |c| c.node_name());
    if node != "_local" && node != name {
        return Err(ApiError::not_found(format!("no such node: {node}")));
    }
    match rest {
        [] => {
            allow(req, GET, "GET,HEAD")?;
            Ok(json_value(StatusCode::OK, &json!({"name": name})))
        }
        ["_config", rest @ ..] => config(app, req, rest).await,
        ["_stats", path @ ..] => {
            allow(req, GET, "GET,HEAD")?;
            require_metrics_reader(req)?;
            // A sub-path selects one group or stat; an unknown one is null.
            let all = stats(app);
            let picked = path.iter().try_fold(&all, |v, k| v.get(*k));
            Ok(json_value(StatusCode::OK, picked.unwrap_or(&Value::Null)))
        }
        ["_system"] => {
            allow(req, GET, "GET,HEAD")?;
            require_metrics_reader(req)?;
            let mut memory = Map::new();
            for (part, bytes) in memory_parts(app) {
                memory.insert(part, json!(bytes));
            }
            Ok(json_value(
                StatusCode::OK,
                &json!({"uptime": app.started.elapsed().as_secs(), "memory": memory}),
            ))
        }
        ["_prometheus"] => {
            allow(req, GET, "GET,HEAD")?;
            require_metrics_reader(req)?;
            let text = crate::prometheus::render(
                &stats(app),
                app.started.elapsed().as_secs(),
                &memory_parts(app),
            );
            let mut resp = Response::new(axum::body::Body::from(text));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(crate::prometheus::CONTENT_TYPE),
            );
            Ok(resp)
        }
        _ => Err(ApiError::not_found("missing")),
    }
}

/// Settee's own memory parts (CouchDB lists its Erlang VM's): the
/// process's resident memory and what storage holds in memory.
fn memory_parts(app: &App) -> Vec<(String, u64)> {
    let mut parts = Vec::new();
    if let Some(rss) = resident_bytes() {
        parts.push(("rss".to_string(), rss));
    }
    for (part, bytes) in app.engine.memory() {
        parts.push((part.to_string(), bytes));
    }
    parts
}

/// The process's resident memory in bytes (Linux's `/proc/self/status`).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kb * 1024)
}

/// Node statistics are for server admins (CouchDB also admits a read-only
/// metrics user, which Settee does not have).
fn require_metrics_reader(req: &Req) -> ApiResult<()> {
    if req.user.is_server_admin() {
        Ok(())
    } else {
        Err(ApiError::unauthorized(
            "You are not a server admin or read-only metrics user",
        ))
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
    // The codes CouchDB keeps counters for, each described as it does.
    const CODES: &[u16] = &[
        200, 201, 202, 204, 206, 301, 302, 304, 400, 401, 403, 404, 405, 406, 409, 412, 413, 414,
        415, 416, 417, 500, 501, 503,
    ];
    let mut statuses = Map::new();
    for &code in CODES {
        let n = s
            .statuses
            .get(usize::from(code))
            .map_or(0, |c| c.load(Ordering::Relaxed));
        let phrase = StatusCode::from_u16(code)
            .ok()
            .and_then(|c| c.canonical_reason())
            .unwrap_or("");
        statuses.insert(
            code.to_string(),
            counter(n, &format!("number of HTTP {code} {phrase} responses")),
        );
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
        "request_time": s.request_times.stat(),
        "auto_purge": auto_purge_stats(app),
    }})
}

/// The automatic purge's counters (Settee's own; CouchDB's branch logs
/// its counts instead).
fn auto_purge_stats(app: &App) -> Value {
    let Some(p) = app.purger.get() else {
        return json!({});
    };
    let s = p.stats();
    let c = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    json!({
        "docs_purged": counter(c(&s.docs_purged), "number of deleted documents purged automatically"),
        "purge_requests": counter(c(&s.purge_requests), "number of purge requests the automatic purge made"),
        "passes": counter(c(&s.passes), "number of automatic purge passes over the databases"),
        "held": counter(c(&s.held), "number of times the automatic purge waited for an index or a replication"),
        "failures": counter(c(&s.failures), "number of automatic purge requests or reads that failed"),
    })
}

async fn config(app: &App, req: &mut Req, rest: &[&str]) -> ApiResult<Response> {
    match rest {
        [] => {
            allow(req, GET, "GET")?;
            require_admin(&req.user)?;
            Ok(json_value(StatusCode::OK, &json!(app.config.all())))
        }
        ["_reload"] => {
            allow(req, &[Method::POST], "POST")?;
            require_admin(&req.user)?;
            Ok(json_value(StatusCode::OK, &json!({"ok": true})))
        }
        [section] => {
            allow(req, GET, "GET")?;
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
                "GET,PUT,DELETE",
            )?;
            require_admin(&req.user)?;
            let unknown = || ApiError::not_found("unknown_config_value");
            match req.method {
                Method::PUT => {
                    let value = match req.json_value().await? {
                        Value::String(s) => s,
                        _ => return Err(ApiError::bad_request("a JSON string expected")),
                    };
                    let old = if *section == "admins" {
                        app.auth.set_admin(key, &value)?
                    } else {
                        app.config.set(section, key, &value)?
                    };
                    app.apply_settings();
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
                    app.apply_settings();
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
