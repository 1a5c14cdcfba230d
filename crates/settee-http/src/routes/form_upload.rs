//! `POST /{db}/{docid}` with a `multipart/form-data` body: an HTML form
//! that adds files to a document as attachments (CouchDB's form upload).
//! The form's `_rev` field names the revision to update (none: a new
//! document); every `_attachments` file field with a `Content-Type` (as
//! browsers and curl send every file) becomes an attachment named by its
//! file name, of that type; other fields, and file parts without a type,
//! are ignored, as CouchDB ignores them. The answer is a write's
//! (`{"ok":true,"id","rev"}`, the revision in `ETag`) without `Location`.
//!
//! Invariants:
//! - The CSRF check comes first, as CouchDB's: a `Referer` header is
//!   required and its host (and port) must be the request's `Host`.
//! - The new attachments come first in the document, in form order, then
//!   the revision's other attachments in their order (so the revision id
//!   is CouchDB's for the same upload); a same-named one is replaced.
//! - Each file streams to storage as it arrives, bounded by
//!   `max_attachment_size`; the text fields by `max_http_request_size`;
//!   the document is then written as a JSON `PUT` with attachments is.

use axum::http::header;
use axum::response::Response;
use serde_json::{json, Map, Value};
use settee_core::att::{self, AttStub, BlobWrites};
use settee_core::name::DocKind;
use settee_db::atts::AttWriter;
use settee_db::{Database, GetOptions};

use super::att::{multipart_boundary, next_chunk, next_part, too_large};
use crate::error::{ApiError, ApiResult};
use crate::request::{parse_rev, Req};
use crate::state::App;
use crate::upload::Upload;

/// The largest text field (`_rev`, or one ignored) read into memory.
const MAX_FIELD: usize = 64 * 1024;

/// The host and port a `Referer` URL names (`scheme://[user@]host[:port]/…`);
/// none when it is not an absolute URL.
fn referer_host(referer: &str) -> Option<&str> {
    let (_, after) = referer.split_once("://")?;
    let authority = after.split(['/', '?', '#']).next().unwrap_or("");
    Some(authority.rsplit('@').next().unwrap_or(authority))
}

/// CouchDB's check of a form post's `Referer` against `Host`.
fn check_referer(req: &Req) -> ApiResult<()> {
    let Some(referer) = req.header(header::REFERER) else {
        return Err(ApiError::bad_request("Referer header required."));
    };
    let host = req.header(header::HOST).unwrap_or("");
    match referer_host(referer) {
        Some(h) if !h.is_empty() && h.eq_ignore_ascii_case(host) => Ok(()),
        _ => Err(ApiError::bad_request("Referer header must match host.")),
    }
}

pub(crate) fn is_form_data(req: &Req) -> bool {
    req.content_type_is("multipart/form-data")
}

/// The document's body (without attachments) and attachment names at the
/// revision the form names, or an empty body for a new document.
fn current(
    db: &Database,
    id: &str,
    rev: Option<&str>,
) -> ApiResult<(Map<String, Value>, Vec<String>)> {
    let Some(rev) = rev else {
        return Ok((Map::new(), Vec::new()));
    };
    let rev = parse_rev(rev)?;
    let reader = db.reader()?;
    let opts = GetOptions {
        rev: Some(rev),
        ..GetOptions::default()
    };
    let corrupt = |e: serde_json::Error| ApiError::from(settee_db::Error::Corrupt(e.to_string()));
    let read = match reader.get(id, &opts) {
        Ok(read) => read,
        // A revision whose body is gone: the update cannot apply to it
        // when the document is there, and names nothing when it is not.
        Err(settee_db::Error::NotFound(_)) => {
            return match reader.get(id, &GetOptions::default()) {
                Ok(_) => Err(ApiError::conflict()),
                Err(settee_db::Error::NotFound(_)) => Err(ApiError::not_found("missing")),
                Err(e) => Err(e.into()),
            };
        }
        Err(e) => return Err(e.into()),
    };
    let (stubs, rest) = att::split_stored(read.body.as_str()).map_err(corrupt)?;
    // A stored body that does not parse is corruption, never an empty
    // document to write back over it.
    let body: Map<String, Value> = serde_json::from_str(&rest).map_err(corrupt)?;
    Ok((body, stubs.into_iter().map(|(name, _)| name).collect()))
}

/// The checks of a form post before its document id is looked at: the
/// `Referer`, then the content type.
pub fn check_form(req: &Req) -> ApiResult<()> {
    check_referer(req)?;
    if !is_form_data(req) {
        return Err(ApiError::new(
            axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "bad_content_type",
            "Content-Type must be multipart/form-data",
        ));
    }
    Ok(())
}

/// The handler (see the module doc).
pub async fn post(app: &App, req: &mut Req, db: &Database, id: &str) -> ApiResult<Response> {
    check_form(req)?;
    let kind = super::partition::check_write_id(db, id)?;
    if kind == DocKind::Local {
        return Err(ApiError::method_not_allowed("GET,HEAD,PUT,DELETE,COPY"));
    }
    super::doc::authorize_write(req, kind)?;
    let ct = req.header(header::CONTENT_TYPE).unwrap_or("").to_string();
    let boundary = multipart_boundary(&ct)
        .ok_or_else(|| ApiError::bad_request("multipart/form-data needs a boundary"))?;
    let settings = std::sync::Arc::clone(&req.settings);
    let body = req
        .take_body()
        .ok_or_else(|| ApiError::bad_request("no body"))?;
    let mut mp = multer::Multipart::new(body.into_data_stream(), boundary);
    let mut rev: Option<String> = None;
    let mut files: Vec<(String, AttStub, BlobWrites)> = Vec::new();
    while let Some(mut field) = next_part(&mut mp).await? {
        let name = field.name().unwrap_or("").to_string();
        let file = field.file_name().map(str::to_string);
        let ct = field.content_type().map(|m| m.to_string());
        match (name.as_str(), file, ct) {
            ("_attachments", Some(file), Some(ct)) if !file.is_empty() => {
                let level = settings.att_compression.level_for(&ct);
                let mut up = Upload::start(AttWriter::new(&db.blobs(), level)?);
                while let Some(c) = next_chunk(&mut field).await? {
                    up.write(c).await?;
                    if up.length() > settings.max_attachment_size {
                        return Err(too_large(&file));
                    }
                }
                let (stub, writes) = up.finish(ct).await?;
                files.retain(|(n, _, _)| *n != file);
                files.push((file, stub, writes));
            }
            _ => {
                let mut text = Vec::new();
                while let Some(c) = next_chunk(&mut field).await? {
                    text.extend_from_slice(&c);
                    if text.len() > MAX_FIELD {
                        return Err(ApiError::request_too_large());
                    }
                }
                if name == "_rev" {
                    rev = Some(String::from_utf8_lossy(&text).into_owned());
                }
            }
        }
    }
    drop(mp);
    req.body_finished();
    let (mut map, existing) = current(db, id, rev.as_deref())?;
    let mut atts = Map::new();
    for (name, stub, _) in &files {
        atts.insert(
            name.clone(),
            json!({"follows": true, "content_type": stub.content_type, "length": stub.length}),
        );
    }
    for name in existing {
        if !atts.contains_key(&name) {
            atts.insert(name, json!({"stub": true}));
        }
    }
    map.remove("_attachments");
    if let Some(rev) = rev {
        map.insert("_rev".into(), Value::String(rev));
    }
    if !atts.is_empty() {
        map.insert("_attachments".into(), Value::Object(atts));
    }
    let mut resp = super::doc::write_with_atts(app, req, db, id, map, files).await?;
    resp.headers_mut().remove(header::LOCATION);
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::referer_host;

    #[test]
    fn a_referer_names_its_host_and_port() {
        assert_eq!(
            referer_host("http://127.0.0.1:5984/"),
            Some("127.0.0.1:5984")
        );
        assert_eq!(referer_host("https://a:b@Host:1/x?y#z"), Some("Host:1"));
        assert_eq!(referer_host("http://h?q"), Some("h"));
        assert_eq!(referer_host("127.0.0.1:5984"), None);
    }
}
