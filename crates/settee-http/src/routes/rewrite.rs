//! `/db/_design/{ddoc}/_rewrite/…`: the design document's `rewrites` route
//! the request anew, as CouchDB's rewriter does.
//!
//! - An array of rules `{from, to, method, query}`: the first rule whose
//!   method and `from` pattern (`:var` one segment, `*` the rest) match
//!   wins; `to` and the query values get the variables (path variables,
//!   then the request's query), `to` is relative to the design document
//!   (`../../` is the database), key options (`key`, `startkey`, …) are
//!   JSON-encoded, and the path variables join the query. A rule that
//!   would leave the database (`../../../`) makes every request to the
//!   design document fail, as in CouchDB.
//! - A function (a string): `rewrites(req)` returns a path, `{path, query,
//!   method, headers, body}`, or `{code, …}` to answer at once.
//!
//! Invariant: a request is routed anew at most [`REWRITE_LIMIT`] times
//! (CouchDB's `rewrite_limit`), then refused; the rewritten request goes
//! through the router again, with every permission check of its new path.

use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use serde_json::{Map, Value};

use super::show::{external_response, External};
use super::Routed;
use crate::auth::require_db_reader;
use crate::design_req::{self, NoBody};
use crate::error::{ApiError, ApiResult};
use crate::request::{Query, Req};
use crate::state::App;

/// Times one request may be rewritten (CouchDB's `[httpd] rewrite_limit`).
pub const REWRITE_LIMIT: u32 = 100;
/// Query options whose rule values are JSON-encoded.
const KEY_OPTIONS: [&str; 6] = ["key", "startkey", "start_key", "endkey", "end_key", "keys"];
/// Bytes a path segment keeps encoded in the rewritten URI.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'?')
    .add(b'<')
    .add(b'>')
    .add(b'`')
    .add(b'{')
    .add(b'}');

fn rewrite_error(status: StatusCode, reason: &str) -> ApiError {
    ApiError::new(status, "rewrite_error", reason.to_string())
}

pub async fn rewrite(
    app: &App,
    req: &mut Req,
    db_name: &str,
    ddoc: &str,
    rest: &[&str],
    segments: &[&str],
) -> ApiResult<Routed> {
    let db = app.db(db_name)?;
    require_db_reader(req)?;
    req.rewrites += 1;
    if req.rewrites > REWRITE_LIMIT {
        return Err(ApiError::bad_request("Exceeded rewrite recursion limit"));
    }
    let (body, compiled) = app.design.rewrite_ddoc(&db.reader()?, ddoc)?;
    let rest: Vec<&str> = rest.iter().copied().filter(|s| !s.is_empty()).collect();
    match body.get("rewrites") {
        Some(Value::Array(rules)) => {
            let (segs, query) = by_rules(req, db_name, ddoc, rules, &rest)?;
            route_again(req, segs, query)
        }
        Some(Value::String(_)) => by_function(app, req, db_name, ddoc, &compiled, segments).await,
        _ => Err(design_req::invalid_path("rewrite_error")),
    }
}

/// `from`'s segments matched against the path: the variables bound
/// (`*` binds the rest, joined with `/`), or None.
fn match_from(from: &str, path: &[&str]) -> Option<Vec<(String, String)>> {
    let pattern: Vec<&str> = from.split('/').filter(|s| !s.is_empty()).collect();
    let mut bound = Vec::new();
    for (i, p) in pattern.iter().enumerate() {
        if *p == "*" {
            bound.push(("*".to_string(), path.get(i..).unwrap_or_default().join("/")));
            return Some(bound);
        }
        let seg = path.get(i)?;
        match p.strip_prefix(':') {
            Some(name) => bound.push((name.to_string(), (*seg).to_string())),
            None if p == seg => {}
            None => return None,
        }
    }
    (pattern.len() == path.len()).then_some(bound)
}

/// A path relative to the design document, as segments from the server
/// root; None when it climbs above the database and `secure`.
fn resolve(db: &str, ddoc: &str, to: &str, secure: bool) -> Option<Vec<String>> {
    let mut segs = vec![db.to_string(), "_design".to_string(), ddoc.to_string()];
    for part in to.trim_start_matches('/').split('/') {
        match part {
            "" | "." => {}
            ".." => {
                let climbed_out = segs.pop().is_none() || segs.is_empty();
                if secure && climbed_out {
                    return None;
                }
            }
            other => segs.push(other.to_string()),
        }
    }
    Some(segs)
}

/// Where a rule sends a request: the new path's segments and its query.
type Target = (Vec<String>, Vec<(String, String)>);

fn by_rules(req: &Req, db: &str, ddoc: &str, rules: &[Value], path: &[&str]) -> ApiResult<Target> {
    let too_far = rules.iter().any(|r| {
        r.get("to")
            .and_then(Value::as_str)
            .is_some_and(|to| to.split('/').filter(|s| *s == "..").count() > 2)
    });
    if too_far {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "insecure_rewrite_rule",
            "too many ../.. segments",
        ));
    }
    let asked = req.query.pairs().to_vec();
    for rule in rules {
        let Some(rule) = rule.as_object() else {
            continue;
        };
        let method = rule.get("method").and_then(Value::as_str).unwrap_or("*");
        if method != "*" && method != req.method.as_str() {
            continue;
        }
        let from = rule.get("from").and_then(Value::as_str).unwrap_or("");
        let Some(bound) = match_from(from, path) else {
            continue;
        };
        let Some(to) = rule.get("to").and_then(Value::as_str) else {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "error",
                "invalid_rewrite_target",
            ));
        };
        let lookup = |name: &str| -> Option<String> {
            bound
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .or_else(|| req.query.get(name).map(str::to_string))
        };
        let target: Vec<String> = to
            .split('/')
            .map(|seg| match (seg, seg.strip_prefix(':')) {
                ("*", _) => lookup("*").unwrap_or_default(),
                (_, Some(name)) => lookup(name).unwrap_or_else(|| seg.to_string()),
                _ => seg.to_string(),
            })
            .collect();
        let segs = resolve(db, ddoc, &target.join("/"), true).ok_or_else(|| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "insecure_rewrite_rule",
                "too many ../.. segments",
            )
        })?;
        let mut query = asked;
        if let Some(Value::Object(q)) = rule.get("query") {
            for (k, v) in q {
                let value = |s: &str| match s.strip_prefix(':') {
                    Some(name) => lookup(name).unwrap_or_else(|| s.to_string()),
                    None => s.to_string(),
                };
                let text = match v {
                    Value::String(s) if KEY_OPTIONS.contains(&k.as_str()) => {
                        Value::String(value(s)).to_string()
                    }
                    Value::String(s) => value(s),
                    other if KEY_OPTIONS.contains(&k.as_str()) => other.to_string(),
                    _ => {
                        return Err(ApiError::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "unknown_error",
                            "badarg",
                        )
                        .with_ref())
                    }
                };
                query.push((k.clone(), text));
            }
        }
        query.extend(bound.into_iter().filter(|(k, _)| k != "*"));
        return Ok((segs, query));
    }
    Err(ApiError::not_found("missing"))
}

async fn by_function(
    app: &App,
    req: &mut Req,
    db_name: &str,
    ddoc: &str,
    compiled: &settee_js::DesignDoc,
    segments: &[&str],
) -> ApiResult<Routed> {
    let body = req.body_bytes().await?;
    let mut js_req = design_req::build(
        app,
        req,
        db_name,
        Value::Null,
        None,
        segments,
        &body,
        NoBody::Undefined,
    );
    if let Value::Object(o) = &mut js_req {
        for k in ["info", "id", "uuid", "form"] {
            o.shift_remove(k);
        }
    }
    let result = app
        .design
        .rewrite(compiled, &js_req)
        .await
        .map_err(super::show::thrown_error)?;
    // The body read for the function goes on to the rewritten request.
    req.replace_body(body);
    let (path, obj) = match result {
        Value::String(p) => (p, Map::new()),
        Value::Object(o) => match o.get("path").and_then(Value::as_str) {
            Some(p) => (p.to_string(), o),
            None if o.contains_key("code") => {
                let how = External {
                    etag: None,
                    head: req.method == Method::HEAD,
                    code: StatusCode::OK,
                    negotiated: false,
                    bare: true,
                };
                return external_response(&Value::Object(o), &how).map(Routed::Answer);
            }
            None => {
                return Err(rewrite_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Rewrite result must produce a new path.",
                ))
            }
        },
        Value::Null => return Err(design_req::invalid_path("rewrite_error")),
        _ => {
            return Err(rewrite_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "bad rewrite",
            ))
        }
    };
    let query = match obj.get("query") {
        Some(Value::Object(q)) => {
            let mut pairs = Vec::with_capacity(q.len());
            for (k, v) in q {
                match v {
                    Value::String(s) => pairs.push((k.clone(), s.clone())),
                    other => {
                        return Err(rewrite_error(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            &format!(
                                "object key/value must be strings <<{}>>={other}",
                                Value::String(k.clone())
                            ),
                        ))
                    }
                }
            }
            pairs
        }
        _ => req.query.pairs().to_vec(),
    };
    if let Some(m) = obj.get("method").and_then(Value::as_str) {
        req.method = Method::from_bytes(m.as_bytes())
            .map_err(|_| rewrite_error(StatusCode::INTERNAL_SERVER_ERROR, "bad rewrite"))?;
    }
    if let Some(Value::Object(headers)) = obj.get("headers") {
        for (k, v) in headers {
            let (Ok(n), Some(Ok(v))) = (
                HeaderName::from_bytes(k.as_bytes()),
                v.as_str().map(HeaderValue::from_str),
            ) else {
                continue;
            };
            req.headers.insert(n, v);
        }
    }
    if let Some(b) = obj.get("body") {
        let text = match b {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        req.headers.insert(
            axum::http::header::CONTENT_LENGTH,
            HeaderValue::from(text.len()),
        );
        req.headers.remove(axum::http::header::TRANSFER_ENCODING);
        req.replace_body(bytes::Bytes::from(text));
    }
    let segs = resolve(db_name, ddoc, &path, false).unwrap_or_default();
    route_again(req, segs, query)
}

/// Sets the request up to be routed again, to `segs` with `query` (its
/// URI rewritten to match): the router's loop (`routes::dispatch`) takes
/// it from there, so a rewrite never nests a routing on the stack.
pub(crate) fn route_again(
    req: &mut Req,
    segs: Vec<String>,
    query: Vec<(String, String)>,
) -> ApiResult<Routed> {
    req.query = Query::from_pairs(query);
    let mut uri = String::new();
    for s in &segs {
        uri.push('/');
        uri.extend(utf8_percent_encode(s, SEGMENT));
    }
    if uri.is_empty() {
        uri.push('/');
    }
    let q = req.query.encode();
    if !q.is_empty() {
        uri.push('?');
        uri.push_str(&q);
    }
    req.uri = uri
        .parse()
        .map_err(|_| ApiError::bad_request("the rewritten path is not a valid URI"))?;
    Ok(Routed::Again(segs))
}
