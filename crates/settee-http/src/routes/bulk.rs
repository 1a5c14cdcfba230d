//! Bulk endpoints: `_bulk_docs`, `_bulk_get`, `_revs_diff`, `_missing_revs`.
//!
//! Invariants:
//! - `_bulk_docs` parses the request once, hands all documents to the
//!   engine in one update call, and answers one result per document in
//!   input order (`new_edits=false`: only the failures). A malformed
//!   document, or one larger than `max_document_size` (413, as CouchDB),
//!   fails the whole request before anything is written; a per-document
//!   refusal (a conflict) fails only it. When a scan of the raw text shows
//!   that no document can be malformed (the plain reading of the body,
//!   `BulkBody::parse_plain`, or else [`cannot_fail`] over each document)
//!   nor too large (no document's text is), documents go to the engine
//!   chunk by chunk as they are parsed (parsing overlaps writing);
//!   otherwise all are parsed first.
//! - Memory does not grow with the number of documents past
//!   `max_bulk_docs_count`: neither reading keeps more than one past it.
//! - `new_edits=false`: every document must name its revision (`_rev` or
//!   `_revisions`), or the whole request is refused before anything is
//!   written (CouchDB's 400); such requests are never streamed.
//! - When the database has `validate_doc_update` functions, every document
//!   is parsed and validated (settee-design) before any is written; a
//!   refused one gets its error in its place (`new_edits=false`: with its
//!   `rev`, as CouchDB) and the others are written. Such requests are
//!   never streamed either.
//! - `all_or_nothing` failures answer 417 with the failing documents and
//!   write nothing.
//! - `_bulk_get` answers every entry inside a 200: an entry without `rev`
//!   gets every leaf (a deleted document's tombstone too), a malformed
//!   entry or revision gets its error in place, as in CouchDB.
//! - Request sizes are bounded: `max_bulk_docs_count` / `max_bulk_get_count`.

use std::sync::atomic::Ordering;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::value::RawValue;
use serde_json::Value;
use settee_core::doc::{Body, Doc};
use settee_core::doc_text::PlainDoc;
use settee_core::name::{validate_doc_id, DocKind};
use settee_core::rev::Rev;
use settee_db::{DocFailure, DocResult, Error, GetOptions, OpenRev, OpenRevs, UpdateOptions};

use super::allow;
use super::bulk_body::BulkBody;
use super::doc::push_open_rev;
use crate::auth::{require_db_reader, require_db_writer, require_design_writer, write_ctx};
use crate::error::{ApiError, ApiResult};
use crate::render::{json_response, push_rev, push_str, Extras};
use crate::request::{body_error, check_depth, local_parts, parse_id_revs, Req};
use crate::state::App;

/// The outcome of one document of a `_bulk_docs` request.
enum Slot {
    /// Index into the engine's results.
    Engine(usize),
    Done(Result<String, DocFailure>),
    /// Refused by `validate_doc_update`, with the revision it named.
    Refused(ApiError, Option<Rev>),
}

/// A document's outcome as rendered: its new revision, a `_local`
/// document's revision text, or why it failed.
enum Outcome<'a> {
    Rev(&'a Rev),
    Text(&'a str),
    Failed(&'a DocFailure),
    /// Refused by `validate_doc_update` (with the revision to show, for
    /// `new_edits=false`).
    Refused(&'a ApiError, Option<&'a Rev>),
}

fn push_result(out: &mut String, id: &str, outcome: Outcome<'_>) {
    let push_ok = |out: &mut String| {
        out.push_str("{\"ok\":true,\"id\":");
        push_str(out, id);
        out.push_str(",\"rev\":");
    };
    match outcome {
        Outcome::Rev(rev) => {
            push_ok(out);
            push_rev(out, rev);
            out.push('}');
        }
        Outcome::Text(rev) => {
            push_ok(out);
            push_str(out, rev);
            out.push('}');
        }
        Outcome::Failed(f) => push_failure(out, id, f),
        Outcome::Refused(e, rev) => push_error(out, id, rev, e),
    }
}

fn push_failure(out: &mut String, id: &str, f: &DocFailure) {
    push_error(out, id, None, &ApiError::from_doc_failure(f, id));
}

/// `{"id":…,["rev":…,]"error":…,"reason":…}`.
fn push_error(out: &mut String, id: &str, rev: Option<&Rev>, e: &ApiError) {
    out.push_str("{\"id\":");
    push_str(out, id);
    if let Some(rev) = rev {
        out.push_str(",\"rev\":");
        push_rev(out, rev);
    }
    out.push_str(",\"error\":");
    push_str(out, &e.error);
    out.push(',');
    e.push_reason(out);
    out.push('}');
}

/// The `_bulk_docs` answer: one entry per slot, in input order
/// (`new_edits=false`: only the failures). An engine slot without a result
/// was accepted in batch mode and has no revision to show.
fn render_results(slots: &[(String, Slot)], results: &[DocResult], new_edits: bool) -> String {
    let mut out = String::with_capacity(slots.len() * 90 + 2);
    out.push('[');
    let mut first = true;
    for (id, slot) in slots {
        let outcome = match slot {
            Slot::Engine(i) => match results.get(*i) {
                Some(Ok(rev)) => Outcome::Rev(rev),
                Some(Err(f)) => Outcome::Failed(f),
                None => continue,
            },
            Slot::Done(Ok(rev)) => Outcome::Text(rev),
            Slot::Done(Err(f)) => Outcome::Failed(f),
            Slot::Refused(e, rev) => Outcome::Refused(e, rev.as_ref().filter(|_| !new_edits)),
        };
        if !new_edits && !matches!(outcome, Outcome::Failed(_) | Outcome::Refused(..)) {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        push_result(&mut out, id, outcome);
    }
    out.push(']');
    out
}

/// Why a `_bulk_docs` update failed: the engine (all-or-nothing failures
/// are answered 417 with the documents), or a document.
enum BulkError {
    Engine(Error),
    Api(ApiError),
}

impl From<Error> for BulkError {
    fn from(e: Error) -> BulkError {
        BulkError::Engine(e)
    }
}

/// Where each document of a `_bulk_docs` request goes: the slots of the
/// answer, in input order.
struct Placement {
    slots: Vec<(String, Slot)>,
    /// `_local` documents, written after the others: slot, id, rev, body.
    locals: Vec<(usize, String, Option<String>, Option<Body>)>,
    /// Documents handed to the engine so far.
    engine: usize,
}

impl Placement {
    /// Takes the documents `validate_doc_update` refused (`verdicts`, one
    /// per engine document) out of the engine's share, giving each its
    /// error in its slot; returns the documents left to write.
    fn refuse(&mut self, docs: Vec<Doc>, verdicts: Vec<Result<(), ApiError>>) -> Vec<Doc> {
        let mut refused: Vec<Option<(ApiError, Option<Rev>)>> = Vec::with_capacity(docs.len());
        let mut kept = Vec::with_capacity(docs.len());
        for (doc, verdict) in docs.into_iter().zip(verdicts) {
            match verdict {
                Ok(()) => {
                    refused.push(None);
                    kept.push(doc);
                }
                Err(e) => refused.push(Some((e, doc.rev))),
            }
        }
        let mut next = 0;
        for (_, slot) in &mut self.slots {
            let Slot::Engine(i) = slot else { continue };
            match refused.get_mut(*i).and_then(Option::take) {
                Some((e, rev)) => *slot = Slot::Refused(e, rev),
                None => {
                    *slot = Slot::Engine(next);
                    next += 1;
                }
            }
        }
        self.engine = next;
        kept
    }

    /// Gives a parsed document its slot; returns it if the engine is to
    /// write it.
    fn place(&mut self, p: Parsed) -> Option<Doc> {
        match p {
            Parsed::Local(id, rev, body) => {
                self.locals.push((self.slots.len(), id.clone(), rev, body));
                self.slots.push((id, Slot::Done(Err(DocFailure::NotFound))));
                None
            }
            Parsed::Doc(doc) => {
                self.slots.push((doc.id.clone(), Slot::Engine(self.engine)));
                self.engine += 1;
                Some(doc)
            }
        }
    }
}

/// The answer to an `all_or_nothing` request some of whose documents
/// `validate_doc_update` refused (417, nothing written), if any was.
fn refusals(slots: &[(String, Slot)]) -> Option<String> {
    let mut out = String::from("[");
    for (id, slot) in slots {
        if let Slot::Refused(e, _) = slot {
            if out.len() > 1 {
                out.push(',');
            }
            push_error(&mut out, id, None, e);
        }
    }
    out.push(']');
    (out.len() > 2).then_some(out)
}

/// Whether the document text `text` (valid JSON: the body parsed) is
/// certain to parse into a document without error, judged from its bytes:
/// an object without escapes whose only member name or string starting
/// with `_` is a leading `"_id"` holding a valid, ordinary id. Such a
/// document has no special members to refuse and is not a design or local
/// document. Conservative: `false` only means the request is parsed whole
/// before anything is written.
fn cannot_fail(text: &str) -> bool {
    let b = text.as_bytes();
    if b.first() != Some(&b'{') || memchr::memchr(b'\\', b).is_some() {
        return false;
    }
    // Where `"_` starts (no memmem searcher: building one per document
    // cost more than the search).
    let mut specials = memchr::memchr_iter(b'_', b)
        .filter(|&i| i > 0 && b[i - 1] == b'"')
        .map(|i| i - 1);
    match (specials.next(), specials.next()) {
        (None, _) => true,
        (Some(1), None) => text
            .strip_prefix("{\"_id\":\"")
            .and_then(|rest| rest.split_once('"'))
            .is_some_and(|(id, _)| matches!(validate_doc_id(id), Ok(DocKind::Normal))),
        _ => false,
    }
}

/// CouchDB's refusal of a `new_edits=false` document without a revision.
const NEEDS_REV: &str =
    "When `new_edits: false`, the document needs `_rev` or `_revisions` specified";

/// One document of a `_bulk_docs` body, parsed.
enum Parsed {
    /// A `_local` document: its id, the revision given, its body (none
    /// deletes it).
    Local(String, Option<String>, Option<Body>),
    Doc(Doc),
}

/// Whether `text` contains `_local` or `\u` (an escape that could spell
/// it), found from the candidates' first bytes with `memchr`.
fn may_name_local(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr2_iter(b'_', b'\\', b)
        .any(|i| b[i..].starts_with(b"_local") || b[i..].starts_with(b"\\u"))
}

/// One document's text as the body's reading left it.
#[derive(Clone, Copy)]
enum DocText<'a> {
    /// Scanned already as a plain document (see `BulkBody::parse_plain`):
    /// it cannot fail to parse and names no local document.
    Plain(PlainDoc<'a>),
    /// Passed [`cannot_fail`]: names no local document.
    Unfailing(&'a str),
    Raw(&'a str),
}

impl<'a> DocText<'a> {
    /// Document `i` of the body: its plain scan when the body had one.
    fn of(plain: Option<&[PlainDoc<'a>]>, docs: &[&'a str], i: usize, unfailing: bool) -> Self {
        match plain {
            Some(plain) => DocText::Plain(plain[i]),
            None if unfailing => DocText::Unfailing(docs[i]),
            None => DocText::Raw(docs[i]),
        }
    }
}

/// Parses one document of a `_bulk_docs` body, refusing one larger than
/// `max_size` (CouchDB's 413, naming the id the body gave, if any).
fn parse_doc(app: &App, text: DocText<'_>, max_size: u64, partitioned: bool) -> ApiResult<Parsed> {
    let generated = std::cell::Cell::new(false);
    let new_id = || {
        generated.set(true);
        app.new_uuid()
    };
    let doc = match text {
        // Scanned already: not again.
        DocText::Plain(plain) => Doc::from_plain(plain, new_id)?,
        // Without "_local" (or a \u escape that could spell it) the id
        // cannot name a local document: the fast path applies.
        DocText::Raw(text) if may_name_local(text) => {
            let value: Value = serde_json::from_str(text).map_err(body_error)?;
            let local_id = value
                .get("_id")
                .and_then(Value::as_str)
                .filter(|id| id.starts_with("_local/"))
                .map(str::to_string);
            if let Some(id) = local_id {
                validate_doc_id(&id)?;
                let Value::Object(map) = value else {
                    return Err(ApiError::bad_request("Document must be a JSON object"));
                };
                let (rev, body) = local_parts(map)?;
                if body.as_ref().is_some_and(|b| b.len() as u64 > max_size) {
                    return Err(ApiError::doc_too_large(&id));
                }
                return Ok(Parsed::Local(id, rev, body));
            }
            Doc::from_json(value, new_id)?
        }
        DocText::Raw(text) | DocText::Unfailing(text) => Doc::from_json_text(text, new_id)?,
    };
    if doc.body.len() as u64 > max_size {
        let id = if generated.get() { "" } else { doc.id.as_str() };
        return Err(ApiError::doc_too_large(id));
    }
    if doc.id.starts_with("_design/") && !doc.deleted {
        settee_core::design::validate(&doc.body.to_map(), partitioned)?;
    }
    if doc.atts.is_some() {
        super::att::check_inline_sizes(&doc, app.config.settings().max_attachment_size)?;
    }
    Ok(Parsed::Doc(doc))
}

/// The documents of a `_bulk_docs` to the users database as they are to
/// be written (see [`crate::auth::users_db_write`]), each with its
/// validation verdict. As in CouchDB, a document the requester may not
/// write at all (another user's: 404) or whose password is invalid fails
/// the whole request; one the `_users` validation refuses (roles set by a
/// non-admin…) is refused by itself.
async fn users_db_docs(
    req: &Req,
    db: &settee_db::Database,
    docs: &[&str],
) -> ApiResult<Vec<(Box<RawValue>, ApiResult<()>)>> {
    let texts: Vec<String> = docs.iter().map(|d| (*d).to_string()).collect();
    let user = req.user.clone();
    let sec = crate::auth::db_security(req).into_owned();
    let policy = std::sync::Arc::clone(&req.settings.password_policy);
    let db = db.clone();
    tokio::task::spawn_blocking(move || {
        texts
            .into_iter()
            .map(|text| {
                let mut v: Value = serde_json::from_str(&text).map_err(body_error)?;
                let mut verdict = Ok(());
                if let Value::Object(m) = &mut v {
                    let id = m.get("_id").and_then(Value::as_str).unwrap_or_default();
                    if !(id.starts_with("_design/") || id.starts_with("_local/")) {
                        let id = crate::auth::user_doc_prepare(&user, &sec, m, &policy)?;
                        verdict = crate::auth::user_doc_validate(&user, &sec, &db, &id, m);
                    }
                }
                Ok((
                    RawValue::from_string(v.to_string()).map_err(body_error)?,
                    verdict,
                ))
            })
            .collect()
    })
    .await?
}

/// The documents of a `_bulk_docs` to `_replicator`, each checked by
/// [`crate::replicator_db::before_write`]; as in CouchDB, one invalid
/// replication document fails the whole request (403).
fn replicator_db_docs(
    req: &Req,
    db: &settee_db::Database,
    docs: &[&str],
) -> ApiResult<Vec<(Box<RawValue>, ApiResult<()>)>> {
    docs.iter()
        .map(|raw| {
            let text = match serde_json::from_str(raw).map_err(body_error)? {
                Value::Object(m) => {
                    let m = crate::replicator_db::before_write(&req.user, db, m, true)?;
                    Value::Object(m).to_string()
                }
                _ => (*raw).to_string(),
            };
            Ok((RawValue::from_string(text).map_err(body_error)?, Ok(())))
        })
        .collect()
}

pub async fn bulk_docs(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    require_db_writer(req)?;
    let db = app.db(name)?;
    // The depth check is left to the general reading: a plain body (see
    // `BulkBody::parse_plain`) is shallow.
    let bytes = req.json_bytes_depth_unchecked().await?;
    // The documents stay raw text until each is turned into a `Doc` (see
    // `Doc::from_json_text`).
    // Documents past the limit are not kept (the count check below answers).
    let max_docs = usize::try_from(req.settings.max_bulk_docs_count).unwrap_or(usize::MAX);
    let body = match BulkBody::parse_plain(&bytes, max_docs) {
        Some(body) => body,
        None => {
            check_depth(&bytes)?;
            BulkBody::parse(&bytes, max_docs).map_err(|e| {
                if e.is_data() {
                    ApiError::bad_request("Request body must be a JSON object")
                } else {
                    ApiError::invalid_json()
                }
            })?
        }
    };
    let docs = match (body.docs, body.docs_given) {
        (Some(docs), _) => docs,
        (None, false) => {
            return Err(ApiError::bad_request(
                "POST body must include `docs` parameter.",
            ))
        }
        (None, true) => return Err(ApiError::bad_request("`docs` parameter must be an array.")),
    };
    let flag = |raw: Option<&str>| -> ApiResult<Option<Value>> {
        raw.map(serde_json::from_str)
            .transpose()
            .map_err(body_error)
    };
    let new_edits = match flag(body.new_edits)? {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => b,
        Some(_) => {
            return Err(ApiError::bad_request(
                "`new_edits` parameter must be a boolean.",
            ))
        }
    };
    // As in CouchDB, anything but `true` is false.
    let all_or_nothing = flag(body.all_or_nothing)? == Some(Value::Bool(true));
    if docs.len() as u64 > req.settings.max_bulk_docs_count {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "max_bulk_docs_count_exceeded",
            req.settings.max_bulk_docs_count.to_string(),
        ));
    }
    super::partition::check_bulk_ids(&db, &docs)?;
    let partitioned = db.partitioned();
    app.stats.bulk_requests.fetch_add(1, Ordering::Relaxed);
    // Documents of the users and replicator databases, checked (and
    // rewritten: hashed passwords, owners), each with its verdict.
    let mut checked = Vec::new();
    if name == crate::auth::USERS_DB && new_edits {
        checked = users_db_docs(req, &db, &docs).await?;
    } else if crate::replicator_db::is_replicator_db(name) && new_edits {
        checked = replicator_db_docs(req, &db, &docs)?;
    }
    // Rewritten documents are judged afresh.
    let plain = body.plain.filter(|_| checked.is_empty());
    let docs: Vec<&str> = if checked.is_empty() {
        docs
    } else {
        checked.iter().map(|(d, _)| d.get()).collect()
    };
    let users_refused = checked.iter().any(|(_, v)| v.is_err());
    let mut place = Placement {
        slots: Vec::with_capacity(docs.len()),
        locals: Vec::new(),
        engine: 0,
    };
    let max_size = req.settings.max_document_size;
    let durability = req.commit_durability();
    let opts = UpdateOptions {
        new_edits,
        all_or_nothing,
        durability: Some(durability),
    };
    let chunk = db.chunk_docs();
    let validators = app.design.validators(&db)?;
    // A document's body is never longer than its text: none can be too large.
    // Design documents from a writer who is not a database admin are
    // refused one by one (below), as CouchDB refuses them.
    let partition_limit = super::partition::size_limit(req, &db);
    let outcome: Result<Vec<DocResult>, BulkError> = if validators.is_none()
        && !users_refused
        && partition_limit.is_none()
        && require_design_writer(req).is_ok()
        && new_edits
        && !all_or_nothing
        && docs.len() > chunk
        && (plain.is_some() || docs.iter().all(|d| cannot_fail(d)))
        && docs.iter().all(|d| d.len() as u64 <= max_size)
    {
        // No document can be refused as malformed: each chunk goes to the
        // writer as soon as it is parsed, and parsing the next overlaps
        // writing it.
        let mut next = 0;
        let place = &mut place;
        db.update_chunks_async(opts, || {
            if next == docs.len() {
                return None;
            }
            let mut out = Vec::with_capacity(chunk);
            while out.len() < chunk && next < docs.len() {
                let text = DocText::of(plain.as_deref(), &docs, next, true);
                let parsed = parse_doc(app, text, max_size, partitioned);
                next += 1;
                match parsed {
                    Ok(p) => out.extend(place.place(p)),
                    Err(e) => return Some(Err(BulkError::Api(e))),
                }
            }
            Some(Ok((out, next == docs.len())))
        })
        .await
    } else {
        // A malformed document fails the request before anything is written.
        let parsed = (0..docs.len())
            .map(|i| {
                let text = DocText::of(plain.as_deref(), &docs, i, false);
                let p = parse_doc(app, text, max_size, partitioned)?;
                let has_rev = match &p {
                    Parsed::Local(_, rev, _) => rev.is_some(),
                    Parsed::Doc(doc) => doc.rev.is_some(),
                };
                if !new_edits && !has_rev {
                    return Err(ApiError::bad_request(NEEDS_REV));
                }
                Ok(p)
            })
            .collect::<ApiResult<Vec<Parsed>>>()?;
        let mut user_verdicts = Vec::new();
        let mut engine_docs = Vec::with_capacity(parsed.len());
        for (i, p) in parsed.into_iter().enumerate() {
            if let Some(doc) = place.place(p) {
                engine_docs.push(doc);
                if users_refused {
                    user_verdicts.push(checked[i].1.clone());
                }
            }
        }
        if users_refused {
            engine_docs = place.refuse(engine_docs, user_verdicts);
        }
        if let Some(limit) = partition_limit {
            let ids = engine_docs
                .iter()
                .map(|d| (d.id.clone(), d.deleted))
                .collect();
            let verdicts = super::partition::size_verdicts(&db, ids, limit).await?;
            engine_docs = place.refuse(engine_docs, verdicts);
        }
        if engine_docs.iter().any(|d| d.id.starts_with("_design/")) {
            // Design documents whose functions do not compile are refused.
            let mut verdicts = Vec::with_capacity(engine_docs.len());
            let db_admin = require_design_writer(req);
            for d in &engine_docs {
                verdicts.push(match &db_admin {
                    Err(e) if d.id.starts_with("_design/") => Err(e.clone()),
                    _ => super::view::check_design(app, d).await,
                });
            }
            engine_docs = place.refuse(engine_docs, verdicts);
        }
        if let Some(validators) = &validators {
            let ctx = write_ctx(req);
            let verdicts = validators
                .validate_all(&db, &engine_docs, new_edits, &ctx)
                .await?
                .into_iter()
                .map(|v| v.map_err(ApiError::from))
                .collect();
            engine_docs = place.refuse(engine_docs, verdicts);
            if all_or_nothing {
                if let Some(out) = refusals(&place.slots) {
                    return Ok(json_response(StatusCode::EXPECTATION_FAILED, out));
                }
            }
        }
        if engine_docs.is_empty() {
            Ok(Vec::new())
        } else {
            db.update_async(engine_docs, opts)
                .await
                .map_err(BulkError::Engine)
        }
    };
    let Placement {
        mut slots,
        locals,
        engine,
        ..
    } = place;
    let n = engine as u64;
    let results = match outcome {
        Ok(r) => r,
        Err(BulkError::Engine(Error::AllOrNothingFailed(failures))) => {
            let mut out = String::from("[");
            for (i, (id, f)) in failures.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_failure(&mut out, id, f);
            }
            out.push(']');
            return Ok(json_response(StatusCode::EXPECTATION_FAILED, out));
        }
        Err(BulkError::Engine(e)) => return Err(e.into()),
        Err(BulkError::Api(e)) => return Err(e),
    };
    app.stats.docs_written.fetch_add(n, Ordering::Relaxed);
    for (slot, id, rev, body) in locals {
        let r = db.put_local_async(&id, rev, body, Some(durability)).await?;
        slots[slot].1 = Slot::Done(r);
    }
    let out = render_results(&slots, &results, new_edits);
    Ok(json_response(StatusCode::CREATED, out))
}

/// One entry of a `_bulk_get` request: the id (JSON, as sent) and what to
/// read, or the error to answer in its place.
struct BulkGetAsk {
    id: Value,
    what: Result<(String, Option<Rev>), BulkGetError>,
}

/// An entry's error: the `rev` to show (JSON), `error` and `reason`.
struct BulkGetError {
    rev: Value,
    error: String,
    reason: String,
}

/// Reads one `_bulk_get` entry as CouchDB does (in a partitioned database
/// an id without a partition is the entry's error).
fn bulk_get_ask(item: &Value, partitioned: bool) -> BulkGetAsk {
    let bad = |id: Value, rev: Value, error: &str, reason: String| BulkGetAsk {
        id,
        what: Err(BulkGetError {
            rev,
            error: error.to_string(),
            reason,
        }),
    };
    let Some(map) = item.as_object().filter(|m| !m.is_empty()) else {
        return bad(
            Value::Null,
            Value::Null,
            "bad_request",
            "document must be a JSON object".into(),
        );
    };
    let Some(id_value) = map.get("id") else {
        return bad(
            Value::Null,
            Value::Null,
            "bad_request",
            "document id missed".into(),
        );
    };
    let id = match id_value {
        Value::String(s) => match if partitioned {
            settee_core::name::validate_partitioned_doc_id(s)
        } else {
            validate_doc_id(s)
        } {
            Ok(_) => s.clone(),
            Err(e) => {
                let e = ApiError::from(e);
                return bad(
                    id_value.clone(),
                    Value::Null,
                    &e.error,
                    e.reason.to_string(),
                );
            }
        },
        _ => {
            return bad(
                id_value.clone(),
                Value::Null,
                "illegal_docid",
                "Document id must be a string".into(),
            )
        }
    };
    let rev = match map.get("rev") {
        None => None,
        Some(Value::String(r)) if r.parse::<Rev>().is_ok() => r.parse::<Rev>().ok(),
        Some(other) => {
            return bad(
                id_value.clone(),
                other.clone(),
                "bad_request",
                "Invalid rev format".into(),
            )
        }
    };
    if let Some(since) = map.get("atts_since").filter(|v| !v.is_array()) {
        return bad(
            id_value.clone(),
            since.clone(),
            "bad_request",
            "att_since value must be array of revs.".into(),
        );
    }
    BulkGetAsk {
        id: id_value.clone(),
        what: Ok((id, rev)),
    }
}

pub async fn bulk_get(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    require_db_reader(req)?;
    let db = app.db(name)?;
    let body = req.json_object().await?;
    let Some(Value::Array(items)) = body.get("docs") else {
        return Err(ApiError::bad_request("Missing JSON list of 'docs'."));
    };
    if items.len() as u64 > req.settings.max_bulk_get_count {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "max_bulk_get_count_exceeded",
            req.settings.max_bulk_get_count.to_string(),
        ));
    }
    let q = &req.query;
    for param in ["open_revs", "new_edits", "w", "rev", "atts_since"] {
        if q.has(param) {
            return Err(ApiError::bad_request(format!(
                "\"{param}\" query parameter is not acceptable"
            )));
        }
    }
    let asks: Vec<BulkGetAsk> = items
        .iter()
        .map(|item| bulk_get_ask(item, db.partitioned()))
        .collect();
    let own = super::users_db::own_doc_only(req, name);
    let view = super::att::att_ask(req)?.view;
    // Per document, `atts_since` names revisions the client has.
    let asks_atts: Vec<super::att::AttAsk> = items
        .iter()
        .map(|item| super::att::AttAsk {
            view,
            since: item
                .get("atts_since")
                .and_then(|v| super::att::parse_since(v).ok()),
        })
        .collect();
    let opts = GetOptions {
        // As CouchDB reads them here: only `true` turns them on.
        revs: q.any_true("revs"),
        latest: q.any_true("latest"),
        conflicts: q.flag("conflicts")?,
        ..GetOptions::default()
    };
    app.stats
        .docs_read
        .fetch_add(asks.len() as u64, Ordering::Relaxed);
    let out = tokio::task::spawn_blocking(move || -> ApiResult<String> {
        let reader = db.reader()?;
        let mut out = String::from("{\"results\":[");
        for (i, ask) in asks.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"id\":");
            out.push_str(&ask.id.to_string());
            out.push_str(",\"docs\":[");
            match &ask.what {
                Err(e) => push_bulk_get_error(&mut out, &ask.id, &e.rev, &e.error, &e.reason),
                Ok((id, rev)) => {
                    let results: Vec<OpenRev> = match validate_doc_id(id) {
                        Ok(DocKind::Local) => vec![],
                        _ if !super::users_db::may_see(&own, id) => vec![],
                        _ => {
                            let which = match rev {
                                Some(rev) => OpenRevs::Revs(vec![rev.clone()]),
                                None => OpenRevs::AllLeaves,
                            };
                            reader.open_revs(id, &which, &opts)?
                        }
                    };
                    if results.is_empty() {
                        let shown = rev
                            .as_ref()
                            .map_or(Value::from("undefined"), |r| Value::from(r.to_string()));
                        push_bulk_get_error(&mut out, &ask.id, &shown, "not_found", "missing");
                    }
                    for (j, r) in results.iter().enumerate() {
                        if j > 0 {
                            out.push(',');
                        }
                        match r {
                            OpenRev::Missing(rev) => push_bulk_get_error(
                                &mut out,
                                &ask.id,
                                &Value::from(rev.to_string()),
                                "not_found",
                                "missing",
                            ),
                            found => {
                                let ask = &asks_atts[i];
                                let tree = match &ask.since {
                                    Some(_) => reader.rev_tree(id)?,
                                    None => None,
                                };
                                let rev = match found {
                                    OpenRev::Found(d) => &d.rev,
                                    OpenRev::Missing(r) => r,
                                };
                                let extras = Extras {
                                    atts: ask.view_for(tree.as_ref(), rev),
                                    ..Extras::default()
                                };
                                push_open_rev(&mut out, &db, found, extras)?
                            }
                        }
                    }
                }
            }
            out.push_str("]}");
        }
        out.push_str("]}");
        Ok(out)
    })
    .await??;
    Ok(json_response(StatusCode::OK, out))
}

/// One `_bulk_get` error in place of a document:
/// `{"error":{"id","rev","error","reason"}}`.
fn push_bulk_get_error(out: &mut String, id: &Value, rev: &Value, error: &str, reason: &str) {
    out.push_str("{\"error\":{\"id\":");
    out.push_str(&id.to_string());
    out.push_str(",\"rev\":");
    out.push_str(&rev.to_string());
    out.push_str(",\"error\":");
    push_str(out, error);
    out.push_str(",\"reason\":");
    push_str(out, reason);
    out.push_str("}}");
}

/// `_revs_diff` (and `_missing_revs` when `missing_only`).
pub async fn revs_diff(
    app: &App,
    req: &mut Req,
    name: &str,
    missing_only: bool,
) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    require_db_reader(req)?;
    let db = app.db(name)?;
    let body = req.json_object().await?;
    let asks = parse_id_revs(body, "Revisions must be a list of strings")?;
    let out = tokio::task::spawn_blocking(move || -> ApiResult<String> {
        let reader = db.reader()?;
        let mut out = String::from(if missing_only {
            "{\"missing_revs\":{"
        } else {
            "{"
        });
        let mut first = true;
        for (id, revs) in &asks {
            let Some(diff) = settee_db::query::revs_diff(&reader, id, revs)? else {
                continue;
            };
            if !first {
                out.push(',');
            }
            first = false;
            push_str(&mut out, id);
            out.push(':');
            let push_list = |out: &mut String, revs: &[Rev]| {
                out.push('[');
                for (i, r) in revs.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    push_rev(out, r);
                }
                out.push(']');
            };
            if missing_only {
                push_list(&mut out, &diff.missing);
            } else {
                out.push_str("{\"missing\":");
                push_list(&mut out, &diff.missing);
                if !diff.possible_ancestors.is_empty() {
                    out.push_str(",\"possible_ancestors\":");
                    push_list(&mut out, &diff.possible_ancestors);
                }
                out.push('}');
            }
        }
        out.push_str(if missing_only { "}}" } else { "}" });
        Ok(out)
    })
    .await??;
    Ok(json_response(StatusCode::OK, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn only_plain_documents_are_judged_unfailing() {
        for ok in [
            r#"{"_id":"a","foo":"bar"}"#,
            r#"{"foo":"bar"}"#,
            r#"{"_id":"0000000001","n":[1,{"x":null}]}"#,
            r#"{}"#,
        ] {
            assert!(cannot_fail(ok), "{ok}");
        }
        for no in [
            r#"{"_id":"_design/x"}"#,
            r#"{"_id":"_local/x"}"#,
            r#"{"_id":"_bad"}"#,
            r#"{"_id":""}"#,
            r#"{"_id":5}"#,
            r#"{"_id":"a","_rev":"1-x"}"#,
            r#"{"_id":"a","_foo":1}"#,
            r#"{"a":1,"_id":"late"}"#,
            r#"{"_id":"a","x":"_under"}"#,
            r#"{"_id":"a\"b"}"#,
            r#"{ "_id":"a"}"#,
            r#"[1]"#,
            r#""text""#,
        ] {
            assert!(!cannot_fail(no), "{no}");
        }
    }

    fn member() -> impl Strategy<Value = (String, Value)> {
        let name = prop_oneof![
            Just("_id".to_string()),
            Just("_rev".to_string()),
            Just("_deleted".to_string()),
            Just("_revisions".to_string()),
            Just("_attachments".to_string()),
            Just("_foo".to_string()),
            "[a-z_\"]{0,3}",
        ];
        let value = prop_oneof![
            "[a-z_/\"\\\\]{0,6}".prop_map(Value::String),
            Just(Value::String("_design/x".into())),
            Just(Value::String("_local/x".into())),
            Just(Value::String("1-abc".into())),
            any::<i32>().prop_map(Value::from),
            any::<bool>().prop_map(Value::Bool),
            Just(Value::Null),
            Just(serde_json::json!({"_b": 1})),
            Just(serde_json::json!({"start": 1, "ids": ["abc"]})),
        ];
        (name, value)
    }

    proptest! {
        /// The property streaming relies on: a document judged unfailing
        /// parses, by either path `parse_doc` may take.
        #[test]
        fn unfailing_documents_parse(members in prop::collection::vec(member(), 0..5)) {
            let mut text = String::from("{");
            for (i, (k, v)) in members.iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                text.push_str(&serde_json::to_string(k).unwrap());
                text.push(':');
                text.push_str(&serde_json::to_string(v).unwrap());
            }
            text.push('}');
            if cannot_fail(&text) {
                prop_assert!(Doc::from_json_text(&text, || "gen".into()).is_ok(), "{}", text);
                let value: Value = serde_json::from_str(&text).unwrap();
                prop_assert!(Doc::from_json(value, || "gen".into()).is_ok(), "{}", text);
            }
        }

        /// The byte scan finds exactly what substring searches find.
        #[test]
        fn local_scan_is_a_substring_search(
            pieces in prop::collection::vec(
                prop_oneof![
                    Just("_local"), Just("_loca"), Just("_"), Just("l"), Just("ocal"),
                    Just("\\u"), Just("\\"), Just("u"), Just("\""), Just("x"),
                ],
                0..8,
            )
        ) {
            let text = pieces.concat();
            let expected = text.contains("_local") || text.contains("\\u");
            prop_assert_eq!(may_name_local(&text), expected, "{}", text);
        }
    }

    #[test]
    fn local_scan_finds_every_spelling() {
        for yes in [
            r#"{"_id":"_local/x"}"#,
            r#"{"_id":"\u005flocal/x"}"#,
            "_local",
            "\\u",
        ] {
            assert!(may_name_local(yes), "{yes}");
        }
        for no in [r#"{"_id":"local/x"}"#, r#"{"_id":"_loca"}"#, "_", "\\", ""] {
            assert!(!may_name_local(no), "{no}");
        }
    }
}
