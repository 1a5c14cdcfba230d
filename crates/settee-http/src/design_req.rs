//! The request object design functions get (`req`), as CouchDB builds it:
//! `info`, `id`, `uuid`, `method`, `requested_path`, `path`, `raw_path`,
//! `query`, `headers`, `body`, `peer`, `form`, `cookie`, `userCtx`,
//! `secObj`.
//!
//! Invariant: built from the request as received — query values as
//! strings (the last of a repeated key wins), header names in their
//! canonical capitalisation (`X-Mine`, `Content-Type`), `form` filled only
//! for a form-encoded body — so functions see what CouchDB shows them.

use serde_json::{json, Map, Value};

use crate::request::Req;
use crate::state::App;

/// `Content-Type` → `Content-Type`, `x-mine` → `X-Mine`.
fn canonical(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut c = part.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + &c.as_str().to_ascii_lowercase(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// The request's query as an object of strings (the last value of a
/// repeated key wins).
pub fn query_object(req: &Req) -> Map<String, Value> {
    req.query
        .pairs()
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

fn headers_object(req: &Req) -> Map<String, Value> {
    let mut out = Map::new();
    for (name, value) in &req.headers {
        if let Ok(v) = value.to_str() {
            out.insert(canonical(name.as_str()), Value::String(v.to_string()));
        }
    }
    out
}

fn cookies(req: &Req) -> Map<String, Value> {
    let mut out = Map::new();
    for header in req.headers.get_all(axum::http::header::COOKIE) {
        let Ok(text) = header.to_str() else { continue };
        for pair in text.split(';') {
            if let Some((k, v)) = pair.split_once('=') {
                out.insert(k.trim().to_string(), Value::String(v.trim().to_string()));
            }
        }
    }
    out
}

/// The body as functions see it: the text received, or `absent` (CouchDB
/// says `"undefined"` to shows and lists, `""` to updates) when there is
/// none.
pub enum NoBody {
    Undefined,
    Empty,
}

/// 404 `{kind}_error` "Invalid path." (`show_error`, `list_error`, …): a
/// design function's path that names no function.
pub fn invalid_path(error: &'static str) -> crate::error::ApiError {
    crate::error::ApiError::new(axum::http::StatusCode::NOT_FOUND, error, "Invalid path.")
}

/// The function name and the document id (the rest of the path) after
/// `_show`/`_update`; [`invalid_path`] without a name.
pub fn name_and_doc<'a>(
    rest: &[&'a str],
    error: &'static str,
) -> crate::error::ApiResult<(&'a str, Option<String>)> {
    match rest.first() {
        Some(n) if !n.is_empty() => Ok((*n, (rest.len() > 1).then(|| rest[1..].join("/")))),
        _ => Err(invalid_path(error)),
    }
}

/// [`build`] for database `db` (its `GET /db` object as `info`).
#[allow(clippy::too_many_arguments)]
pub fn for_db(
    app: &App,
    req: &Req,
    db: &settee_db::Database,
    id: Option<&str>,
    segments: &[&str],
    body: &[u8],
    no_body: NoBody,
) -> crate::error::ApiResult<Value> {
    let info = crate::routes::db::info_json(&db.info()?);
    Ok(build(
        app,
        req,
        db.name(),
        info,
        id,
        segments,
        body,
        no_body,
    ))
}

/// `req` for a design function of database `info` (its `GET /db` object)
/// on document `id`, with the request's `body` (already read).
pub fn build(
    app: &App,
    req: &Req,
    db_name: &str,
    info: Value,
    id: Option<&str>,
    segments: &[&str],
    body: &[u8],
    no_body: NoBody,
) -> Value {
    let raw_path = match req.uri.query() {
        Some(q) => format!("{}?{q}", req.uri.path()),
        None => req.uri.path().to_string(),
    };
    let requested: Vec<Value> = raw_path
        .trim_start_matches('/')
        .split('/')
        .map(|s| {
            let decoded = percent_encoding::percent_decode_str(s).decode_utf8_lossy();
            Value::String(decoded.into_owned())
        })
        .collect();
    let ctype = req.header("content-type").unwrap_or_default();
    let form: Map<String, Value> = if ctype.starts_with("application/x-www-form-urlencoded") {
        form_urlencoded::parse(body)
            .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
            .collect()
    } else {
        Map::new()
    };
    let body = if body.is_empty() {
        match no_body {
            NoBody::Undefined => "undefined".to_string(),
            NoBody::Empty => String::new(),
        }
    } else {
        String::from_utf8_lossy(body).into_owned()
    };
    json!({
        "info": info,
        "id": id,
        "uuid": app.uuids.next(crate::config::UuidAlgorithm::Random, ""),
        "method": req.method.as_str(),
        "requested_path": requested,
        "path": segments,
        "raw_path": raw_path,
        "query": query_object(req),
        "headers": headers_object(req),
        "body": body,
        "peer": req.peer.map_or_else(|| "127.0.0.1".to_string(), |p| p.to_string()),
        "form": form,
        "cookie": cookies(req),
        "userCtx": settee_design::docs::user_ctx(db_name, req.user.name.as_deref(), &req.user.roles),
        "secObj": crate::auth::security_object(req),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn header_names_are_capitalised_as_couchdb_shows_them() {
        assert_eq!(super::canonical("x-mine"), "X-Mine");
        assert_eq!(super::canonical("content-type"), "Content-Type");
        assert_eq!(super::canonical("ACCEPT"), "Accept");
    }
}
