//! Views over document ids: `_all_docs`, `_design_docs`, `_local_docs`
//! (GET, and POST with options and `keys` in the body) and their
//! `/queries` forms.
//!
//! Invariants:
//! - Keys are document ids; JSON keys that are not strings are placed by
//!   CouchDB collation (null, booleans and numbers before every string;
//!   arrays and objects after), so such ranges are empty or unbounded,
//!   never an error.
//! - Range queries answer live documents only; `keys` queries answer one
//!   row per key, deleted documents with `"deleted":true` and unknown ids
//!   with `"error":"not_found"`.
//! - Scans run on the blocking pool and stream (see [`crate::stream`]).
//! - `offset` is exact when no start key is given; with a start key it is
//!   `null` (counting the rows before the key would cost a scan per page).

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{Map, Value};
use settee_db::{Database, IdRange, LocalDoc, Reader};

use super::allow;
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

/// Where a JSON key falls relative to document ids.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bound {
    /// Before every string (null, booleans, numbers).
    Low,
    Id(String),
    /// After every string (arrays, objects).
    High,
}

fn bound(v: &Value) -> Bound {
    match v {
        Value::String(s) => Bound::Id(s.clone()),
        Value::Array(_) | Value::Object(_) => Bound::High,
        _ => Bound::Low,
    }
}

/// Parsed options of one query.
#[derive(Debug, Clone)]
struct Opts {
    keys: Option<Vec<Value>>,
    start: Option<Bound>,
    end: Option<Bound>,
    inclusive_end: bool,
    descending: bool,
    limit: u64,
    skip: u64,
    include_docs: bool,
    conflicts: bool,
    update_seq: bool,
}

const JSON_PARAMS: &[&str] = &["key", "keys", "startkey", "start_key", "endkey", "end_key"];
const BOOL_PARAMS: &[&str] = &[
    "inclusive_end",
    "descending",
    "include_docs",
    "conflicts",
    "update_seq",
];

/// Query-string parameters as JSON values (what a POST body holds).
fn query_params(req: &Req) -> ApiResult<Map<String, Value>> {
    let mut m = Map::new();
    for (k, v) in req.query.pairs() {
        let value = if JSON_PARAMS.contains(&k.as_str()) {
            parse_json_bytes(v.as_bytes())
                .map_err(|_| ApiError::query_parse(format!("Invalid JSON for {k}: {v}")))?
        } else if BOOL_PARAMS.contains(&k.as_str()) {
            match v.as_str() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => {
                    return Err(ApiError::query_parse(format!(
                        "Invalid boolean parameter: \"{v}\" for {k}"
                    )))
                }
            }
        } else if k == "limit" || k == "skip" {
            let n: u64 = v.parse().map_err(|_| {
                ApiError::query_parse(format!("Invalid value for integer parameter {k}: \"{v}\""))
            })?;
            Value::from(n)
        } else {
            Value::String(v.clone())
        };
        m.insert(k.clone(), value);
    }
    Ok(m)
}

fn parse_opts(p: &Map<String, Value>) -> ApiResult<Opts> {
    let get_bool = |k: &str, default: bool| match p.get(k) {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(ApiError::query_parse(format!(
            "Invalid boolean parameter: {v} for {k}"
        ))),
    };
    let get_u64 = |k: &str, default: u64| match p.get(k) {
        None => Ok(default),
        Some(v) => v.as_u64().ok_or_else(|| {
            ApiError::query_parse(format!("Invalid value for integer parameter {k}: {v}"))
        }),
    };
    let first = |names: &[&str]| names.iter().find_map(|n| p.get(*n));
    let docid = |names: &[&str]| {
        first(names)
            .and_then(Value::as_str)
            .map(|s| Bound::Id(s.to_string()))
    };
    let mut keys = match p.get("keys") {
        None => None,
        Some(Value::Array(a)) => Some(a.clone()),
        Some(_) => return Err(ApiError::query_parse("`keys` must be an array of strings")),
    };
    let (mut start, mut end) = (
        first(&["startkey", "start_key"]).map(bound),
        first(&["endkey", "end_key"]).map(bound),
    );
    if let Some(key) = p.get("key") {
        if keys.is_some() {
            return Err(ApiError::query_parse("`keys` is incompatible with `key`"));
        }
        start = Some(bound(key));
        end = Some(bound(key));
    }
    start = start.or_else(|| docid(&["startkey_docid", "start_key_doc_id"]));
    end = end.or_else(|| docid(&["endkey_docid", "end_key_doc_id"]));
    let descending = get_bool("descending", false)?;
    if keys.is_some() && (start.is_some() || end.is_some()) {
        return Err(ApiError::query_parse(
            "`keys` is incompatible with `startkey` and `endkey`",
        ));
    }
    if descending {
        if let Some(k) = keys.as_mut() {
            k.reverse();
        }
    }
    Ok(Opts {
        keys,
        start,
        end,
        inclusive_end: get_bool("inclusive_end", true)?,
        descending,
        limit: get_u64("limit", u64::MAX)?,
        skip: get_u64("skip", 0)?,
        include_docs: get_bool("include_docs", false)?,
        conflicts: get_bool("conflicts", false)?,
        update_seq: get_bool("update_seq", false)?,
    })
}

/// The id range of a query, or None when it is empty.
fn id_range(o: &Opts, kind: Kind) -> Option<IdRange> {
    let mut r = IdRange {
        inclusive_end: o.inclusive_end,
        descending: o.descending,
        skip: o.skip,
        limit: o.limit,
        ..IdRange::default()
    };
    // (start, end) in scan order; in descending order the start is the high end.
    let (empty_start, open_start, empty_end, open_end) = if o.descending {
        (Bound::Low, Bound::High, Bound::High, Bound::Low)
    } else {
        (Bound::High, Bound::Low, Bound::Low, Bound::High)
    };
    match &o.start {
        Some(b) if *b == empty_start => return None,
        Some(b) if *b == open_start => {}
        Some(Bound::Id(s)) => r.start = Some(s.clone()),
        _ => {}
    }
    match &o.end {
        Some(b) if *b == empty_end => return None,
        Some(b) if *b == open_end => {}
        Some(Bound::Id(s)) => r.end = Some(s.clone()),
        _ => {}
    }
    if kind == Kind::Design {
        let (lo, hi) = (DESIGN_LO.to_string(), DESIGN_HI.to_string());
        if o.descending {
            r.start = Some(r.start.map_or(hi.clone(), |s| s.min(hi)));
            r.end = Some(r.end.map_or(lo.clone(), |e| e.max(lo)));
        } else {
            r.start = Some(r.start.map_or(lo.clone(), |s| s.max(lo)));
            r.end = Some(r.end.map_or(hi.clone(), |e| e.min(hi)));
        }
    }
    Some(r)
}

fn push_row_head(out: &mut String, id: &str) {
    out.push_str("{\"id\":");
    push_str(out, id);
    out.push_str(",\"key\":");
    push_str(out, id);
}

/// Writes one query's answer object into `sink`.
fn run(
    reader: &Reader,
    kind: Kind,
    o: &Opts,
    total_rows: Option<u64>,
    update_seq: u64,
    sink: &mut Sink,
) -> ApiResult<()> {
    let out = &mut sink.buf;
    out.push_str("{\"total_rows\":");
    match total_rows {
        Some(n) => push_u64(out, n),
        None => out.push_str("null"),
    }
    out.push_str(",\"offset\":");
    if o.start.is_none() && o.keys.is_none() {
        push_u64(out, o.skip);
    } else {
        out.push_str("null");
    }
    if o.update_seq {
        out.push_str(",\"update_seq\":");
        push_u64(out, update_seq);
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
        for key in keys.iter().skip(skip).take(limit) {
            let id = key.as_str().filter(|id| match kind {
                Kind::Local => id.starts_with("_local/"),
                Kind::Design => id.starts_with(DESIGN_LO),
                Kind::All => !id.starts_with("_local/"),
            });
            sep(&mut sink.buf, &mut first);
            let out = &mut sink.buf;
            let found = match (id, kind) {
                (None, _) => None,
                (Some(id), Kind::Local) => reader
                    .get_local(id)?
                    .map(|d| push_local_row(out, &d, o.include_docs)),
                (Some(id), _) => reader
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

fn counts(db: &Database, kind: Kind) -> ApiResult<(Option<u64>, u64)> {
    if kind == Kind::Local {
        return Ok((None, db.update_seq()));
    }
    let info = db.info()?;
    Ok((Some(info.doc_count), info.update_seq))
}

pub async fn handle(app: &App, req: &mut Req, name: &str, kind: Kind) -> ApiResult<Response> {
    allow(
        req,
        &[Method::GET, Method::HEAD, Method::POST],
        "GET,HEAD,POST",
    )?;
    require_db_reader(&req.settings, &req.user)?;
    let db = app.db(name)?;
    let mut params = query_params(req)?;
    if req.method == Method::POST {
        let body: Map<String, Value> = req.json().await?;
        params.extend(body);
    }
    let opts = parse_opts(&params)?;
    let reader = db.reader()?;
    blocking_response(move |sink| {
        let (total, seq) = counts(&db, kind)?;
        run(&reader, kind, &opts, total, seq, sink)
    })
    .await
}

/// Most queries in one `/queries` request.
const QUERIES_MAX: usize = 100;

pub async fn queries(app: &App, req: &mut Req, name: &str, kind: Kind) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    require_db_reader(&req.settings, &req.user)?;
    let db = app.db(name)?;
    let body: Value = req.json().await?;
    let Some(Value::Array(list)) = body.get("queries") else {
        return Err(ApiError::bad_request("`queries` member must be an array"));
    };
    if list.len() > QUERIES_MAX {
        return Err(ApiError::bad_request(format!(
            "at most {QUERIES_MAX} queries per request"
        )));
    }
    let base = query_params(req)?;
    let all: Vec<Opts> = list
        .iter()
        .map(|q| {
            let Value::Object(m) = q else {
                return Err(ApiError::bad_request("each query must be a JSON object"));
            };
            let mut p = base.clone();
            p.extend(m.clone());
            parse_opts(&p)
        })
        .collect::<ApiResult<_>>()?;
    let reader = db.reader()?;
    let out = tokio::task::spawn_blocking(move || -> ApiResult<String> {
        let (total, seq) = counts(&db, kind)?;
        let mut sink = Sink::collect();
        sink.buf.push_str("{\"results\":[");
        for (i, o) in all.iter().enumerate() {
            if i > 0 {
                sink.buf.push(',');
            }
            run(&reader, kind, o, total, seq, &mut sink)?;
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
        parse_opts(v.as_object().unwrap()).unwrap()
    }

    #[test]
    fn ranges() {
        let r = id_range(&opts(json!({"startkey": "b", "endkey": "d"})), Kind::All).unwrap();
        assert_eq!(
            (r.start.as_deref(), r.end.as_deref()),
            (Some("b"), Some("d"))
        );
        assert!(id_range(&opts(json!({"startkey": [1]})), Kind::All).is_none());
        assert!(id_range(&opts(json!({"endkey": 1})), Kind::All).is_none());
        let r = id_range(&opts(json!({"startkey": null})), Kind::All).unwrap();
        assert_eq!(r.start, None);
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
        assert!(parse_opts(json!({"keys": ["a"], "startkey": "a"}).as_object().unwrap()).is_err());
    }
}
