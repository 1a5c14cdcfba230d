//! Views over document ids: `_all_docs`, `_design_docs`, `_local_docs`
//! (GET, and POST with options and `keys` in the body) and their
//! `/queries` forms.
//!
//! Invariants:
//! - Parameters are read as CouchDB reads them, in order, the later
//!   overriding the earlier (a POST body first, then the query string; for
//!   `/queries`, the query string, then each query), and refused with
//!   CouchDB's messages, which differ between a query-string value
//!   (`"-1"`) and a JSON one (`-1`, `<<"x">>`). `reduce=true` and grouping
//!   are refused (a map-only view).
//! - Keys are document ids compared as bytes; a JSON key that is not a
//!   string sorts before every id (CouchDB compares them as Erlang terms,
//!   in which every non-binary sorts before the binaries), so such ranges
//!   are empty or unbounded, never an error.
//! - `keys` (given by `?keys=` or the body) answers one row per key:
//!   deleted documents with `"deleted":true`, unknown ids with
//!   `"error":"not_found"`, keys outside `_design_docs`' or
//!   `_local_docs`' namespace dropped; its `offset` and `update_seq` are
//!   `null`. A one-key `keys` inside `/queries` or a POST's query string is
//!   a `key`, as in CouchDB.
//! - `offset` counts the live documents of the whole database before the
//!   range's start (for `_design_docs`, its start clamped into the design
//!   range), plus `skip`, at most `total_rows`; `_local_docs` reports
//!   `null`. Without a start key it costs nothing; for `_design_docs` the
//!   count stops at `total_rows` (a scan of at most that many live
//!   documents); for `_all_docs` with a start key it reads the live
//!   counts per block of ids (`Reader::live_before`: one entry per block
//!   before the key plus at most one block of records; CouchDB's b-tree
//!   reductions give it in O(log n)). A database whose blocks are not
//!   built yet walks the smaller side of the key instead and gives up
//!   (`null`) past `settee_db::reader::OFFSET_SCAN_MAX` documents on each
//!   side.
//! - `_design_docs`' `total_rows` is the number of live design documents
//!   (one scan of the design range).
//! - Scans run on the blocking pool and stream (see [`crate::stream`]).

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Map, Value};
use settee_db::{IdRange, LocalDoc, Reader};

use super::allow;
use super::changes::push_seq;
use crate::auth::require_db_reader;
use crate::error::{ApiError, ApiResult};
use crate::render::{
    json_response, push_doc, push_local_doc, push_rev, push_str, push_u64, Extras,
};
use crate::request::{parse_json_bytes, Req};
use crate::state::App;
use crate::stream::{blocking_response, Sink};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    All,
    Design,
    Local,
}

const DESIGN_LO: &str = "_design/";
const DESIGN_HI: &str = "_design0";
const LOCAL_PREFIX: &str = "_local/";

/// Where a JSON key falls relative to document ids.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bound {
    /// Before every id (any key that is not a string).
    Low,
    Id(String),
}

fn bound(v: &Value) -> Bound {
    match v {
        Value::String(s) => Bound::Id(s.clone()),
        _ => Bound::Low,
    }
}

/// Parsed options of one query.
#[derive(Debug, Clone)]
struct Opts {
    keys: Option<Vec<Value>>,
    start_key: Option<Value>,
    end_key: Option<Value>,
    start_docid: Option<String>,
    end_docid: Option<String>,
    inclusive_end: bool,
    descending: bool,
    limit: u64,
    skip: u64,
    include_docs: bool,
    conflicts: bool,
    update_seq: bool,
    reduce: bool,
    group: Option<bool>,
    group_level: Option<u64>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            keys: None,
            start_key: None,
            end_key: None,
            start_docid: None,
            end_docid: None,
            inclusive_end: true,
            descending: false,
            limit: u64::MAX,
            skip: 0,
            include_docs: false,
            conflicts: false,
            update_seq: false,
            reduce: false,
            group: None,
            group_level: None,
        }
    }
}

/// A parameter's value as it arrived: query-string text or decoded JSON.
#[derive(Clone, Copy)]
enum Src<'a> {
    Text(&'a str),
    Json(&'a Value),
}

impl Src<'_> {
    /// How CouchDB prints the value in its messages (Erlang's `~p`).
    fn shown(&self) -> String {
        match self {
            Src::Text(s) => format!("{s:?}"),
            Src::Json(Value::String(s)) => format!("<<{s:?}>>"),
            Src::Json(v) => v.to_string(),
        }
    }

    fn json(&self) -> ApiResult<Value> {
        match self {
            Src::Text(s) => parse_json_bytes(s.as_bytes()),
            Src::Json(v) => Ok((*v).clone()),
        }
    }

    fn boolean(&self) -> ApiResult<bool> {
        let text: &str = match self {
            Src::Json(Value::Bool(b)) => return Ok(*b),
            Src::Json(Value::String(s)) => s,
            Src::Text(s) => s,
            Src::Json(v) => {
                return Err(ApiError::query_parse(format!(
                    "Invalid boolean parameter: {v}"
                )))
            }
        };
        match text.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(ApiError::query_parse(format!(
                "Invalid boolean parameter: {text:?}"
            ))),
        }
    }

    fn pos_int(&self) -> ApiResult<u64> {
        let n: Option<i128> = match self {
            Src::Text(s) => s.parse::<i128>().ok(),
            Src::Json(Value::Number(n)) => {
                n.as_i64().map(i128::from).or(n.as_u64().map(i128::from))
            }
            Src::Json(_) => None,
        };
        let n = n.ok_or_else(|| {
            ApiError::query_parse(format!("Invalid value for integer: {}", self.shown()))
        })?;
        if n < 0 {
            return Err(ApiError::query_parse(format!(
                "Invalid value for positive integer: {}",
                self.shown()
            )));
        }
        Ok(u64::try_from(n).unwrap_or(u64::MAX))
    }

    /// The value as a string (`couch_util:to_binary`).
    fn text(&self) -> String {
        match self {
            Src::Text(s) => s.to_string(),
            Src::Json(Value::String(s)) => s.clone(),
            Src::Json(v) => v.to_string(),
        }
    }
}

const KEYS_INCOMPATIBLE: &str = "`keys` is incompatible with `key`, `start_key` and `end_key`";

impl Opts {
    /// Applies one parameter (unknown ones are ignored, as in CouchDB).
    fn apply(&mut self, name: &str, v: Src<'_>) -> ApiResult<()> {
        match name {
            "key" => {
                let k = v.json()?;
                self.start_key = Some(k.clone());
                self.end_key = Some(k);
            }
            "keys" => match v.json()? {
                // A single key is a `key` (CouchDB reads it as a range).
                Value::Array(mut a) if a.len() == 1 => {
                    let k = a.pop().unwrap_or(Value::Null);
                    self.start_key = Some(k.clone());
                    self.end_key = Some(k);
                }
                Value::Array(a) => self.keys = Some(a),
                _ => return Err(ApiError::bad_request("`keys` parameter must be an array.")),
            },
            "startkey" | "start_key" => self.start_key = Some(v.json()?),
            "endkey" | "end_key" => self.end_key = Some(v.json()?),
            "startkey_docid" | "start_key_doc_id" => self.start_docid = Some(v.text()),
            "endkey_docid" | "end_key_doc_id" => self.end_docid = Some(v.text()),
            "limit" => self.limit = v.pos_int()?,
            "skip" => self.skip = v.pos_int()?,
            "descending" => self.descending = v.boolean()?,
            "inclusive_end" => self.inclusive_end = v.boolean()?,
            "include_docs" => self.include_docs = v.boolean()?,
            "conflicts" => self.conflicts = v.boolean()?,
            "update_seq" => self.update_seq = v.boolean()?,
            "reduce" => self.reduce = v.boolean()?,
            "group" => self.group = Some(v.boolean()?),
            "group_level" => self.group_level = Some(v.pos_int()?),
            "sorted" | "attachments" | "att_encoding_info" => {
                v.boolean()?;
            }
            "stale" if !matches!(v.text().as_str(), "ok" | "update_after") => {
                return Err(ApiError::query_parse("Invalid value for `stale`."));
            }
            "stable" if !matches!(v.text().as_str(), "true" | "false") => {
                return Err(ApiError::query_parse("Invalid value for `stable`."));
            }
            "update" if !matches!(v.text().as_str(), "true" | "false" | "lazy") => {
                return Err(ApiError::query_parse("Invalid value for `update`."));
            }
            _ => {}
        }
        Ok(())
    }

    /// Applies the query-string parameters, in order.
    fn apply_query(&mut self, req: &Req) -> ApiResult<()> {
        for (k, v) in req.query.pairs() {
            self.apply(k, Src::Text(v))?;
        }
        Ok(())
    }

    /// Applies the members of a JSON object, in order.
    fn apply_object(&mut self, m: &Map<String, Value>) -> ApiResult<()> {
        for (k, v) in m {
            self.apply(k, Src::Json(v))?;
        }
        Ok(())
    }

    /// CouchDB's checks of a map view's arguments.
    fn validate(&self) -> ApiResult<()> {
        if self.group == Some(false) && self.group_level.is_some_and(|l| l > 0) {
            return Err(ApiError::query_parse(
                "Can't specify group=false and group_level>0 at the same time",
            ));
        }
        if self.reduce {
            return Err(ApiError::query_parse(
                "Reduce is invalid for map-only views.",
            ));
        }
        if self.group == Some(true) || self.group_level.is_some() {
            return Err(ApiError::query_parse(
                "Invalid use of grouping on a map view.",
            ));
        }
        let keyed = self.keys.as_ref().is_some_and(|k| !k.is_empty());
        if keyed && (self.start_key.is_some() || self.end_key.is_some()) {
            return Err(ApiError::query_parse(KEYS_INCOMPATIBLE));
        }
        Ok(())
    }

    /// The start of the range in scan order (`startkey`, else
    /// `startkey_docid`).
    fn start(&self) -> Option<Bound> {
        match &self.start_key {
            Some(k) => Some(bound(k)),
            None => self.start_docid.clone().map(Bound::Id),
        }
    }

    fn end(&self) -> Option<Bound> {
        match &self.end_key {
            Some(k) => Some(bound(k)),
            None => self.end_docid.clone().map(Bound::Id),
        }
    }
}

/// The options of a GET or POST request.
async fn request_opts(req: &mut Req) -> ApiResult<Opts> {
    let mut o = Opts::default();
    if req.method == Method::POST {
        let body = req.json_object().await?;
        match body.get("keys") {
            None => {}
            Some(Value::Array(keys)) => {
                if req.query.has("keys") {
                    return Err(ApiError::query_parse(KEYS_INCOMPATIBLE));
                }
                o.keys = Some(keys.clone());
            }
            Some(_) => {
                return Err(ApiError::bad_request(
                    "`keys` body member must be an array.",
                ))
            }
        }
        for (k, v) in &body {
            if k != "keys" {
                o.apply(k, Src::Json(v))?;
            }
        }
        o.apply_query(req)?;
    } else {
        if let Some(text) = req.query.get("keys") {
            match parse_json_bytes(text.as_bytes())? {
                Value::Array(keys) => o.keys = Some(keys),
                _ => return Err(ApiError::bad_request("`keys` parameter must be an array.")),
            }
        }
        for (k, v) in req.query.pairs() {
            if k != "keys" {
                o.apply(k, Src::Text(v))?;
            }
        }
    }
    o.validate()?;
    Ok(o)
}

/// The id range of a query in scan order, or None when it is empty.
fn id_range(o: &Opts, kind: Kind) -> Option<IdRange> {
    let mut r = IdRange {
        inclusive_end: o.inclusive_end,
        descending: o.descending,
        skip: o.skip,
        limit: o.limit,
        ..IdRange::default()
    };
    // A key below every id: an empty range when it bounds the low end
    // (the end ascending, the start descending), no bound otherwise.
    match o.start() {
        Some(Bound::Low) if o.descending => return None,
        Some(Bound::Id(s)) => r.start = Some(s),
        _ => {}
    }
    match o.end() {
        Some(Bound::Low) if !o.descending => return None,
        Some(Bound::Id(s)) => r.end = Some(s),
        _ => {}
    }
    let (lo, hi) = match kind {
        Kind::Design => (DESIGN_LO, DESIGN_HI),
        Kind::Local => ("_local/", "_local0"),
        Kind::All => return Some(r),
    };
    let (lo, hi) = (lo.to_string(), hi.to_string());
    if o.descending {
        r.start = Some(r.start.map_or(hi.clone(), |s| s.min(hi)));
        r.end = Some(r.end.map_or(lo.clone(), |e| e.max(lo)));
    } else {
        r.start = Some(r.start.map_or(lo.clone(), |s| s.max(lo)));
        r.end = Some(r.end.map_or(hi.clone(), |e| e.min(hi)));
    }
    Some(r)
}

/// The counts a query reports beside its rows.
struct Counts {
    total: Option<u64>,
    update_seq: u64,
}

fn counts(reader: &Reader, kind: Kind) -> ApiResult<Counts> {
    let state = reader.state()?;
    let total = match kind {
        Kind::Local => None,
        Kind::All => Some(state.doc_count),
        Kind::Design => Some(reader.count_live(Some((DESIGN_LO, true)), Some((DESIGN_HI, false)))?),
    };
    Ok(Counts {
        total,
        update_seq: state.update_seq,
    })
}

/// `offset` of a range query (see the module doc); None: not counted.
fn offset(reader: &Reader, kind: Kind, o: &Opts, total: u64) -> ApiResult<Option<u64>> {
    let all = || -> ApiResult<u64> { Ok(reader.state()?.doc_count) };
    let start = o.start();
    // The start in scan order, clamped into the design range.
    let start = match kind {
        Kind::Design => {
            let edge = if o.descending { DESIGN_HI } else { DESIGN_LO };
            match start {
                Some(Bound::Id(s)) if o.descending && s.as_str() < edge => Some(Bound::Id(s)),
                Some(Bound::Id(s)) if !o.descending && s.as_str() > edge => Some(Bound::Id(s)),
                Some(Bound::Low) if o.descending => Some(Bound::Low),
                _ => Some(Bound::Id(edge.to_string())),
            }
        }
        _ => start,
    };
    let before = match start {
        None => Some(0),
        Some(Bound::Low) if o.descending => Some(all()?),
        Some(Bound::Low) => Some(0),
        // The answer is at most the (few) design documents: counting that
        // far is enough.
        Some(Bound::Id(s)) if kind == Kind::Design => {
            Some(reader.live_before_at_most(&s, o.descending, total.saturating_sub(o.skip))?)
        }
        Some(Bound::Id(s)) => reader.live_before(&s, o.descending)?,
    };
    Ok(before.map(|n| n.saturating_add(o.skip).min(total)))
}

fn push_row_head(out: &mut String, id: &str) {
    out.push_str("{\"id\":");
    push_str(out, id);
    out.push_str(",\"key\":");
    push_str(out, id);
}

/// Whether a key belongs to a view's namespace (`keys` outside it are
/// dropped, as in CouchDB).
fn in_namespace(kind: Kind, key: &Value) -> bool {
    match (kind, key) {
        (Kind::All, _) => true,
        (Kind::Design, Value::String(id)) => id.starts_with(DESIGN_LO),
        (Kind::Local, Value::String(id)) => id.starts_with(LOCAL_PREFIX),
        _ => false,
    }
}

/// Writes one query's answer object into `sink`.
fn run(reader: &Reader, kind: Kind, o: &Opts, c: &Counts, sink: &mut Sink) -> ApiResult<()> {
    let keyed = o.keys.is_some();
    let offset = match (&o.keys, c.total) {
        (None, Some(total)) => offset(reader, kind, o, total)?,
        _ => None,
    };
    let out = &mut sink.buf;
    out.push_str("{\"total_rows\":");
    match c.total {
        Some(n) => push_u64(out, n),
        None => out.push_str("null"),
    }
    out.push_str(",\"offset\":");
    match offset {
        Some(n) => push_u64(out, n),
        None => out.push_str("null"),
    }
    if o.update_seq {
        out.push_str(",\"update_seq\":");
        if keyed || kind == Kind::Local {
            out.push_str("null");
        } else {
            push_seq(out, c.update_seq);
        }
    }
    out.push_str(",\"rows\":[");
    let mut first = true;
    let sep = |out: &mut String, first: &mut bool| {
        if !*first {
            out.push_str(",\n");
        } else {
            out.push('\n');
        }
        *first = false;
    };
    let extras = Extras::default();
    if let Some(keys) = &o.keys {
        let skip = usize::try_from(o.skip).unwrap_or(usize::MAX);
        let limit = usize::try_from(o.limit).unwrap_or(usize::MAX);
        let ordered: Box<dyn Iterator<Item = &Value>> = if o.descending {
            Box::new(keys.iter().rev())
        } else {
            Box::new(keys.iter())
        };
        for key in ordered.skip(skip).take(limit) {
            if !in_namespace(kind, key) {
                continue;
            }
            sep(&mut sink.buf, &mut first);
            let out = &mut sink.buf;
            let found = match key.as_str() {
                None => None,
                Some(id) if id.starts_with(LOCAL_PREFIX) => reader
                    .get_local(id)?
                    .map(|d| push_local_row(out, &d, o.include_docs)),
                Some(id) => reader
                    .all_docs_key(id, o.include_docs, o.conflicts)?
                    .map(|row| {
                        push_row_head(out, &row.id);
                        out.push_str(",\"value\":{\"rev\":");
                        push_rev(out, &row.rev);
                        if row.deleted {
                            out.push_str(",\"deleted\":true}");
                            if o.include_docs {
                                out.push_str(",\"doc\":null");
                            }
                        } else {
                            out.push('}');
                            if let Some(d) = &row.doc {
                                out.push_str(",\"doc\":");
                                push_doc(out, d, extras);
                            }
                        }
                        out.push('}');
                    }),
            };
            if found.is_none() {
                out.push_str("{\"key\":");
                out.push_str(&key.to_string());
                out.push_str(",\"error\":\"not_found\"}");
            }
            if !sink.flush_if_full() {
                return Ok(());
            }
        }
    } else if let Some(range) = id_range(o, kind) {
        let mut alive = true;
        if kind == Kind::Local {
            reader.local_docs(&range, &mut |d| {
                sep(&mut sink.buf, &mut first);
                push_local_row(&mut sink.buf, &d, o.include_docs);
                alive = sink.flush_if_full();
                alive
            })?;
        } else {
            reader.all_docs(&range, o.include_docs, o.conflicts, &mut |row| {
                sep(&mut sink.buf, &mut first);
                let out = &mut sink.buf;
                push_row_head(out, &row.id);
                out.push_str(",\"value\":{\"rev\":");
                push_rev(out, &row.rev);
                out.push('}');
                if let Some(d) = &row.doc {
                    out.push_str(",\"doc\":");
                    push_doc(out, d, extras);
                }
                out.push('}');
                alive = sink.flush_if_full();
                alive
            })?;
        }
        if !alive {
            return Ok(());
        }
    }
    sink.buf.push_str("\n]}");
    Ok(())
}

pub async fn handle(app: &App, req: &mut Req, name: &str, kind: Kind) -> ApiResult<Response> {
    allow(
        req,
        &[Method::GET, Method::HEAD, Method::POST],
        "GET,HEAD,POST",
    )?;
    require_db_reader(&req.settings, &req.user)?;
    let db = app.db(name)?;
    let opts = request_opts(req).await?;
    let reader = db.reader()?;
    blocking_response(move |sink| {
        let c = counts(&reader, kind)?;
        run(&reader, kind, &opts, &c, sink)
    })
    .await
}

/// Most queries in one `/queries` request.
const QUERIES_MAX: usize = 100;

pub async fn queries(app: &App, req: &mut Req, name: &str, kind: Kind) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    require_db_reader(&req.settings, &req.user)?;
    let db = app.db(name)?;
    let body = req.json_object().await?;
    let list = match body.get("queries") {
        None => {
            return Err(ApiError::bad_request(
                "POST body must include `queries` parameter.",
            ))
        }
        Some(Value::Array(list)) => list,
        Some(_) => return Err(ApiError::bad_request("`queries` member must be an array.")),
    };
    if list.len() > QUERIES_MAX {
        return Err(ApiError::bad_request(format!(
            "at most {QUERIES_MAX} queries per request"
        )));
    }
    let mut base = Opts::default();
    base.apply_query(req)?;
    let all: Vec<Opts> = list
        .iter()
        .map(|q| {
            let Value::Object(m) = q else {
                return Err(ApiError::bad_request("each query must be a JSON object"));
            };
            let mut o = base.clone();
            o.apply_object(m)?;
            o.validate()?;
            Ok(o)
        })
        .collect::<ApiResult<_>>()?;
    let reader = db.reader()?;
    let out = tokio::task::spawn_blocking(move || -> ApiResult<String> {
        let c = counts(&reader, kind)?;
        let mut sink = Sink::collect();
        sink.buf.push_str("{\"results\":[");
        for (i, o) in all.iter().enumerate() {
            if i > 0 {
                sink.buf.push(',');
            }
            run(&reader, kind, o, &c, &mut sink)?;
        }
        sink.buf.push_str("]}");
        Ok(sink.buf)
    })
    .await??;
    Ok(json_response(StatusCode::OK, out))
}

/// One `_local_docs` row: `{"id","key","value":{"rev"}[,"doc"]}`.
fn push_local_row(out: &mut String, d: &LocalDoc, include_docs: bool) {
    push_row_head(out, &d.id);
    out.push_str(",\"value\":{\"rev\":");
    push_str(out, &d.rev);
    out.push('}');
    if include_docs {
        out.push_str(",\"doc\":");
        push_local_doc(out, &d.id, &d.rev, &d.body);
    }
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn opts(v: Value) -> Opts {
        let mut o = Opts::default();
        o.apply_object(v.as_object().unwrap()).unwrap();
        o.validate().unwrap();
        o
    }

    fn err(v: Value) -> String {
        let mut o = Opts::default();
        let e = o
            .apply_object(v.as_object().unwrap())
            .and_then(|_| o.validate())
            .unwrap_err();
        e.reason.to_string()
    }

    #[test]
    fn ranges() {
        let r = id_range(&opts(json!({"startkey": "b", "endkey": "d"})), Kind::All).unwrap();
        assert_eq!(
            (r.start.as_deref(), r.end.as_deref()),
            (Some("b"), Some("d"))
        );
        // Keys that are not strings sort before every id.
        let r = id_range(&opts(json!({"startkey": [1]})), Kind::All).unwrap();
        assert_eq!(r.start, None);
        assert!(id_range(&opts(json!({"endkey": {}})), Kind::All).is_none());
        assert!(id_range(&opts(json!({"endkey": 1})), Kind::All).is_none());
        assert!(id_range(&opts(json!({"startkey": 1, "descending": true})), Kind::All).is_none());
        let r = id_range(&opts(json!({"startkey": null})), Kind::All).unwrap();
        assert_eq!(r.start, None);
        let r = id_range(&opts(json!({"startkey_docid": "c"})), Kind::All).unwrap();
        assert_eq!(r.start.as_deref(), Some("c"));
        let r = id_range(
            &opts(json!({"startkey": "b", "startkey_docid": "c"})),
            Kind::All,
        )
        .unwrap();
        assert_eq!(r.start.as_deref(), Some("b"));
        let r = id_range(&opts(json!({})), Kind::Design).unwrap();
        assert_eq!(
            (r.start.as_deref(), r.end.as_deref()),
            (Some(DESIGN_LO), Some(DESIGN_HI))
        );
        let r = id_range(
            &opts(json!({"descending": true, "startkey": "z"})),
            Kind::Design,
        )
        .unwrap();
        assert_eq!(
            (r.start.as_deref(), r.end.as_deref()),
            (Some("_design0"), Some("_design/"))
        );
    }

    #[test]
    fn parameters_are_checked_as_couchdb_checks_them() {
        assert_eq!(
            err(json!({"keys": ["a", "b"], "startkey": "a"})),
            KEYS_INCOMPATIBLE
        );
        // One key is a `key`, and a later `key` wins.
        let o = opts(json!({"keys": ["zz"], "key": "a"}));
        assert_eq!((o.keys, o.start_key), (None, Some(json!("a"))));
        assert_eq!(
            err(json!({"limit": -1})),
            "Invalid value for positive integer: -1"
        );
        assert_eq!(
            err(json!({"limit": "x"})),
            "Invalid value for integer: <<\"x\">>"
        );
        assert_eq!(err(json!({"limit": 1.5})), "Invalid value for integer: 1.5");
        assert_eq!(
            err(json!({"descending": "yes"})),
            "Invalid boolean parameter: \"yes\""
        );
        assert_eq!(
            err(json!({"descending": 1})),
            "Invalid boolean parameter: 1"
        );
        assert!(opts(json!({"descending": "TRUE"})).descending);
        assert_eq!(
            err(json!({"reduce": true})),
            "Reduce is invalid for map-only views."
        );
        assert_eq!(
            err(json!({"group": true})),
            "Invalid use of grouping on a map view."
        );
        assert_eq!(
            err(json!({"group_level": 1})),
            "Invalid use of grouping on a map view."
        );
        assert!(opts(json!({"group": false, "reduce": false})).group == Some(false));
        let mut o = Opts::default();
        let e = o.apply("skip", Src::Text("-1")).unwrap_err();
        assert_eq!(e.reason, "Invalid value for positive integer: \"-1\"");
        let e = o.apply("limit", Src::Text("1.5")).unwrap_err();
        assert_eq!(e.reason, "Invalid value for integer: \"1.5\"");
        let e = o.apply("include_docs", Src::Text("1")).unwrap_err();
        assert_eq!(e.reason, "Invalid boolean parameter: \"1\"");
        let e = o.apply("startkey", Src::Text("c")).unwrap_err();
        assert_eq!(e.error, "bad_request");
    }
}
