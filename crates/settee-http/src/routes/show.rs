//! `/db/_design/{ddoc}/_show/{name}[/{docid}]`: a show function renders
//! one document (or none) into any response: its status, headers and body
//! as the function returns them (`{code, headers, body | json | base64}`),
//! `Vary: Accept` for `provides()` negotiation, and an ETag that changes
//! with the document, the design document, the user, the query and the
//! `Accept` header (a matching `If-None-Match` answers 304).
//!
//! Invariant: the function sees the document's latest revision with its
//! `_revisions` (`?rev=` is ignored, as by CouchDB), `null` for a missing
//! or deleted one; any method runs it.

use axum::body::Body as AxBody;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use base64::Engine as _;
use serde_json::{Map, Value};
use settee_db::reader::GetOptions;

use crate::auth::require_db_reader;
use crate::design_req::{self, NoBody};
use crate::error::{ApiError, ApiResult};
use crate::request::Req;
use crate::state::App;

/// A document as a show function gets it: latest revision with
/// `_revisions`, or JSON `null`; and its revision (for the ETag).
pub(crate) fn doc_for_show(db: &settee_db::Database, id: &str) -> ApiResult<(String, String)> {
    let reader = db.reader()?;
    if id.starts_with("_local/") {
        return Ok(match reader.get_local(id)? {
            Some(local) => {
                let mut obj = local.body.to_map();
                let mut out = Map::new();
                out.insert("_id".into(), Value::String(local.id.clone()));
                out.insert("_rev".into(), Value::String(local.rev.clone()));
                out.append(&mut obj);
                (Value::Object(out).to_string(), local.rev)
            }
            None => ("null".into(), String::new()),
        });
    }
    let opts = GetOptions {
        revs: true,
        ..GetOptions::default()
    };
    match reader.get(id, &opts) {
        Ok(read) if !read.deleted => Ok((
            settee_design::docs::stored_json(&read).to_string(),
            read.rev.to_string(),
        )),
        Ok(_) => Ok(("null".into(), String::new())),
        Err(settee_db::Error::NotFound(_)) => Ok(("null".into(), String::new())),
        Err(e) => Err(e.into()),
    }
}

pub async fn show(
    app: &App,
    req: &mut Req,
    db_name: &str,
    ddoc: &str,
    rest: &[&str],
    segments: &[&str],
) -> ApiResult<Response> {
    let db = app.db(db_name)?;
    require_db_reader(req)?;
    let (name, doc_id) = design_req::name_and_doc(rest, "show_error")?;
    let design = app.design.render_ddoc(&db.reader()?, ddoc, "shows", name)?;
    let (doc, doc_rev) = match &doc_id {
        Some(id) => doc_for_show(&db, id)?,
        None => ("null".into(), String::new()),
    };
    let body = req.body_bytes().await?;
    let js_req = design_req::for_db(
        app,
        req,
        &db,
        doc_id.as_deref(),
        segments,
        &body,
        NoBody::Undefined,
    )?;
    let etag = etag(&design, &doc_rev, req);
    if crate::render::none_match(req.header("if-none-match"), &etag) {
        return Ok(crate::render::not_modified(&etag));
    }
    let resp = app.design.show(&design, name, doc, &js_req).await?;
    external_response(
        &resp,
        &External {
            etag: Some(&etag),
            head: req.method == Method::HEAD,
            code: StatusCode::OK,
            negotiated: true,
            bare: false,
        },
    )
}

/// The show's ETag: a hash of what its answer depends on.
fn etag(design: &settee_js::DesignDoc, doc_rev: &str, req: &Req) -> String {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for part in [
        design.signature().as_str(),
        doc_rev,
        req.header("accept").unwrap_or_default(),
        req.uri.query().unwrap_or_default(),
        req.user.name.as_deref().unwrap_or_default(),
        &req.user.roles.join(","),
    ] {
        h.update(part.as_bytes());
        h.update(b"\0");
    }
    // 96 bits in base 36 (not hex, not a revision): opaque, as CouchDB's.
    let mut n = h.digest128() >> 32;
    let mut text = String::new();
    while n > 0 {
        let d = (n % 36) as u8;
        text.push(char::from(if d < 10 { b'0' + d } else { b'A' + d - 10 }));
        n /= 36;
    }
    format!("\"{text}\"")
}

/// A design function's response object as CouchDB sends it: `code`
/// (200), `headers`, and the last of `body` (text, `text/html`), `json`
/// (`application/json`) and `base64` (bytes, `application/binary`); none
/// of them: an empty `application/json` body.
/// How [`external_response`] sends a response object.
pub struct External<'a> {
    /// The server's ETag (replacing any the function set).
    pub etag: Option<&'a str>,
    /// A HEAD request: no body.
    pub head: bool,
    /// The status when the object names none.
    pub code: StatusCode,
    /// A show's answer: `Vary: Accept` and a sandboxing CSP.
    pub negotiated: bool,
    /// No default `Content-Type` (a rewrite function's direct answer).
    pub bare: bool,
}

pub fn external_response(resp: &Value, how: &External<'_>) -> ApiResult<Response> {
    let (etag, head) = (how.etag, how.head);
    let obj = resp.as_object().cloned().unwrap_or_default();
    let code = obj
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(how.code);
    let mut data: Vec<u8> = Vec::new();
    let mut ctype = "application/json";
    let mut revalidate = false;
    for (k, v) in &obj {
        match k.as_str() {
            "body" => {
                data = match v {
                    Value::String(s) => s.clone().into_bytes(),
                    other => other.to_string().into_bytes(),
                };
                ctype = "text/html; charset=utf-8";
                revalidate = false;
            }
            "json" => {
                data = v.to_string().into_bytes();
                ctype = "application/json";
                revalidate = true;
            }
            "base64" => {
                let text = v.as_str().unwrap_or_default();
                data = base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| {
                        ApiError::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "render_error",
                            format!("invalid base64 in the response: {e}"),
                        )
                    })?;
                ctype = "application/binary";
                revalidate = false;
            }
            _ => {}
        }
    }
    let mut b = Response::builder().status(code);
    let mut has_ctype = false;
    let mut has_vary = false;
    if let Some(Value::Object(headers)) = obj.get("headers") {
        for (name, value) in headers {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&text),
            ) else {
                continue;
            };
            // The server's own ETag replaces the function's, as CouchDB's.
            if etag.is_some() && n == axum::http::header::ETAG {
                continue;
            }
            has_ctype |= n == axum::http::header::CONTENT_TYPE;
            has_vary |= n == axum::http::header::VARY;
            b = b.header(n, v);
        }
    }
    if !has_ctype && !how.bare {
        b = b.header("Content-Type", ctype);
    }
    if how.negotiated && !has_vary {
        b = b.header("Vary", "Accept");
    }
    if revalidate {
        b = b.header("Cache-Control", "must-revalidate");
    }
    if how.negotiated {
        b = b.header("Content-Security-Policy", "sandbox");
    }
    if let Some(tag) = etag {
        b = b.header("ETag", tag);
    }
    let body = if head {
        AxBody::empty()
    } else {
        AxBody::from(data)
    };
    b.body(body).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "render_error",
            e.to_string(),
        )
    })
}

/// A design function's failure where a thrown `not_found` keeps its
/// reason (updates, rewrites); otherwise as a show's.
pub(crate) fn thrown_error(e: settee_design::DesignError) -> ApiError {
    match e {
        settee_design::DesignError::Render(settee_js::JsError::NotFound { reason }) => {
            ApiError::not_found(reason)
        }
        other => other.into(),
    }
}
