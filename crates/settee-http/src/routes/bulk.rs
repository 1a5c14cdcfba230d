//! Bulk endpoints: `_bulk_docs`, `_bulk_get`, `_revs_diff`, `_missing_revs`.
//!
//! Invariants:
//! - `_bulk_docs` parses the request once, hands all documents to the
//!   engine in one update (one group commit), and answers one result per
//!   document in input order (`new_edits=false`: only the failures).
//!   A malformed document fails the whole request before anything is
//!   written; a per-document refusal (conflict, too large) fails only it.
//! - `all_or_nothing` failures answer 417 with the failing documents and
//!   write nothing.
//! - Request sizes are bounded: `max_bulk_docs_count` / `max_bulk_get_count`.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use settee_core::doc::{Body, Doc};
use settee_core::name::{validate_doc_id, DocKind};
use settee_core::rev::Rev;
use settee_db::{DocFailure, DocResult, Error, GetOptions, OpenRev, OpenRevs, UpdateOptions};

use super::allow;
use super::doc::push_open_rev;
use crate::auth::{require_db_reader, require_db_writer, require_design_writer, UserCtx};
use crate::error::{ApiError, ApiResult};
use crate::render::{json_response, push_rev, push_str, Extras};
use crate::request::{body_error, local_parts, parse_id_revs, parse_rev, Req};
use crate::state::App;

/// The outcome of one document of a `_bulk_docs` request.
enum Slot {
    /// Index into the engine's results.
    Engine(usize),
    Done(Result<String, DocFailure>),
}

/// A document's outcome as rendered: its new revision, a `_local`
/// document's revision text, or why it failed.
enum Outcome<'a> {
    Rev(&'a Rev),
    Text(&'a str),
    Failed(&'a DocFailure),
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
    }
}

fn push_failure(out: &mut String, id: &str, f: &DocFailure) {
    let e = ApiError::from_doc_failure(f, id);
    out.push_str("{\"id\":");
    push_str(out, id);
    out.push_str(",\"error\":");
    push_str(out, &e.error);
    out.push_str(",\"reason\":");
    push_str(out, &e.reason);
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
        };
        if !new_edits && !matches!(outcome, Outcome::Failed(_)) {
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

/// One document of a `_bulk_docs` body, parsed.
enum Parsed {
    /// A `_local` document: its id, the revision given, its body (none
    /// deletes it).
    Local(String, Option<String>, Option<Body>),
    Doc(Doc),
}

/// Parses one document of a `_bulk_docs` body.
fn parse_doc(app: &App, user: &UserCtx, text: &str) -> ApiResult<Parsed> {
    // Without "_local" (or a \u escape that could spell it) the id cannot
    // name a local document: the fast path applies.
    let doc = if text.contains("_local") || text.contains("\\u") {
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
            return Ok(Parsed::Local(id, rev, body));
        }
        Doc::from_json(value, || app.new_uuid())?
    } else {
        Doc::from_json_text(text, || app.new_uuid())?
    };
    if doc.id.starts_with("_design/") {
        require_design_writer(user)?;
    }
    Ok(Parsed::Doc(doc))
}

pub async fn bulk_docs(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    require_db_writer(&req.settings, &req.user)?;
    let db = app.db(name)?;
    let bytes = req.json_bytes().await?;
    // Members parsed lazily: the documents stay raw text until each is
    // turned into a `Doc` (see `Doc::from_json_text`).
    let body: BTreeMap<String, &RawValue> = serde_json::from_slice(&bytes).map_err(body_error)?;
    let docs: Vec<&RawValue> = match body.get("docs").map(|d| serde_json::from_str(d.get())) {
        Some(Ok(docs)) => docs,
        _ => {
            return Err(ApiError::bad_request(
                "POST body must include `docs` parameter.",
            ))
        }
    };
    let flag = |name: &str, default: bool| {
        let value: Option<Value> = body
            .get(name)
            .map(|v| serde_json::from_str(v.get()))
            .transpose()
            .map_err(body_error)?;
        match value {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(b),
            Some(_) => Err(ApiError::bad_request(
                "`new_edits` and `all_or_nothing` must be booleans",
            )),
        }
    };
    let new_edits = flag("new_edits", true)?;
    let all_or_nothing = flag("all_or_nothing", false)?;
    if docs.len() as u64 > req.settings.max_bulk_docs_count {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "max_bulk_docs_count_exceeded",
            req.settings.max_bulk_docs_count.to_string(),
        ));
    }
    app.stats.bulk_requests.fetch_add(1, Ordering::Relaxed);
    let max_size = req.settings.max_document_size;
    let parsed = docs
        .iter()
        .map(|raw| parse_doc(app, &req.user, raw.get()))
        .collect::<ApiResult<Vec<Parsed>>>()?;
    let mut engine_docs = Vec::with_capacity(parsed.len());
    let mut slots: Vec<(String, Slot)> = Vec::with_capacity(parsed.len());
    let mut locals: Vec<(usize, String, Option<String>, Option<Body>)> = Vec::new();
    for p in parsed {
        match p {
            Parsed::Local(id, rev, body) => {
                locals.push((slots.len(), id.clone(), rev, body));
                slots.push((id, Slot::Done(Err(DocFailure::NotFound))));
            }
            Parsed::Doc(doc) if doc.body.len() as u64 > max_size => {
                slots.push((doc.id, Slot::Done(Err(DocFailure::TooLarge(0)))));
            }
            Parsed::Doc(doc) => {
                slots.push((doc.id.clone(), Slot::Engine(engine_docs.len())));
                engine_docs.push(doc);
            }
        }
    }
    let durability = req.commit_durability();
    let opts = UpdateOptions {
        new_edits,
        all_or_nothing,
        durability: Some(durability),
    };
    let n = engine_docs.len() as u64;
    let mut results = Vec::new();
    if !engine_docs.is_empty() {
        match db.update_async(engine_docs, opts).await {
            Ok(r) => results = r,
            Err(Error::AllOrNothingFailed(failures)) => {
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
            Err(e) => return Err(e.into()),
        }
    }
    app.stats.docs_written.fetch_add(n, Ordering::Relaxed);
    for (slot, id, rev, body) in locals {
        let r = db.put_local_async(&id, rev, body, Some(durability)).await?;
        slots[slot].1 = Slot::Done(r);
    }
    let out = render_results(&slots, &results, new_edits);
    Ok(json_response(StatusCode::CREATED, out))
}

pub async fn bulk_get(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    require_db_reader(&req.settings, &req.user)?;
    let db = app.db(name)?;
    let body: Value = req.json().await?;
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
    let mut asks: Vec<(Option<String>, Option<Rev>)> = Vec::with_capacity(items.len());
    for item in items {
        let id = item.get("id").and_then(Value::as_str).map(str::to_string);
        let rev = match item.get("rev") {
            Some(Value::String(r)) => Some(parse_rev(r)?),
            None | Some(Value::Null) => None,
            Some(_) => return Err(ApiError::bad_request("Invalid rev format")),
        };
        asks.push((id, rev));
    }
    let q = &req.query;
    let opts = GetOptions {
        revs: q.flag("revs")?,
        latest: q.flag("latest")?,
        conflicts: q.flag("conflicts")?,
        ..GetOptions::default()
    };
    app.stats
        .docs_read
        .fetch_add(asks.len() as u64, Ordering::Relaxed);
    let out = tokio::task::spawn_blocking(move || -> ApiResult<String> {
        let reader = db.reader()?;
        let mut out = String::from("{\"results\":[");
        for (i, (id, rev)) in asks.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let Some(id) = id else {
                out.push_str("{\"id\":null,\"docs\":[{\"error\":{\"id\":null,\"rev\":null,\"error\":\"bad_request\",\"reason\":\"document id missed\"}}]}");
                continue;
            };
            out.push_str("{\"id\":");
            push_str(&mut out, id);
            out.push_str(",\"docs\":[");
            let results: Result<Vec<OpenRev>, Error> = match (rev, validate_doc_id(id)) {
                (_, Err(_)) | (_, Ok(DocKind::Local)) => Err(Error::NotFound("missing")),
                (Some(rev), _) => reader.open_revs(id, &OpenRevs::Revs(vec![rev.clone()]), &opts),
                (None, _) => reader.get(id, &opts).map(|d| vec![OpenRev::Found(d)]),
            };
            match results {
                Ok(results) => {
                    for (j, r) in results.iter().enumerate() {
                        if j > 0 {
                            out.push(',');
                        }
                        match r {
                            OpenRev::Missing(rev) => push_missing(&mut out, id, Some(rev), "missing"),
                            found => push_open_rev(&mut out, found, Extras::default()),
                        }
                    }
                }
                Err(Error::NotFound(reason)) => push_missing(&mut out, id, rev.as_ref(), reason),
                Err(e) => return Err(e.into()),
            }
            out.push_str("]}");
        }
        out.push_str("]}");
        Ok(out)
    })
    .await??;
    Ok(json_response(StatusCode::OK, out))
}

fn push_missing(out: &mut String, id: &str, rev: Option<&Rev>, reason: &str) {
    out.push_str("{\"error\":{\"id\":");
    push_str(out, id);
    out.push_str(",\"rev\":");
    match rev {
        Some(r) => push_rev(out, r),
        None => out.push_str("\"undefined\""),
    }
    out.push_str(",\"error\":\"not_found\",\"reason\":");
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
    require_db_reader(&req.settings, &req.user)?;
    let db = app.db(name)?;
    let body: Map<String, Value> = req.json().await?;
    let asks = parse_id_revs(body)?;
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
