//! Single documents: GET/HEAD/PUT/DELETE/COPY `/{db}/{docid}` (normal,
//! `_design/…` and `_local/…` ids) and the write behind `POST /{db}`.
//!
//! Invariants:
//! - The revision being edited comes from `?rev=`, `If-Match` or the body's
//!   `_rev`; each one named must be a revision (every `rev=` of the query),
//!   and when two of them disagree the request is a 400 and nothing is
//!   written (the body's against `?rev=` first, then against `If-Match`,
//!   with CouchDB's reasons). COPY's `Destination` names the target
//!   relative to the database (`+` a space, `?NAME=REV` its revision).
//! - A write is acknowledged (201, or 200 when it deletes) only after the
//!   engine reports it at the requested durability; `batch=ok` answers 202
//!   without a revision.
//! - As in CouchDB, an interactive edit never extends a deleted document:
//!   once every leaf is deleted, only a write without a revision (and not
//!   itself a deletion) recreates it; anything else is a 409 and nothing is
//!   written. (Checked here, against the latest state, before the write.)
//! - Design documents are checked ([`settee_core::design`]) before they
//!   are written; a malformed one is a 400 and nothing is written.
//! - Every other document write (PUT, POST, DELETE, COPY, `new_edits=false`)
//!   passes the database's `validate_doc_update` functions first
//!   (settee-design), before the conflict checks, as in CouchDB; a refusal
//!   writes nothing. A refused `batch=ok` PUT or POST is still answered
//!   202 (CouchDB validates after accepting it); a DELETE is not (CouchDB
//!   ignores `batch=ok` there).
//! - `_local` documents bypass revision trees (engine `put_local`), never
//!   appear in changes, and have `0-N` revisions with no revision check
//!   (CouchDB 3's rule); they cannot be read by revision.
//! - A document GET sends an `ETag` (and honours `If-None-Match`) only when
//!   the body carries no meta member (`_revs_info`, `_conflicts`,
//!   `_deleted_conflicts`, `_local_seq`), as CouchDB; a `POST /{db}` sends
//!   none.
//! - An id no document can have is refused (400 `illegal_docid`) only by a
//!   PUT; GET, HEAD, DELETE and COPY find nothing (404 `missing`), as in
//!   CouchDB, which checks ids only when it writes.
//! - Documents are rendered from the stored body text without re-parsing.

use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use percent_encoding::percent_decode_str;
use serde_json::{Map, Value};
use settee_core::att::{AttIn, AttKind};
use settee_core::design;
use settee_core::doc::{Body, Doc};
use settee_core::name::{validate_doc_id, DocKind};
use settee_core::rev::Rev;
use settee_core::revtree::RevTree;
use settee_db::{Database, DocRead, Durability, GetOptions, OpenRev, OpenRevs, UpdateOptions};
use settee_design::DesignError;

use super::allow_names;
use crate::auth::{require_db_admin, require_db_reader, require_db_writer, write_ctx};
use crate::error::{ApiError, ApiResult};
use crate::render::{self, json_response, push_rev, push_str, Extras};
use crate::request::{local_parts, parse_json_bytes, parse_rev, Req};
use crate::state::App;
use settee_db::json::AttView;

const DOC_METHODS: &[&str] = &["GET", "HEAD", "PUT", "DELETE", "COPY", "POST"];
// CouchDB's list (POST is its form upload of attachments).
const DOC_ALLOW: &str = "DELETE,GET,HEAD,POST,PUT,COPY";

pub async fn handle(app: &App, req: &mut Req, db_name: &str, id: String) -> ApiResult<Response> {
    allow_names(req, DOC_METHODS, DOC_ALLOW)?;
    // CouchDB's router: `/{db}/_local` and `/{db}/_local/` name no document.
    if id == "_local" || id == "_local/" {
        return Err(ApiError::bad_request("Invalid _local document id."));
    }
    let kind = match validate_doc_id(&id) {
        Ok(kind) => kind,
        // Only a write refuses the id; a read (DELETE and COPY read first)
        // finds no document by it.
        Err(e) if req.method == Method::PUT => return Err(e.into()),
        // A form upload's own checks come first.
        Err(e) if req.method == Method::POST => {
            app.db(db_name)?;
            super::form_upload::check_form(req)?;
            return Err(e.into());
        }
        Err(_) => {
            app.db(db_name)?;
            require_db_reader(req)?;
            return Err(ApiError::not_found("missing"));
        }
    };
    let db = app.db(db_name)?;
    match req.method {
        Method::GET | Method::HEAD => {
            require_db_reader(req)?;
            if kind == DocKind::Local {
                get_local(req, &db, &id)
            } else {
                get(app, req, &db, &id)
            }
        }
        Method::PUT if super::att::is_multipart_related(req) => {
            super::att::put_multipart(app, req, &db, &id).await
        }
        Method::PUT => {
            let value = req.json_value().await?;
            let Value::Object(map) = value else {
                return Err(ApiError::bad_request("Document must be a JSON object"));
            };
            write(app, req, &db, &id, map).await
        }
        Method::DELETE => delete(app, req, &db, &id, kind).await,
        Method::POST => super::form_upload::post(app, req, &db, &id).await,
        _ => copy(app, req, &db, &id).await,
    }
}

/// `{"ok":true,"id":…,"rev":…}`, with the revision as `ETag` unless the
/// request is a `POST /{db}` (CouchDB sends none there; its form upload,
/// a `POST /{db}/{docid}`, has one).
fn ok_rev(req: &Req, status: StatusCode, id: &str, rev: &str) -> Response {
    let mut out = String::with_capacity(48 + id.len() + rev.len());
    out.push_str("{\"ok\":true,\"id\":");
    push_str(&mut out, id);
    out.push_str(",\"rev\":");
    push_str(&mut out, rev);
    out.push('}');
    let mut resp = json_response(status, out);
    if req.method != Method::POST || super::form_upload::is_form_data(req) {
        if let Some(tag) = render::etag(rev) {
            resp.headers_mut().insert(header::ETAG, tag);
        }
    }
    resp
}

/// [`ok_rev`] for a write of `id`: 200 when it deleted, else 201, with
/// the document's `Location`.
fn written(req: &Req, db: &Database, id: &str, rev: &str, deleted: bool) -> Response {
    let status = if deleted {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let mut resp = ok_rev(req, status, id, rev);
    if let Some(loc) = super::db::location(req, db.name(), Some(id)) {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    resp
}

/// CouchDB's 413 for a document over `max_document_size`: its reason is
/// the `_id` member of the body as sent (empty when there is none, as for
/// most PUTs).
fn too_large(map: &Map<String, Value>) -> ApiError {
    ApiError::doc_too_large(map.get("_id").and_then(Value::as_str).unwrap_or(""))
}

/// Refuses an interactive edit of a document whose every leaf is deleted
/// (true), unless it is a plain recreation: no revision and not a
/// deletion. CouchDB's `couch_db_updater` answers such edits `conflict`.
fn edits_deleted(db: &Database, doc: &Doc) -> ApiResult<bool> {
    if doc.rev.is_none() && !doc.deleted {
        return Ok(false);
    }
    let tree = db.latest_reader()?.rev_tree(&doc.id)?;
    Ok(tree
        .as_ref()
        .and_then(|t| t.winner())
        .is_some_and(|w| w.deleted))
}

fn accepted(id: &str) -> Response {
    let mut out = String::from("{\"ok\":true,\"id\":");
    push_str(&mut out, id);
    out.push('}');
    json_response(StatusCode::ACCEPTED, out)
}

/// The revision named by `?rev=` and the one named by `If-Match`, each
/// checked to be a revision when `check` (a `_local` document's `0-N` is
/// not one).
fn named_revs(req: &Req, check: bool) -> ApiResult<(Option<&str>, Option<&str>)> {
    let from_query = req.query.get("rev");
    let from_header = req
        .header(header::IF_MATCH)
        .map(|s| s.trim().trim_matches('"'));
    if check {
        // Every `rev=` of the query string, not only the last one used.
        let queried = req.query.pairs().iter().filter(|(k, _)| k == "rev");
        for r in queried.map(|(_, v)| v.as_str()).chain(from_header) {
            parse_rev(r)?;
        }
    }
    Ok((from_query, from_header))
}

fn etag_differs() -> ApiError {
    ApiError::bad_request("Document rev and etag have different values")
}

/// The revision named by `?rev=` or `If-Match` (checked as [`named_revs`]
/// does), refusing two different ones.
fn explicit_rev(req: &Req, check: bool) -> ApiResult<Option<String>> {
    match named_revs(req, check)? {
        (Some(a), Some(b)) if a != b => Err(etag_differs()),
        (a, b) => Ok(a.or(b).map(str::to_string)),
    }
}

/// Puts the explicit revision into the body, refusing disagreement as
/// CouchDB does: every revision named must be one, then the body's is
/// compared with `?rev=`, and the one of those with `If-Match`. A
/// `_local` document's revisions (`0-N`) are compared, not checked.
fn merge_rev(req: &Req, map: &mut Map<String, Value>, local: bool) -> ApiResult<()> {
    let (from_query, from_header) = named_revs(req, !local)?;
    let from_body = match map.get("_rev") {
        Some(Value::String(r)) if local => Some(r.as_str()),
        Some(Value::String(r)) => Some(parse_rev(r).map(|_| r.as_str())?),
        // `"_rev": null` too, as CouchDB.
        Some(_) if !local => return Err(ApiError::bad_request("Invalid rev format")),
        _ => None,
    };
    if let (Some(b), Some(q)) = (from_body, from_query) {
        if b != q {
            return Err(ApiError::bad_request(
                "Document rev from request body and query string have different values",
            ));
        }
    }
    let rev = from_body.or(from_query);
    if let (Some(r), Some(h)) = (rev, from_header) {
        if r != h {
            return Err(etag_differs());
        }
    }
    if from_body.is_none() {
        if let Some(r) = rev.or(from_header) {
            map.insert("_rev".to_string(), Value::String(r.to_string()));
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
    map: Map<String, Value>,
) -> ApiResult<Response> {
    write_with_atts(app, req, db, id, map, Vec::new()).await
}

/// [`write`] of a document whose `follows` attachments are already
/// stored (`stored`, by name: a multipart body's parts).
pub async fn write_with_atts(
    app: &App,
    req: &mut Req,
    db: &Database,
    id: &str,
    mut map: Map<String, Value>,
    stored: Vec<(
        String,
        settee_core::att::AttStub,
        settee_core::att::BlobWrites,
    )>,
) -> ApiResult<Response> {
    let kind = super::partition::check_write_id(db, id)?;
    authorize_write(req, kind)?;
    // The path names the document, but a body's `_id` must still be one.
    match map.get("_id") {
        None | Some(Value::String(_)) if map.get("_id").and_then(Value::as_str) != Some("") => {}
        Some(Value::String(_)) => return Err(settee_core::name::NameError::EmptyDocId.into()),
        _ => return Err(settee_core::name::NameError::NotString.into()),
    }
    merge_rev(req, &mut map, kind == DocKind::Local)?;
    // As CouchDB reads it: the first `new_edits`, off only when `false`.
    let new_edits = req.query.all("new_edits").next() != Some("false");
    if kind == DocKind::Local {
        return write_local(req, db, id, map, new_edits).await;
    }
    match save(app, req, db, id, kind, map, stored, new_edits).await? {
        Saved::Written(rev, deleted) => Ok(written(req, db, id, &rev.to_string(), deleted)),
        Saved::Accepted => Ok(accepted(id)),
    }
}

/// Who may write a document of this kind: db admins for design
/// documents, writers (members) for the others.
pub(crate) fn authorize_write(req: &Req, kind: DocKind) -> ApiResult<()> {
    match kind {
        DocKind::Design => require_db_admin(req),
        _ => require_db_writer(req),
    }
}

/// What [`save`] did.
pub(crate) enum Saved {
    /// The new revision, and whether it is a deletion.
    Written(Rev, bool),
    /// Batch mode: accepted, not yet applied.
    Accepted,
}

/// Stores one (non-`_local`) document `map` as `id`, its writer already
/// authorized: the `_users`/`_replicator` rules, size limits, attachments
/// already stored (`stored`), design-document checks, the database's
/// `validate_doc_update` functions, then the write.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn save(
    app: &App,
    req: &Req,
    db: &Database,
    id: &str,
    kind: DocKind,
    mut map: Map<String, Value>,
    stored: Vec<(
        String,
        settee_core::att::AttStub,
        settee_core::att::BlobWrites,
    )>,
    new_edits: bool,
) -> ApiResult<Saved> {
    let too_large = too_large(&map);
    map.insert("_id".to_string(), Value::String(id.to_string()));
    let map = crate::auth::users_db_write(req, db, map, new_edits).await?;
    let map = crate::replicator_db::before_write(&req.user, db, map, new_edits)?;
    let mut doc = Doc::from_json(Value::Object(map), || id.to_string())?;
    if doc.body.len() as u64 > req.settings.max_document_size {
        return Err(too_large);
    }
    if let Some(atts) = doc.atts.as_mut() {
        super::att::attach_stored(atts, stored, new_edits)?;
        super::att::check_inline_sizes(&doc, req.settings.max_attachment_size)?;
    }
    if !new_edits && doc.rev.is_none() {
        return Err(ApiError::bad_request(
            "When `new_edits: false`, the document needs `_rev` or `_revisions` specified",
        ));
    }
    if kind == DocKind::Design {
        design::validate(&doc.body.to_map(), db.partitioned())?;
        super::view::check_design(app, &doc).await?;
    }
    let deleted = doc.deleted;
    if let Some(limit) = super::partition::size_limit(req, db) {
        super::partition::size_verdicts(db, vec![(id.to_string(), deleted)], limit)
            .await?
            .pop()
            .unwrap_or(Ok(()))?;
    }
    if let Err(e) = validate(app, req, db, &doc, new_edits).await {
        return match (req.durability(), e) {
            (Durability::Batch, DesignError::Refused(_)) => Ok(Saved::Accepted),
            (_, e) => Err(e.into()),
        };
    }
    if new_edits && edits_deleted(db, &doc)? {
        return match req.durability() {
            // CouchDB accepts a batch-mode write before it fails.
            Durability::Batch => Ok(Saved::Accepted),
            _ => Err(ApiError::conflict()),
        };
    }
    match write_one(app, req, db, doc, new_edits).await? {
        Some(rev) => Ok(Saved::Written(rev, deleted)),
        None => Ok(Saved::Accepted),
    }
}

/// Runs the database's `validate_doc_update` functions over one edit; Ok
/// at once (no JavaScript, no read) when it has none.
pub async fn validate(
    app: &App,
    req: &Req,
    db: &Database,
    doc: &Doc,
    new_edits: bool,
) -> Result<(), DesignError> {
    let Some(validators) = app.design.validators(db)? else {
        return Ok(());
    };
    let ctx = write_ctx(req);
    validators.validate(db, doc, new_edits, &ctx).await
}

/// Writes one document with the request's durability; None in batch mode
/// (accepted, not yet applied).
pub(crate) async fn write_one(
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

/// Writes a `_local` document: no revision check (the engine numbers the
/// new revision from the given one). With `new_edits=false` the answer
/// names the revision as sent, as CouchDB's does (the stored one is its
/// successor).
async fn write_local(
    req: &Req,
    db: &Database,
    id: &str,
    map: Map<String, Value>,
    new_edits: bool,
) -> ApiResult<Response> {
    let too_large = too_large(&map);
    let (rev, body) = local_parts(map)?;
    if body
        .as_ref()
        .is_some_and(|b| b.len() as u64 > req.settings.max_document_size)
    {
        return Err(too_large);
    }
    let given = rev.clone();
    let deleted = body.is_none();
    let durability = req.durability();
    match db.put_local_async(id, rev, body, Some(durability)).await? {
        Ok(_) if durability == Durability::Batch => Ok(accepted(id)),
        Ok(stored) => {
            let rev = match given {
                Some(given) if !new_edits => given,
                _ => stored,
            };
            Ok(written(req, db, id, &rev, deleted))
        }
        Err(f) => Err(ApiError::from_doc_failure(&f, id)),
    }
}

/// GET of a `_local` document. CouchDB keeps no revisions of them: `rev=`
/// and `open_revs=` (once they parse) find nothing, `revs=true` shows the
/// one revision, and the other options add nothing.
fn get_local(req: &Req, db: &Database, id: &str) -> ApiResult<Response> {
    if let Some(rev) = req.query.get("rev") {
        settee_core::doc::rev_parts(rev)?;
        return Err(ApiError::not_found("missing"));
    }
    if let Some(spec) = req.query.get("open_revs") {
        parse_open_revs(spec)?;
        return Err(ApiError::not_found("missing"));
    }
    let doc = db
        .reader()?
        .get_local(id)?
        .ok_or_else(|| ApiError::not_found("missing"))?;
    let mut out = String::with_capacity(doc.body.len() + 64);
    let revs = req.query.get("revs") == Some("true");
    render::push_local_doc_with(&mut out, &doc.id, &doc.rev, &doc.body, revs);
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
    /// What is asked of attachments (`extras.atts` is its view for a
    /// document that has none of the `atts_since` revisions).
    pub atts: super::att::AttAsk,
}

/// The options as CouchDB's `parse_doc_query` reads them: a boolean option
/// is on only when it is `true` (any other value is ignored, not an
/// error); `meta` means `revs_info`, `conflicts` and `deleted_conflicts`;
/// `revs_info` applies only to the winning revision (not with `rev=`).
pub fn read_opts(req: &Req) -> ApiResult<ReadOpts> {
    let q = &req.query;
    let on = |key| q.any_true(key);
    let meta = on("meta");
    let rev = q.rev()?;
    let atts = super::att::att_ask(req)?;
    Ok(ReadOpts {
        get: GetOptions {
            latest: on("latest"),
            revs: on("revs"),
            revs_info: (on("revs_info") || meta) && rev.is_none(),
            conflicts: on("conflicts") || meta,
            deleted_conflicts: on("deleted_conflicts") || meta,
            rev,
        },
        extras: Extras {
            local_seq: on("local_seq"),
            atts: atts.view,
        },
        atts,
    })
}

/// `open_revs=` as CouchDB reads it: every occurrence parsed, the last
/// one counts, and an empty list is no `open_revs` at all.
fn open_revs_of(q: &crate::request::Query) -> ApiResult<Option<OpenRevs>> {
    let mut last = None;
    for spec in q.all("open_revs") {
        last = Some(parse_open_revs(spec)?);
    }
    Ok(last.filter(|w| !matches!(w, OpenRevs::Revs(r) if r.is_empty())))
}

/// `open_revs=`: `all`, or a JSON list of revisions.
fn parse_open_revs(spec: &str) -> ApiResult<OpenRevs> {
    if spec == "all" {
        return Ok(OpenRevs::AllLeaves);
    }
    let v = parse_json_bytes(spec.as_bytes())?;
    let list = v
        .as_array()
        .ok_or_else(|| ApiError::bad_request("Invalid list of revisions"))?;
    list.iter()
        .map(|r| {
            r.as_str()
                .ok_or_else(|| ApiError::bad_request("Invalid rev format"))
                .and_then(parse_rev)
        })
        .collect::<ApiResult<Vec<Rev>>>()
        .map(OpenRevs::Revs)
}

fn get(app: &App, req: &Req, db: &Database, id: &str) -> ApiResult<Response> {
    let opts = read_opts(req)?;
    // The winning revision alone is one storage read (its body is inline in
    // the document's record): no snapshot needed for it.
    let open_revs = open_revs_of(&req.query)?;
    let one_read = opts.get.rev.is_none() && open_revs.is_none();
    let reader = if one_read {
        db.latest_reader()?
    } else {
        db.reader()?
    };
    app.stats
        .docs_read
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if let Some(which) = open_revs {
        let mut results = reader.open_revs(id, &which, &opts.get)?;
        if matches!(which, OpenRevs::AllLeaves) {
            if results.is_empty() {
                return Err(ApiError::not_found("missing"));
            }
            // CouchDB lists the leaves in revision order (pos, then hash).
            results.sort_by(|a, b| open_rev_rev(a).cmp(open_rev_rev(b)));
        }
        let tree = match &opts.atts.since {
            Some(_) => reader.rev_tree(id)?,
            None => None,
        };
        return open_revs_response(req, db, &results, &opts, tree.as_ref());
    }
    let doc = reader.get(id, &opts.get)?;
    let mut opts = opts;
    if opts.atts.since.is_some() {
        let tree = reader.rev_tree(id)?;
        opts.extras.atts = opts.atts.view_for(tree.as_ref(), &doc.rev);
    }
    // CouchDB sends an ETag (and answers If-None-Match) only for a body
    // without meta members.
    let meta = doc.revs_info.is_some()
        || !doc.conflicts.is_empty()
        || !doc.deleted_conflicts.is_empty()
        || opts.extras.local_seq;
    let tag = format!("\"{}\"", doc.rev);
    if !meta && render::none_match(req.header(header::IF_NONE_MATCH), &tag) {
        return Ok(render::not_modified(&tag));
    }
    let mut resp = match opts.extras.atts {
        AttView::Data { .. } if super::att::accepts_multipart(req) => {
            super::att::multipart_doc(db, &doc, opts.extras)?
        }
        AttView::Data { .. } => {
            let mut out = String::with_capacity(doc.body.len() + 256);
            super::att::push_doc_with_data(&mut out, db, &doc, opts.extras)?;
            json_response(StatusCode::OK, out)
        }
        _ => json_response(StatusCode::OK, render::doc_string(&doc, opts.extras)),
    };
    if !meta {
        if let Ok(v) = HeaderValue::from_str(&tag) {
            resp.headers_mut().insert(header::ETAG, v);
        }
    }
    Ok(resp)
}

fn open_rev_rev(r: &OpenRev) -> &Rev {
    match r {
        OpenRev::Found(d) => &d.rev,
        OpenRev::Missing(rev) => rev,
    }
}

/// Appends `{"ok":doc}` or `{"missing":rev}` (attachment bytes, when
/// `extras` asks for them, read from `db`).
pub fn push_open_rev(
    out: &mut String,
    db: &Database,
    r: &OpenRev,
    extras: Extras,
) -> ApiResult<()> {
    match r {
        OpenRev::Found(d) => {
            out.push_str("{\"ok\":");
            push_doc_atts(out, db, d, extras)?;
            out.push('}');
        }
        OpenRev::Missing(rev) => {
            out.push_str("{\"missing\":");
            push_rev(out, rev);
            out.push('}');
        }
    }
    Ok(())
}

/// Renders a document, its attachments' bytes inline when `extras` asks.
pub fn push_doc_atts(
    out: &mut String,
    db: &Database,
    d: &DocRead,
    extras: Extras,
) -> ApiResult<()> {
    match extras.atts {
        AttView::Data { .. } => super::att::push_doc_with_data(out, db, d, extras),
        _ => {
            render::push_doc(out, d, extras);
            Ok(())
        }
    }
}

fn open_revs_response(
    req: &Req,
    db: &Database,
    results: &[OpenRev],
    opts: &ReadOpts,
    tree: Option<&RevTree>,
) -> ApiResult<Response> {
    let extras_of = |r: &OpenRev| Extras {
        atts: opts.atts.view_for(tree, open_rev_rev(r)),
        ..opts.extras
    };
    if req.accepts_json() {
        let mut out = String::from("[");
        for (i, r) in results.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_open_rev(&mut out, db, r, extras_of(r))?;
        }
        out.push(']');
        return Ok(json_response(StatusCode::OK, out));
    }
    // As multipart, attachments always follow (CouchDB's replicator asks
    // so without `attachments=true`), except those before `atts_since`.
    let ask = super::att::AttAsk {
        view: AttView::Data {
            encoding_info: matches!(
                opts.atts.view,
                AttView::EncodingInfo
                    | AttView::Data {
                        encoding_info: true,
                        ..
                    }
            ),
            since_pos: 0,
        },
        since: opts.atts.since.clone(),
    };
    let parts: Vec<(&OpenRev, Extras)> = results
        .iter()
        .map(|r| {
            let extras = Extras {
                atts: ask.view_for(tree, open_rev_rev(r)),
                ..opts.extras
            };
            (r, extras)
        })
        .collect();
    super::att::multipart_open_revs(db, &parts)
}

async fn delete(
    app: &App,
    req: &mut Req,
    db: &Database,
    id: &str,
    kind: DocKind,
) -> ApiResult<Response> {
    match kind {
        DocKind::Design => require_db_admin(req)?,
        _ => require_db_writer(req)?,
    }
    if kind == DocKind::Local {
        // Like CouchDB: a missing document is a 404; then any rev deletes.
        if db.reader()?.get_local(id)?.is_none() {
            return Err(ApiError::not_found("missing"));
        }
        let rev = explicit_rev(req, false)?;
        let durability = req.durability();
        return match db.put_local_async(id, rev, None, Some(durability)).await? {
            Ok(_) if durability == Durability::Batch => Ok(accepted(id)),
            Ok(rev) => Ok(ok_rev(req, StatusCode::OK, id, &rev)),
            Err(f) => Err(ApiError::from_doc_failure(&f, id)),
        };
    }
    // Like CouchDB: a missing or deleted document is a 404 before any rev check.
    db.reader()?.get(id, &GetOptions::default())?;
    let rev = explicit_rev(req, true)?
        .map(|r| parse_rev(&r))
        .transpose()?;
    let doc = Doc {
        id: id.to_string(),
        rev,
        deleted: true,
        revisions: None,
        body: Body::empty(),
        atts: None,
    };
    validate(app, req, db, &doc, true).await?;
    match write_one(app, req, db, doc, true).await? {
        Some(rev) => Ok(ok_rev(req, StatusCode::OK, id, &rev.to_string())),
        None => Ok(accepted(id)),
    }
}

/// COPY's `Destination` header as CouchDB reads it: a document id relative
/// to the database (an absolute `http://`/`https://` URL is refused),
/// percent-decoded with `+` as a space, optionally followed by `?NAME=REV`
/// naming the revision it replaces. A query that is not one `NAME=REV`
/// pair is an invalid revision (CouchDB 3.4.3 crashes on it).
fn copy_destination(header: Option<&str>) -> ApiResult<(String, Option<String>)> {
    let dest =
        header.ok_or_else(|| ApiError::bad_request("Destination header is mandatory for COPY."))?;
    if dest.starts_with("http://") || dest.starts_with("https://") {
        return Err(ApiError::bad_request("Destination URL must be relative."));
    }
    let (dest_id, dest_rev) = match dest.split_once('?') {
        None => (dest, None),
        Some((d, query)) => match query.split_once('=') {
            Some((_, rev)) if !d.contains('?') && !query.contains('?') && !rev.contains('=') => {
                (d, Some(rev.to_string()))
            }
            _ => return Err(ApiError::bad_request("Invalid rev format")),
        },
    };
    let dest_id = percent_decode_str(&dest_id.replace('+', " "))
        .decode_utf8()
        .map_err(|_| ApiError::bad_request("Destination is not valid UTF-8"))?
        .into_owned();
    Ok((dest_id, dest_rev))
}

async fn copy(app: &App, req: &mut Req, db: &Database, id: &str) -> ApiResult<Response> {
    require_db_reader(req)?;
    let (dest_id, dest_rev) = copy_destination(req.header("destination"))?;
    let dest_kind = super::partition::check_write_id(db, &dest_id)?;
    match dest_kind {
        DocKind::Design => require_db_admin(req)?,
        _ => require_db_writer(req)?,
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
            Ok(rev) => Ok(written(req, db, &dest_id, &rev, false)),
            Err(f) => Err(ApiError::from_doc_failure(&f, &dest_id)),
        };
    }
    if dest_kind == DocKind::Design {
        design::validate(&body.to_map(), db.partitioned())?;
    }
    let rev = dest_rev.map(|r| parse_rev(&r)).transpose()?;
    // The copy names the same stored attachments, their `revpos` kept (as CouchDB).
    let (stubs, rest) = settee_core::att::split_stored(body.as_str())
        .map_err(|e| ApiError::from(settee_db::Error::Corrupt(e.to_string())))?;
    let atts = (!stubs.is_empty()).then(|| {
        stubs
            .into_iter()
            .map(|(name, stub)| AttIn {
                name,
                kind: AttKind::Stored(stub, Default::default()),
            })
            .collect()
    });
    let doc = Doc {
        id: dest_id.clone(),
        rev,
        deleted: false,
        revisions: None,
        body: Body::from_stored(rest),
        atts,
    };
    super::view::check_design(app, &doc).await?;
    validate(app, req, db, &doc, true).await?;
    if edits_deleted(db, &doc)? {
        return Err(ApiError::conflict());
    }
    let mut results = db
        .update_async(vec![doc], options(req.durability(), true))
        .await?;
    app.stats
        .docs_written
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    match results.pop() {
        Some(Ok(rev)) => Ok(written(req, db, &dest_id, &rev.to_string(), false)),
        Some(Err(f)) => Err(ApiError::from_doc_failure(&f, &dest_id)),
        None => Ok(accepted(&dest_id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_destinations_as_couchdb_reads_them() {
        let dest = |h: &str| copy_destination(Some(h)).map_err(|e| e.reason.to_string());
        assert_eq!(dest("a%2Fb+c"), Ok(("a/b c".to_string(), None)));
        assert_eq!(
            dest("d?rev=1-x"),
            Ok(("d".to_string(), Some("1-x".to_string())))
        );
        // The name before `=` is not looked at.
        assert_eq!(
            dest("d?x=1-x"),
            Ok(("d".to_string(), Some("1-x".to_string())))
        );
        assert_eq!(dest("/d"), Ok(("/d".to_string(), None)));
        assert_eq!(dest("HTTP://x"), Ok(("HTTP://x".to_string(), None)));
        for abs in ["http://h/db/d", "https://h/d"] {
            assert_eq!(dest(abs), Err("Destination URL must be relative.".into()));
        }
        for bad in ["d?x", "d?", "d?rev=1-a=2", "d?rev=1-a?b"] {
            assert_eq!(dest(bad), Err("Invalid rev format".into()), "{bad}");
        }
        assert!(copy_destination(None).is_err());
    }
}
