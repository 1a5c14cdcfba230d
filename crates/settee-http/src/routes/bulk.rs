//! Bulk endpoints: `_bulk_docs`, `_bulk_get`, `_revs_diff`, `_missing_revs`.
//!
//! Invariants:
//! - `_bulk_docs` parses the request once, hands all documents to the
//!   engine in one update call, and answers one result per document in
//!   input order (`new_edits=false`: only the failures). A malformed
//!   document fails the whole request before anything is written; a
//!   per-document refusal (conflict, too large) fails only it. When a scan
//!   of the raw text shows that no document can be malformed
//!   ([`cannot_fail`]), documents go to the engine chunk by chunk as they
//!   are parsed (parsing overlaps writing); otherwise all are parsed first.
//! - `all_or_nothing` failures answer 417 with the failing documents and
//!   write nothing.
//! - Request sizes are bounded: `max_bulk_docs_count` / `max_bulk_get_count`.

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
use super::bulk_body::BulkBody;
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
    max_size: u64,
}

impl Placement {
    /// Gives a parsed document its slot; returns it if the engine is to
    /// write it.
    fn place(&mut self, p: Parsed) -> Option<Doc> {
        match p {
            Parsed::Local(id, rev, body) => {
                self.locals.push((self.slots.len(), id.clone(), rev, body));
                self.slots.push((id, Slot::Done(Err(DocFailure::NotFound))));
                None
            }
            Parsed::Doc(doc) if doc.body.len() as u64 > self.max_size => {
                self.slots
                    .push((doc.id, Slot::Done(Err(DocFailure::TooLarge(0)))));
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

/// Parses one document of a `_bulk_docs` body.
fn parse_doc(app: &App, user: &UserCtx, text: &str) -> ApiResult<Parsed> {
    // Without "_local" (or a \u escape that could spell it) the id cannot
    // name a local document: the fast path applies.
    let doc = if may_name_local(text) {
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
    // The documents stay raw text until each is turned into a `Doc` (see
    // `Doc::from_json_text`).
    let body = BulkBody::parse(&bytes).map_err(body_error)?;
    let Some(docs) = body.docs else {
        return Err(ApiError::bad_request(
            "POST body must include `docs` parameter.",
        ));
    };
    let flag = |raw: Option<&RawValue>, default: bool| {
        let value: Option<Value> = raw
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
    let new_edits = flag(body.new_edits, true)?;
    let all_or_nothing = flag(body.all_or_nothing, false)?;
    if docs.len() as u64 > req.settings.max_bulk_docs_count {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "max_bulk_docs_count_exceeded",
            req.settings.max_bulk_docs_count.to_string(),
        ));
    }
    app.stats.bulk_requests.fetch_add(1, Ordering::Relaxed);
    let mut place = Placement {
        slots: Vec::with_capacity(docs.len()),
        locals: Vec::new(),
        engine: 0,
        max_size: req.settings.max_document_size,
    };
    let durability = req.commit_durability();
    let opts = UpdateOptions {
        new_edits,
        all_or_nothing,
        durability: Some(durability),
    };
    let chunk = db.chunk_docs();
    let outcome: Result<Vec<DocResult>, BulkError> =
        if !all_or_nothing && docs.len() > chunk && docs.iter().all(|d| cannot_fail(d.get())) {
            // No document can be refused as malformed: each chunk goes to the
            // writer as soon as it is parsed, and parsing the next overlaps
            // writing it.
            let mut raws = docs.iter();
            let user = &req.user;
            let place = &mut place;
            db.update_chunks_async(opts, || {
                if raws.len() == 0 {
                    return None;
                }
                let mut out = Vec::with_capacity(chunk);
                while out.len() < chunk {
                    let Some(raw) = raws.next() else { break };
                    match parse_doc(app, user, raw.get()) {
                        Ok(p) => out.extend(place.place(p)),
                        Err(e) => return Some(Err(BulkError::Api(e))),
                    }
                }
                Some(Ok((out, raws.len() == 0)))
            })
            .await
        } else {
            // A malformed document fails the request before anything is written.
            let parsed = docs
                .iter()
                .map(|raw| parse_doc(app, &req.user, raw.get()))
                .collect::<ApiResult<Vec<Parsed>>>()?;
            let engine_docs: Vec<Doc> = parsed.into_iter().filter_map(|p| place.place(p)).collect();
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
