//! Single documents: GET/HEAD/PUT/DELETE/COPY `/{db}/{docid}` (normal,
//! `_design/…` and `_local/…` ids) and the write behind `POST /{db}`.
//!
//! Invariants:
//! - The revision being edited comes from `?rev=`, `If-Match` or the body's
//!   `_rev`; when two of them disagree the request is a 400 and nothing is
//!   written.
//! - A write is acknowledged (201) only after the engine reports it at the
//!   requested durability; `batch=ok` answers 202 without a revision.
//! - `_local` documents bypass revision trees (engine `put_local`), never
//!   appear in changes, and have `0-N` revisions.
//! - Documents are rendered from the stored body text without re-parsing.

use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use percent_encoding::percent_decode_str;
use rand::RngCore;
use serde_json::{Map, Value};
use settee_core::doc::{Body, Doc};
use settee_core::name::{validate_doc_id, DocKind};
use settee_core::rev::Rev;
use settee_db::{Database, DocRead, Durability, GetOptions, OpenRev, OpenRevs, UpdateOptions};

use super::allow_names;
use crate::auth::{require_db_reader, require_db_writer, require_design_writer};
use crate::error::{ApiError, ApiResult};
use crate::render::{self, json_response, push_rev, push_str, Extras};
use crate::request::{local_parts, parse_json_bytes, parse_rev, Req};
use crate::state::App;

const DOC_METHODS: &[&str] = &["GET", "HEAD", "PUT", "DELETE", "COPY"];
const DOC_ALLOW: &str = "COPY,DELETE,GET,HEAD,PUT";

pub async fn handle(app: &App, req: &mut Req, db_name: &str, id: String) -> ApiResult<Response> {
    allow_names(req, DOC_METHODS, DOC_ALLOW)?;
    let kind = validate_doc_id(&id)?;
    let db = app.db(db_name)?;
    match req.method {
        Method::GET | Method::HEAD => {
            require_db_reader(&req.settings, &req.user)?;
            if kind == DocKind::Local {
                get_local(&db, &id)
            } else {
                get(app, req, &db, &id)
            }
        }
        Method::PUT => {
            let value = req.json_value().await?;
            let Value::Object(map) = value else {
                return Err(ApiError::bad_request("Document must be a JSON object"));
            };
            write(app, req, &db, &id, map).await
        }
        Method::DELETE => delete(app, req, &db, &id, kind).await,
        _ => copy(app, req, &db, &id).await,
    }
}

/// `{"ok":true,"id":…,"rev":…}`.
fn ok_rev(status: StatusCode, id: &str, rev: &str) -> Response {
    let mut out = String::with_capacity(48 + id.len() + rev.len());
    out.push_str("{\"ok\":true,\"id\":");
    push_str(&mut out, id);
    out.push_str(",\"rev\":");
    push_str(&mut out, rev);
    out.push('}');
    let mut resp = json_response(status, out);
    if let Some(tag) = render::etag(rev) {
        resp.headers_mut().insert(header::ETAG, tag);
    }
    resp
}

fn accepted(id: &str) -> Response {
    let mut out = String::from("{\"ok\":true,\"id\":");
    push_str(&mut out, id);
    out.push('}');
    json_response(StatusCode::ACCEPTED, out)
}

/// The revision named by `?rev=` or `If-Match`.
fn explicit_rev(req: &Req) -> ApiResult<Option<String>> {
    let from_query = req.query.get("rev");
    let from_header = req
        .header(header::IF_MATCH)
        .map(|s| s.trim().trim_matches('"'));
    match (from_query, from_header) {
        (Some(a), Some(b)) if a != b => Err(ApiError::bad_request(
            "Document rev and etag have different values",
        )),
        (a, b) => Ok(a.or(b).map(str::to_string)),
    }
}

/// Puts the explicit revision into the body, refusing disagreement.
fn merge_rev(req: &Req, map: &mut Map<String, Value>) -> ApiResult<()> {
    if let Some(rev) = explicit_rev(req)? {
        match map.get("_rev") {
            Some(Value::String(body_rev)) if *body_rev != rev => {
                return Err(ApiError::bad_request(
                    "Document rev from request body and query string have different values",
                ))
            }
            _ => {
                map.insert("_rev".to_string(), Value::String(rev));
            }
        }
    }
    Ok(())
}

fn options(durability: Durability, new_edits: bool) -> UpdateOptions {
    UpdateOptions {
        new_edits,
        all_or_nothing: false,
        durability: Some(durability),
    }
}

/// Writes one document whose id is known (PUT, POST /db).
pub async fn write(
    app: &App,
    req: &mut Req,
    db: &Database,
    id: &str,
    mut map: Map<String, Value>,
) -> ApiResult<Response> {
    let kind = validate_doc_id(id)?;
    match kind {
        DocKind::Design => require_design_writer(&req.user)?,
        _ => require_db_writer(&req.settings, &req.user)?,
    }
    merge_rev(req, &mut map)?;
    if kind == DocKind::Local {
        return write_local(req, db, id, map).await;
    }
    map.insert("_id".to_string(), Value::String(id.to_string()));
    let new_edits = req.query.bool("new_edits")?.unwrap_or(true);
    let doc = Doc::from_json(Value::Object(map), || id.to_string())?;
    if doc.body.len() as u64 > req.settings.max_document_size {
        return Err(ApiError::doc_too_large(id));
    }
    let Some(rev) = write_one(app, req, db, doc, new_edits).await? else {
        return Ok(accepted(id));
    };
    let mut resp = ok_rev(StatusCode::CREATED, id, &rev.to_string());
    if let Some(loc) = super::db::location(req, db.name(), Some(id)) {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(resp)
}

/// Writes one document with the request's durability; None in batch mode
/// (accepted, not yet applied).
async fn write_one(
    app: &App,
    req: &Req,
    db: &Database,
    doc: Doc,
    new_edits: bool,
) -> ApiResult<Option<Rev>> {
    let id = doc.id.clone();
    let durability = req.durability();
    let mut results = db
        .update_async(vec![doc], options(durability, new_edits))
        .await?;
    app.stats
        .docs_written
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if durability == Durability::Batch {
        return Ok(None);
    }
    match results.pop() {
        Some(Ok(rev)) => Ok(Some(rev)),
        Some(Err(f)) => Err(ApiError::from_doc_failure(&f, &id)),
        None => Err(ApiError::from(settee_db::Error::Closed)),
    }
}

async fn write_local(
    req: &Req,
    db: &Database,
    id: &str,
    map: Map<String, Value>,
) -> ApiResult<Response> {
    let (rev, body) = local_parts(map)?;
    if body
        .as_ref()
        .is_some_and(|b| b.len() as u64 > req.settings.max_document_size)
    {
        return Err(ApiError::doc_too_large(id));
    }
    match db
        .put_local_async(id, rev, body, Some(req.durability()))
        .await?
    {
        Ok(rev) => Ok(ok_rev(StatusCode::CREATED, id, &rev)),
        Err(f) => Err(ApiError::from_doc_failure(&f, id)),
    }
}

fn get_local(db: &Database, id: &str) -> ApiResult<Response> {
    let doc = db
        .reader()?
        .get_local(id)?
        .ok_or_else(|| ApiError::not_found("missing"))?;
    let mut out = String::with_capacity(doc.body.len() + 64);
    render::push_local_doc(&mut out, &doc.id, &doc.rev, &doc.body);
    let mut resp = json_response(StatusCode::OK, out);
    if let Some(tag) = render::etag(&doc.rev) {
        resp.headers_mut().insert(header::ETAG, tag);
    }
    Ok(resp)
}

/// Read options shared by document GET and `_bulk_get`.
pub struct ReadOpts {
    pub get: GetOptions,
    pub extras: Extras,
}

pub fn read_opts(req: &Req) -> ApiResult<ReadOpts> {
    let q = &req.query;
    let meta = q.flag("meta")?;
    Ok(ReadOpts {
        get: GetOptions {
            rev: q.rev()?,
            latest: q.flag("latest")?,
            revs: q.flag("revs")?,
            revs_info: q.flag("revs_info")? || meta,
            conflicts: q.flag("conflicts")? || meta,
            deleted_conflicts: q.flag("deleted_conflicts")? || meta,
        },
        extras: Extras {
            local_seq: q.flag("local_seq")? || meta,
        },
    })
}

fn get(app: &App, req: &Req, db: &Database, id: &str) -> ApiResult<Response> {
    let opts = read_opts(req)?;
    // The winning revision alone is one storage read (its body is inline in
    // the document's record): no snapshot needed for it.
    let one_read = opts.get.rev.is_none() && req.query.get("open_revs").is_none();
    let reader = if one_read {
        db.latest_reader()?
    } else {
        db.reader()?
    };
    app.stats
        .docs_read
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if let Some(spec) = req.query.get("open_revs") {
        let which = if spec == "all" {
            OpenRevs::AllLeaves
        } else {
            let v = parse_json_bytes(spec.as_bytes())
                .map_err(|_| ApiError::bad_request("Invalid open_revs"))?;
            let list = v.as_array().ok_or_else(|| {
                ApiError::bad_request("open_revs must be \"all\" or a JSON array")
            })?;
            OpenRevs::Revs(
                list.iter()
                    .map(|r| {
                        r.as_str()
                            .ok_or_else(|| ApiError::bad_request("Invalid rev format"))
                            .and_then(parse_rev)
                    })
                    .collect::<ApiResult<Vec<Rev>>>()?,
            )
        };
        let results = reader.open_revs(id, &which, &opts.get)?;
        if matches!(which, OpenRevs::AllLeaves) && results.is_empty() {
            return Err(ApiError::not_found("missing"));
        }
        return Ok(open_revs_response(req, &results, opts.extras));
    }
    let doc = reader.get(id, &opts.get)?;
    let tag = format!("\"{}\"", doc.rev);
    if req
        .header(header::IF_NONE_MATCH)
        .is_some_and(|v| v.trim() == tag)
    {
        let mut resp = Response::new(axum::body::Body::empty());
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        if let Ok(v) = HeaderValue::from_str(&tag) {
            resp.headers_mut().insert(header::ETAG, v);
        }
        return Ok(resp);
    }
    let mut resp = json_response(StatusCode::OK, render::doc_string(&doc, opts.extras));
    if let Ok(v) = HeaderValue::from_str(&tag) {
        resp.headers_mut().insert(header::ETAG, v);
    }
    Ok(resp)
}

/// Appends `{"ok":doc}` or `{"missing":rev}`.
pub fn push_open_rev(out: &mut String, r: &OpenRev, extras: Extras) {
    match r {
        OpenRev::Found(d) => {
            out.push_str("{\"ok\":");
            render::push_doc(out, d, extras);
            out.push('}');
        }
        OpenRev::Missing(rev) => {
            out.push_str("{\"missing\":");
            push_rev(out, rev);
            out.push('}');
        }
    }
}

fn open_revs_response(req: &Req, results: &[OpenRev], extras: Extras) -> Response {
    if req.accepts_json() {
        let mut out = String::from("[");
        for (i, r) in results.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_open_rev(&mut out, r, extras);
        }
        out.push(']');
        return json_response(StatusCode::OK, out);
    }
    let mut b = [0u8; 16];
    rand::rng().fill_bytes(&mut b);
    let boundary = hex::encode(b);
    let mut out = String::new();
    for r in results {
        out.push_str("--");
        out.push_str(&boundary);
        match r {
            OpenRev::Found(d) => {
                out.push_str("\r\nContent-Type: application/json\r\n\r\n");
                render::push_doc(&mut out, d, extras);
            }
            OpenRev::Missing(rev) => {
                out.push_str(
                    "\r\nContent-Type: application/json; error=\"true\"\r\n\r\n{\"missing\":",
                );
                push_rev(&mut out, rev);
                out.push('}');
            }
        }
        out.push_str("\r\n");
    }
    out.push_str("--");
    out.push_str(&boundary);
    out.push_str("--");
    let mut resp = json_response(StatusCode::OK, out);
    if let Ok(v) = HeaderValue::from_str(&format!("multipart/mixed; boundary=\"{boundary}\"")) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

async fn delete(
    app: &App,
    req: &mut Req,
    db: &Database,
    id: &str,
    kind: DocKind,
) -> ApiResult<Response> {
    match kind {
        DocKind::Design => require_design_writer(&req.user)?,
        _ => require_db_writer(&req.settings, &req.user)?,
    }
    let rev = explicit_rev(req)?;
    if kind == DocKind::Local {
        return match db
            .put_local_async(id, rev, None, Some(req.durability()))
            .await?
        {
            Ok(rev) => Ok(ok_rev(StatusCode::OK, id, &rev)),
            Err(f) => Err(ApiError::from_doc_failure(&f, id)),
        };
    }
    // Like CouchDB: a missing or deleted document is a 404 before any rev check.
    db.reader()?.get(id, &GetOptions::default())?;
    let rev = rev.map(|r| parse_rev(&r)).transpose()?;
    let doc = Doc {
        id: id.to_string(),
        rev,
        deleted: true,
        revisions: None,
        body: Body::empty(),
    };
    match write_one(app, req, db, doc, true).await? {
        Some(rev) => Ok(ok_rev(StatusCode::OK, id, &rev.to_string())),
        None => Ok(accepted(id)),
    }
}

async fn copy(app: &App, req: &mut Req, db: &Database, id: &str) -> ApiResult<Response> {
    require_db_reader(&req.settings, &req.user)?;
    let dest = req
        .header("destination")
        .ok_or_else(|| ApiError::bad_request("Destination header is mandatory for COPY."))?;
    let (dest_id, dest_rev) = match dest.split_once("?rev=") {
        Some((d, r)) => (d, Some(r.to_string())),
        None => (dest, None),
    };
    let dest_id = percent_decode_str(dest_id)
        .decode_utf8()
        .map_err(|_| ApiError::bad_request("Destination is not valid UTF-8"))?
        .into_owned();
    let dest_kind = validate_doc_id(&dest_id)?;
    match dest_kind {
        DocKind::Design => require_design_writer(&req.user)?,
        _ => require_db_writer(&req.settings, &req.user)?,
    }
    let reader = db.reader()?;
    let body = if validate_doc_id(id)? == DocKind::Local {
        reader
            .get_local(id)?
            .ok_or_else(|| ApiError::not_found("missing"))?
            .body
    } else {
        let opts = GetOptions {
            rev: req.query.rev()?,
            ..GetOptions::default()
        };
        let src: DocRead = reader.get(id, &opts)?;
        src.body
    };
    drop(reader);
    if dest_kind == DocKind::Local {
        return match db
            .put_local_async(&dest_id, dest_rev, Some(body), Some(req.durability()))
            .await?
        {
            Ok(rev) => Ok(ok_rev(StatusCode::CREATED, &dest_id, &rev)),
            Err(f) => Err(ApiError::from_doc_failure(&f, &dest_id)),
        };
    }
    let rev = dest_rev.map(|r| parse_rev(&r)).transpose()?;
    let doc = Doc {
        id: dest_id.clone(),
        rev,
        deleted: false,
        revisions: None,
        body,
    };
    let mut results = db
        .update_async(vec![doc], options(req.durability(), true))
        .await?;
    app.stats
        .docs_written
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    match results.pop() {
        Some(Ok(rev)) => Ok(ok_rev(StatusCode::CREATED, &dest_id, &rev.to_string())),
        Some(Err(f)) => Err(ApiError::from_doc_failure(&f, &dest_id)),
        None => Ok(accepted(&dest_id)),
    }
}
