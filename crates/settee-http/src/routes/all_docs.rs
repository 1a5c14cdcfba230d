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
//! - `/db/_partition/P/_all_docs` is `_all_docs` clamped into the ids
//!   `P:` to `P;` (one scan of that range); `offset` and `total_rows`
//!   count the whole database and `keys` are not filtered, as CouchDB.
//! - `_design_docs`' `total_rows` is the number of live design documents
//!   (one scan of the design range).
//! - Scans run on the blocking pool and stream (see [`crate::stream`]).

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::Value;
use settee_db::{IdRange, LocalDoc, Reader};
use settee_views::args::{Src, ViewKind, KEYS_INCOMPATIBLE};
use settee_views::{Out, ViewArgs};

use super::allow;
use super::changes::push_seq;
use crate::auth::require_db_reader;
use crate::error::{ApiError, ApiResult};
use crate::render::{json_response, push_local_doc, push_rev, push_str, push_u64, Extras};
use crate::request::{parse_json_bytes, Req};
use crate::state::App;
use crate::stream::{quick_first_response, Attempt, Sink};
use settee_db::blobs::Blobs;
use settee_db::json::{push_doc_blobs, AttView};

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

/// Parsed options of one query: CouchDB parses `_all_docs`' like a view's.
type Opts = ViewArgs;

/// CouchDB's checks of a map view's arguments (`partition` comes from
/// the path, never from the query).
fn validate(o: &Opts) -> ApiResult<()> {
    Ok(o.validate(ViewKind::Map, false)?)
}

/// The ids `[lo, hi)` a query's range is clamped into: the design or
/// local namespace, or the partition of `/db/_partition/P/_all_docs`.
fn namespace(kind: Kind, o: &Opts) -> Option<(String, String)> {
    match kind {
        Kind::Design => Some((DESIGN_LO.into(), DESIGN_HI.into())),
        Kind::Local => Some((LOCAL_PREFIX.into(), "_local0".into())),
        Kind::All => o
            .partition
            .as_deref()
            .map(settee_core::name::partition_range),
    }
}

/// The start of the range in scan order (`startkey`, else
/// `startkey_docid`).
fn start(o: &Opts) -> Option<Bound> {
    match &o.start_key {
        Some(k) => Some(bound(k)),
        None => o.start_docid.clone().map(Bound::Id),
    }
}

fn end(o: &Opts) -> Option<Bound> {
    match &o.end_key {
        Some(k) => Some(bound(k)),
        None => o.end_docid.clone().map(Bound::Id),
    }
}

fn query_pairs(req: &Req) -> impl Iterator<Item = (&str, &str)> + Clone {
    req.query
        .pairs()
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
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
        o.apply_pairs(query_pairs(req))?;
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
    validate(&o)?;
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
    match start(o) {
        Some(Bound::Low) if o.descending => return None,
        Some(Bound::Id(s)) => r.start = Some(s),
        _ => {}
    }
    match end(o) {
        Some(Bound::Low) if !o.descending => return None,
        Some(Bound::Id(s)) => r.end = Some(s),
        _ => {}
    }
    if let Some((lo, hi)) = namespace(kind, o) {
        r.clamp(&lo, &hi);
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
    let start = start(o);
    // The start in scan order, clamped into the design range or the
    // partition.
    let start = match namespace(kind, o) {
        Some((lo, hi)) => {
            let edge = if o.descending { hi } else { lo };
            match start {
                Some(Bound::Id(s)) if o.descending && s < edge => Some(Bound::Id(s)),
                Some(Bound::Id(s)) if !o.descending && s > edge => Some(Bound::Id(s)),
                Some(Bound::Low) if o.descending => Some(Bound::Low),
                _ => Some(Bound::Id(edge)),
            }
        }
        None => start,
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

/// Writes one query's answer object into `sink`, row by row (a row done
/// when [`Out::row_done`] says so; false stops the scan).
fn run(
    reader: &Reader,
    blobs: &Blobs,
    kind: Kind,
    o: &Opts,
    c: &Counts,
    sink: &mut dyn Out,
) -> ApiResult<()> {
    let keyed = o.keys.is_some();
    let offset = match (&o.keys, c.total) {
        (None, Some(total)) => offset(reader, kind, o, total)?,
        _ => None,
    };
    let out = sink.buf();
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
    let extras = Extras {
        atts: AttView::from_flags(o.attachments, o.att_encoding_info),
        ..Extras::default()
    };
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
            sep(sink.buf(), &mut first);
            let out = sink.buf();
            let found = match key.as_str() {
                None => None,
                Some(id) if id.starts_with(LOCAL_PREFIX) => reader
                    .get_local(id)?
                    .map(|d| push_local_row(out, &d, o.include_docs)),
                Some(id) => reader
                    .all_docs_key(id, o.include_docs, o.conflicts)?
                    .map(|row| -> ApiResult<()> {
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
                                push_doc_blobs(out, d, extras, blobs)?;
                            }
                        }
                        out.push('}');
                        Ok(())
                    })
                    .transpose()?,
            };
            if found.is_none() {
                out.push_str("{\"key\":");
                out.push_str(&key.to_string());
                out.push_str(",\"error\":\"not_found\"}");
            }
            if !sink.row_done() {
                return Ok(());
            }
        }
    } else if let Some(range) = id_range(o, kind) {
        let mut alive = true;
        if kind == Kind::Local {
            reader.local_docs(&range, &mut |d| {
                sep(sink.buf(), &mut first);
                push_local_row(sink.buf(), &d, o.include_docs);
                alive = sink.row_done();
                alive
            })?;
        } else {
            let mut failed = None;
            reader.all_docs(&range, o.include_docs, o.conflicts, &mut |row| {
                sep(sink.buf(), &mut first);
                let out = sink.buf();
                push_row_head(out, &row.id);
                out.push_str(",\"value\":{\"rev\":");
                push_rev(out, &row.rev);
                out.push('}');
                if let Some(d) = &row.doc {
                    out.push_str(",\"doc\":");
                    if let Err(e) = push_doc_blobs(out, d, extras, blobs) {
                        failed = Some(e);
                        return false;
                    }
                }
                out.push('}');
                alive = sink.row_done();
                alive
            })?;
            if let Some(e) = failed {
                return Err(e.into());
            }
        }
        if !alive {
            return Ok(());
        }
    }
    sink.buf().push_str("\n]}");
    Ok(())
}

pub async fn handle(app: &App, req: &mut Req, name: &str, kind: Kind) -> ApiResult<Response> {
    allow(
        req,
        &[Method::GET, Method::HEAD, Method::POST],
        "GET,HEAD,POST",
    )?;
    super::users_db::listing(req, name)?;
    require_db_reader(req)?;
    let db = app.db(name)?;
    let mut opts = request_opts(req).await?;
    opts.partition = req.partition.clone();
    if opts.partition.is_some() {
        super::view::partition_limit(req, &mut opts.limit)?;
    }
    let reader = db.reader()?;
    let blobs = db.blobs();
    quick_first_response(move |sink, attempt| {
        if attempt == Attempt::Quick && !quick(kind, &opts) {
            return Ok(false);
        }
        let c = counts(&reader, kind)?;
        run(&reader, &blobs, kind, &opts, &c, sink)?;
        Ok(true)
    })
    .await
}

/// What `GET /{db}/_all_docs` answers for query `pairs`, written into
/// `out` row by row (a list function's rows). Blocking.
pub(crate) fn answer_into(
    db: &settee_db::Database,
    pairs: &[(String, String)],
    partition: Option<String>,
    out: &mut dyn Out,
) -> ApiResult<()> {
    let mut o = Opts::default();
    for (k, v) in pairs {
        if k == "keys" {
            match parse_json_bytes(v.as_bytes())? {
                Value::Array(keys) => o.keys = Some(keys),
                _ => return Err(ApiError::bad_request("`keys` parameter must be an array.")),
            }
        } else {
            o.apply(k, Src::Text(v))?;
        }
    }
    validate(&o)?;
    o.partition = partition;
    let reader = db.reader()?;
    let blobs = db.blobs();
    let c = counts(&reader, Kind::All)?;
    run(&reader, &blobs, Kind::All, &o, &c, out)
}

/// Most rows a query answered on the connection's thread may skip.
const QUICK_SKIP_MAX: u64 = 1000;

/// Most keys a query answered on the connection's thread may look up.
const QUICK_KEYS_MAX: usize = 64;

/// Whether a query is quick enough to answer on the connection's thread
/// (see [`quick_first_response`]): no unbounded skipping or looking up,
/// and no count of the design documents (a scan of them all).
fn quick(kind: Kind, o: &Opts) -> bool {
    kind != Kind::Design
        && o.skip <= QUICK_SKIP_MAX
        && o.keys.as_ref().is_none_or(|k| k.len() <= QUICK_KEYS_MAX)
}

/// Most queries in one `/queries` request.
const QUERIES_MAX: usize = 100;

pub async fn queries(app: &App, req: &mut Req, name: &str, kind: Kind) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    super::users_db::listing(req, name)?;
    require_db_reader(req)?;
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
    base.apply_pairs(query_pairs(req))?;
    let all: Vec<Opts> = list
        .iter()
        .map(|q| {
            let Value::Object(m) = q else {
                return Err(ApiError::bad_request("each query must be a JSON object"));
            };
            let mut o = base.clone();
            o.apply_object(m)?;
            validate(&o)?;
            Ok(o)
        })
        .collect::<ApiResult<_>>()?;
    let reader = db.reader()?;
    let blobs = db.blobs();
    let out = tokio::task::spawn_blocking(move || -> ApiResult<String> {
        let c = counts(&reader, kind)?;
        let mut sink = Sink::collect();
        sink.buf.push_str("{\"results\":[");
        for (i, o) in all.iter().enumerate() {
            if i > 0 {
                sink.buf.push(',');
            }
            run(&reader, &blobs, kind, o, &c, &mut sink)?;
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
        validate(&o).unwrap();
        o
    }

    fn err(v: Value) -> String {
        let mut o = Opts::default();
        o.apply_object(v.as_object().unwrap())
            .map_err(ApiError::from)
            .and_then(|_| validate(&o))
            .unwrap_err()
            .reason
            .to_string()
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
        assert_eq!(e.to_string(), "Invalid value for positive integer: \"-1\"");
        let e = o.apply("limit", Src::Text("1.5")).unwrap_err();
        assert_eq!(e.to_string(), "Invalid value for integer: \"1.5\"");
        let e = o.apply("include_docs", Src::Text("1")).unwrap_err();
        assert_eq!(e.to_string(), "Invalid boolean parameter: \"1\"");
        let e = o.apply("startkey", Src::Text("c")).unwrap_err();
        assert_eq!(ApiError::from(e).error, "bad_request");
    }
}
