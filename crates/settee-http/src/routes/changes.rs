//! `_changes`: feeds normal, longpoll, continuous (`live` is its alias) and
//! eventsource; since (`0`, `now`, a sequence), limit, descending,
//! include_docs, conflicts, style, heartbeat, timeout, seq_interval;
//! filters `_doc_ids`, `_selector`, `_design`, and the JavaScript ones
//! (`ddoc/name` and `_view`, run by settee-design).
//!
//! Sequences are the engine's integer `update_seq`, sent as JSON strings
//! (`"5"`) as CouchDB sends its opaque ones; `since` takes `now`, a number,
//! `"5"` or CouchDB's `"5-…"`.
//!
//! Invariants:
//! - What a feed reports is CouchDB's accounting of one walk over the
//!   changes: a walk goes through the by-seq rows after `since` (all of
//!   them, newest first, when descending), or, for `_design` and
//!   `_doc_ids` with at most [`DOC_IDS_LOOKUP_MAX`] ids, through the named
//!   documents looked up by id (in sequence order; ascending, `last_seq`
//!   is then the database's `update_seq`). `pending` is the number of
//!   by-seq rows the walk has not gone through; a walk cut by `limit`
//!   looks at one row more, which counts as gone through when the filter
//!   drops it (for `pending` too, except with a JavaScript filter, whose
//!   `pending` CouchDB counts from the last row sent). Counting the rows
//!   left costs a bucket of rows and one count
//!   per later bucket (`Reader::count_changes_after`), never a scan of
//!   what is left.
//! - `seq_interval=N` sends a row's seq only when CouchDB would: when the
//!   limit left before the row (`limit`, or 10^15) is a multiple of N.
//! - Rows come from storage snapshots on the blocking pool, in batches of at
//!   most [`SCAN_BATCH`] scanned rows, so a feed over a large database
//!   streams and never holds a snapshot or a worker for long.
//! - A JavaScript filter judges rows in batches (one call per batch, as
//!   CouchDB sends them to its query server): the first as large as the
//!   rows the limit still allows (plus the one looked at past it), each
//!   later one twice the last, at most [`JS_BATCH_MAX`]. With
//!   `style=all_docs` it judges every leaf and a row lists only the
//!   leaves that passed. The filter's `req` is CouchDB's request object
//!   ([`filter_req`]).
//! - A live feed makes its first walk before it answers, so that a filter
//!   that fails on the first changes is an error response (as CouchDB's),
//!   not a cut stream; a later failure ends the stream.
//! - Live feeds subscribe to the database's committed-seq watch *before*
//!   reading, and wait for an `update_seq` beyond the one of the snapshot
//!   last read (not beyond `last_seq`: purges and settings advance
//!   `update_seq` without a row), so a commit racing the read is never
//!   missed and nothing spins.
//! - A live feed ends on its timeout (unless heartbeats keep it open),
//!   when its limit is reached (a negative limit: after the first walk),
//!   when the client goes away, or at shutdown. Before it first waits
//!   having sent nothing, it sends a newline, as CouchDB does.
//! - The normal feed sends an `ETag` (the database's incarnation and
//!   `update_seq`: any change to the answer changes it) and answers a
//!   matching `If-None-Match` with 304.

use std::collections::HashSet;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use settee_core::selector::Selector;
use settee_db::{ChangeRow, Database, GetOptions, Reader};
use settee_design::ChangesFilter;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::allow;
use crate::auth::require_db_reader;
use crate::error::{ApiError, ApiResult};
use crate::render::{json_response, push_doc, push_rev, push_str, push_u64, Extras};
use crate::request::{parse_json_bytes, Req};
use crate::server::NoCompress;
use crate::state::App;
use crate::stream::blocking_response;
use settee_db::blobs::Blobs;
use settee_db::json::{push_doc_blobs, AttView};

/// Rows examined per blocking scan of a live feed.
const SCAN_BATCH: u64 = 1000;
/// Most rows a JavaScript filter judges in one call.
const JS_BATCH_MAX: usize = 512;
/// Most ids a `_doc_ids` filter may name.
const DOC_IDS_MAX: usize = 10_000;
/// Up to this many ids, `_doc_ids` looks the documents up instead of
/// scanning the changes (CouchDB's `doc_ids_limit`).
const DOC_IDS_LOOKUP_MAX: usize = 100;
/// Smallest heartbeat interval honoured.
const HEARTBEAT_MIN_MS: u64 = 10;
/// CouchDB's limit when none is given (`seq_interval` counts from it).
const DEFAULT_LIMIT: i128 = 1_000_000_000_000_000;

const DESIGN_LO: &str = "_design/";
const DESIGN_HI: &str = "_design0";

/// Appends a sequence as CouchDB sends one: a JSON string.
pub fn push_seq(out: &mut String, seq: u64) {
    out.push('"');
    push_u64(out, seq);
    out.push('"');
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    Normal,
    Longpoll,
    Continuous,
    EventSource,
}

enum Filter {
    None,
    /// The ids (each once) and the same as a set.
    DocIds(Vec<String>, HashSet<String>),
    Selector(Selector),
    Design,
    /// A JavaScript filter function, or `_view`.
    Js(Box<ChangesFilter>),
}

struct Params {
    feed: Feed,
    since: u64,
    descending: bool,
    /// `limit` as given (negative allowed), or [`DEFAULT_LIMIT`].
    limit: i128,
    include_docs: bool,
    conflicts: bool,
    all_leaves: bool,
    heartbeat_ms: Option<u64>,
    timeout_ms: u64,
    filter: Filter,
    seq_interval: Option<u64>,
    /// How `include_docs` shows attachments, and where their bytes are.
    atts: AttView,
    blobs: Option<Blobs>,
}

impl Params {
    /// Rows the feed may send (a negative limit sends everything there is).
    fn budget(&self) -> u64 {
        if self.limit < 0 {
            u64::MAX
        } else {
            u64::try_from(self.limit).unwrap_or(u64::MAX)
        }
    }

    /// Whether the `index`-th row sent (from 0) shows its sequence.
    fn shows_seq(&self, index: u64) -> bool {
        match self.seq_interval {
            None => true,
            Some(n) => (self.limit - i128::from(index)) % i128::from(n) == 0,
        }
    }
}

/// `since` as CouchDB takes it: `now`, a number, or a sequence string
/// (`"5"`, `5-opaque`, quoted or not).
fn parse_since(s: &str, db: &Database) -> ApiResult<u64> {
    let s = s.trim();
    if s == "now" {
        return Ok(db.update_seq());
    }
    let unquoted = s
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(s);
    let number = match unquoted.split_once('-') {
        Some((n, _)) => n,
        None => unquoted,
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::bad_request(
            "Malformed sequence supplied in 'since' parameter.",
        ));
    }
    number
        .parse::<u64>()
        .map_err(|_| ApiError::bad_request("Malformed sequence supplied in 'since' parameter."))
}

fn doc_ids(v: &Value) -> ApiResult<Filter> {
    let bad = || ApiError::bad_request("`doc_ids` filter parameter is not a list of doc ids.");
    let list = v.as_array().ok_or_else(bad)?;
    if list.len() > DOC_IDS_MAX {
        return Err(ApiError::bad_request(format!(
            "at most {DOC_IDS_MAX} doc ids per `_doc_ids` filter"
        )));
    }
    let mut ids = Vec::with_capacity(list.len());
    let mut set = HashSet::with_capacity(list.len());
    for id in list {
        let id = id.as_str().ok_or_else(bad)?;
        if set.insert(id.to_string()) {
            ids.push(id.to_string());
        }
    }
    Ok(Filter::DocIds(ids, set))
}

/// `ddoc/name` of a JavaScript filter (or `view=`), or CouchDB's 400.
fn ddoc_and_name<'a>(spec: &'a str, form_error: &'static str) -> ApiResult<(&'a str, &'a str)> {
    let parts: Vec<&str> = spec.split('/').filter(|p| !p.is_empty()).collect();
    match parts.as_slice() {
        [ddoc, name] => Ok((ddoc, name)),
        _ => Err(ApiError::bad_request(form_error)),
    }
}

/// Loads a JavaScript filter (`req` None: `_view`) from the database, with
/// CouchDB's checks (settee-design), on the blocking pool.
async fn js_filter(
    app: &App,
    db: &Database,
    ddoc: &str,
    name: &str,
    req: Option<Value>,
) -> ApiResult<Filter> {
    let (app, db) = (app.clone(), db.clone());
    let (ddoc, name) = (ddoc.to_string(), name.to_string());
    let filter = tokio::task::spawn_blocking(move || -> ApiResult<ChangesFilter> {
        let reader = db.reader()?;
        Ok(match req {
            Some(req) => app.design.changes_filter(&reader, &ddoc, &name, req)?,
            None => app.design.view_filter(&reader, &ddoc, &name)?,
        })
    })
    .await??;
    Ok(Filter::Js(Box::new(filter)))
}

/// CouchDB's request object, the second argument of a filter function:
/// the database's info, the request's method, paths, query (the last
/// value of a repeated parameter), headers, body (the JSON object a POST
/// sent, else `"undefined"`), `userCtx` and `secObj`; `id` is null and
/// `uuid` fresh, as for `_changes` in CouchDB. Credentials stay out of it
/// as in CouchDB 3.4: no `Authorization` or `Cookie` header, and `cookie`
/// is empty. `peer` is null: the connection's address does not reach
/// handlers.
fn filter_req(
    app: &App,
    req: &Req,
    db: &Database,
    body: Option<&Map<String, Value>>,
) -> ApiResult<Value> {
    let mut query = Map::new();
    for (k, v) in req.query.pairs() {
        query.insert(k.clone(), Value::String(v.clone()));
    }
    let mut headers = Map::new();
    for (name, value) in &req.headers {
        if name == header::AUTHORIZATION || name == header::COOKIE {
            continue;
        }
        if let Ok(v) = value.to_str() {
            headers.insert(header_case(name.as_str()), Value::String(v.to_string()));
        }
    }
    let raw_path = req
        .uri
        .path_and_query()
        .map_or_else(|| req.uri.path().to_string(), |pq| pq.as_str().to_string());
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let requested: Vec<Value> = raw_path
        .trim_start_matches('/')
        .split('/')
        .map(|s| Value::String(decode(s)))
        .collect();
    Ok(json!({
        "info": super::db::info_json(&db.info()?),
        "uuid": app.new_uuid(),
        "id": null,
        "method": req.method.as_str(),
        "requested_path": requested,
        "path": [db.name(), "_changes"],
        "raw_path": raw_path,
        "query": query,
        "headers": headers,
        "body": body.map_or_else(|| Value::String("undefined".into()), |b| Value::Object(b.clone())),
        "peer": null,
        "form": {},
        "cookie": {},
        "userCtx": {"db": db.name(), "name": req.user.name, "roles": req.user.roles},
        "secObj": crate::auth::security_object(req),
    }))
}

/// A header name as clients usually spell it (`content-type` →
/// `Content-Type`); HTTP/1 names arrive lowercased.
fn header_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        out.push(if upper { c.to_ascii_uppercase() } else { c });
        upper = c == '-';
    }
    out
}

async fn parse_params(app: &App, req: &mut Req, db: &Database) -> ApiResult<Params> {
    // A POST body comes first (as in CouchDB): it must be a JSON object.
    let body: Option<Map<String, Value>> = if req.method == Method::POST {
        // CouchDB wants a JSON content type on every POST, bodiless too.
        req.require_json_ctype()?;
        let bytes = req.body_bytes().await?;
        if bytes.is_empty() {
            None
        } else {
            match parse_json_bytes(&bytes)? {
                Value::Object(m) => Some(m),
                _ => return Err(ApiError::bad_request("Request body must be a JSON object")),
            }
        }
    } else {
        None
    };
    // CouchDB's _changes reads every parameter in order: each occurrence
    // of a valued one is checked and the last counts; a flag is on when
    // any occurrence is `true` (another value leaves it as it was).
    let q = &req.query;
    fn each<T>(
        q: &crate::request::Query,
        key: &str,
        parse: impl Fn(&str) -> ApiResult<T>,
    ) -> ApiResult<Option<T>> {
        let mut last = None;
        for v in q.all(key) {
            last = Some(parse(v)?);
        }
        Ok(last)
    }
    let heartbeat_ms = each(q, "heartbeat", |v| match v {
        "true" => Ok(60_000),
        v => match v.parse::<i64>() {
            Ok(n) if n > 0 => Ok((n as u64).max(HEARTBEAT_MIN_MS)),
            Ok(_) => Err(ApiError::bad_request(
                "The heartbeat value should be a positive integer (in milliseconds).",
            )),
            Err(_) => Err(ApiError::bad_request(
                "Invalid heartbeat value. Expecting a positive integer value (in milliseconds).",
            )),
        },
    })?;
    let seq_interval = each(q, "seq_interval", |v| match v.parse::<i64>() {
        Ok(n) if n > 0 => Ok(n as u64),
        _ => Err(ApiError::bad_request("invalid_seq_interval")),
    })?;
    let all_leaves = each(q, "style", |v| match v {
        "main_only" => Ok(false),
        "all_docs" => Ok(true),
        _ => Err(ApiError::bad_request("Supplied style is not valid")),
    })?
    .unwrap_or(false);
    let limit = each(q, "limit", |v| {
        v.parse::<i64>()
            .map(i128::from)
            .map_err(|_| ApiError::query_parse(format!("Invalid value for integer: \"{v}\"")))
    })?
    .unwrap_or(DEFAULT_LIMIT);
    // A negative timeout is no wait at all (CouchDB takes any integer).
    let timeout_ms = each(q, "timeout", |v| match v.parse::<i64>() {
        Ok(n) if n < 0 => Ok(0),
        _ => crate::request::Query::from_pairs(vec![("timeout".into(), v.into())])
            .u64("timeout")
            .map(|n| n.unwrap_or(0)),
    })?
    .unwrap_or(req.settings.changes_timeout_ms);
    let descending = q.any_true("descending");
    let include_docs = q.any_true("include_docs");
    let conflicts = q.any_true("conflicts");
    let filter = match q.get("filter").unwrap_or("") {
        "" => Filter::None,
        "_doc_ids" => match &body {
            Some(b) => doc_ids(b.get("doc_ids").unwrap_or(&Value::Null))?,
            None if req.method == Method::POST => doc_ids(&Value::Null)?,
            None => doc_ids(&parse_json_bytes(
                q.get("doc_ids").unwrap_or("null").as_bytes(),
            )?)?,
        },
        "_selector" => {
            let Some(body) = &body else {
                return Err(ApiError::bad_request(
                    "Selector must be specified in POST payload",
                ));
            };
            match body.get("selector") {
                Some(sel @ Value::Object(_)) => Filter::Selector(Selector::parse(sel)?),
                _ => {
                    return Err(ApiError::bad_request(
                        "Selector error: expected a JSON object",
                    ))
                }
            }
        }
        "_design" => Filter::Design,
        "_view" => {
            let view = q.get("view").unwrap_or("");
            if view.is_empty() {
                return Err(ApiError::bad_request(
                    "`view` filter parameter is not provided.",
                ));
            }
            let (ddoc, name) =
                ddoc_and_name(view, "`view` must be of the form `designname/viewname`")?;
            js_filter(app, db, ddoc, name, None).await?
        }
        other if other.starts_with('_') => {
            return Err(ApiError::bad_request("unknown builtin filter name"))
        }
        other if other.split('/').all(str::is_empty) => Filter::None,
        other => {
            let (ddoc, name) = ddoc_and_name(
                other,
                "`filter` must be of the form `designname/filtername`",
            )?;
            let req_object = filter_req(app, req, db, body.as_ref())?;
            js_filter(app, db, ddoc, name, Some(req_object)).await?
        }
    };
    let q = &req.query;
    let feed = match q.get("feed").unwrap_or("normal") {
        "normal" => Feed::Normal,
        "longpoll" => Feed::Longpoll,
        "continuous" | "live" => Feed::Continuous,
        "eventsource" => Feed::EventSource,
        _ => {
            return Err(ApiError::bad_request(
                "Supported `feed` types: normal, continuous, live, longpoll, eventsource",
            ))
        }
    };
    // An eventsource client reconnecting names where it was.
    let since_text = match (feed, req.header("last-event-id")) {
        (Feed::EventSource, Some(id)) => Some(id.to_string()),
        _ => q
            .get("since")
            .or_else(|| q.get("last-event-id"))
            .map(str::to_string),
    };
    let since = match since_text {
        Some(s) => parse_since(&s, db)?,
        None => 0,
    };
    Ok(Params {
        feed,
        since,
        descending,
        limit,
        include_docs,
        conflicts,
        all_leaves,
        heartbeat_ms,
        timeout_ms,
        filter,
        seq_interval,
        atts: AttView::from_flags(
            q.get("attachments") == Some("true"),
            q.get("att_encoding_info") == Some("true"),
        ),
        blobs: Some(db.blobs()),
    })
}

/// The document a selector sees: the winner's body with `_id`, `_rev` and
/// (for deletions) `_deleted`.
fn selector_doc(reader: &Reader, row: &ChangeRow) -> ApiResult<Value> {
    let opts = GetOptions {
        rev: Some(row.winner().clone()),
        ..GetOptions::default()
    };
    let mut map = match reader.get(&row.id, &opts) {
        Ok(d) => d.body.to_map(),
        Err(settee_db::Error::NotFound(_)) => serde_json::Map::new(),
        Err(e) => return Err(e.into()),
    };
    map.insert("_id".into(), Value::String(row.id.clone()));
    map.insert("_rev".into(), Value::String(row.winner().to_string()));
    if row.deleted() {
        map.insert("_deleted".into(), Value::Bool(true));
    }
    Ok(Value::Object(map))
}

/// Whether a built-in filter keeps a row.
fn keeps(reader: &Reader, p: &Params, row: &ChangeRow) -> ApiResult<bool> {
    Ok(match &p.filter {
        Filter::None => true,
        Filter::DocIds(_, ids) => ids.contains(&row.id),
        Filter::Design => row.id.starts_with(DESIGN_LO),
        Filter::Selector(sel) => sel.matches(&selector_doc(reader, row)?),
        // Judged in batches (`verdicts`), never one by one.
        Filter::Js(_) => true,
    })
}

/// What the filter made of a row.
enum Verdict {
    Drop,
    /// Kept; for a JavaScript filter, the verdict on each revision it
    /// judged (the winner, or every leaf with `style=all_docs`).
    Keep(Option<Vec<bool>>),
}

/// The filter's verdicts on a batch of rows, in order.
fn verdicts(reader: &Reader, p: &Params, rows: &[ChangeRow]) -> ApiResult<Vec<Verdict>> {
    if let Filter::Js(f) = &p.filter {
        let judged = f.judge(reader, rows, p.all_leaves)?;
        return Ok(judged
            .into_iter()
            .map(|v| {
                if v.contains(&true) {
                    Verdict::Keep(Some(v))
                } else {
                    Verdict::Drop
                }
            })
            .collect());
    }
    rows.iter()
        .map(|row| {
            Ok(if keeps(reader, p, row)? {
                Verdict::Keep(None)
            } else {
                Verdict::Drop
            })
        })
        .collect()
}

/// Renders one change row, the `index`-th the feed sends; `passed` says
/// which leaves a JavaScript filter passed (`style=all_docs` lists only
/// those).
fn render_row(
    reader: &Reader,
    p: &Params,
    row: &ChangeRow,
    index: u64,
    passed: Option<&[bool]>,
) -> ApiResult<String> {
    let mut out = String::with_capacity(96);
    out.push_str("{\"seq\":");
    if p.shows_seq(index) {
        push_seq(&mut out, row.seq);
    } else {
        out.push_str("null");
    }
    out.push_str(",\"id\":");
    push_str(&mut out, &row.id);
    out.push_str(",\"changes\":[");
    let leaves = if p.all_leaves {
        &row.leaves[..]
    } else {
        &row.leaves[..row.leaves.len().min(1)]
    };
    let mut listed = 0;
    for (i, (rev, _)) in leaves.iter().enumerate() {
        if p.all_leaves && passed.is_some_and(|v| !v.get(i).copied().unwrap_or(false)) {
            continue;
        }
        if listed > 0 {
            out.push(',');
        }
        listed += 1;
        out.push_str("{\"rev\":");
        push_rev(&mut out, rev);
        out.push('}');
    }
    out.push(']');
    if row.deleted() {
        out.push_str(",\"deleted\":true");
    }
    if p.include_docs {
        out.push_str(",\"doc\":");
        let opts = GetOptions {
            rev: Some(row.winner().clone()),
            conflicts: p.conflicts,
            ..GetOptions::default()
        };
        match reader.get(&row.id, &opts) {
            Ok(d) => {
                let extras = Extras {
                    atts: p.atts,
                    ..Extras::default()
                };
                match &p.blobs {
                    Some(blobs) => push_doc_blobs(&mut out, &d, extras, blobs)?,
                    None => push_doc(&mut out, &d, extras),
                }
            }
            Err(settee_db::Error::NotFound(_)) => out.push_str("null"),
            Err(e) => return Err(e.into()),
        }
    }
    out.push('}');
    Ok(out)
}

/// The outcome of one walk over the changes (see the module doc).
struct Walk {
    last_seq: u64,
    pending: u64,
    emitted: u64,
    /// The walk stopped at `scan_max` rows with more to go: walk again
    /// from `last_seq`.
    more: bool,
    /// The walk stopped at its emit budget.
    limit_hit: bool,
    /// `update_seq` of the snapshot walked.
    update_seq: u64,
}

/// The scan of a walk: what it has seen and sent so far.
struct Scan<'a> {
    reader: &'a Reader,
    p: &'a Params,
    budget: u64,
    scan_max: u64,
    first_index: u64,
    emit: &'a mut dyn FnMut(u64, &str) -> bool,
    w: Walk,
    examined: u64,
    /// The last row gone through.
    last: Option<u64>,
    /// The last row sent.
    last_sent: Option<u64>,
}

impl Scan<'_> {
    /// Rows to judge in the first batch: one for built-in filters; for a
    /// JavaScript one, the rows the limit allows plus the one looked at
    /// past it, within the scan.
    fn first_batch(&self, js: bool) -> usize {
        if !js {
            return 1;
        }
        let wanted = self.budget.saturating_add(1).min(self.scan_left());
        usize::try_from(wanted)
            .unwrap_or(JS_BATCH_MAX)
            .clamp(1, JS_BATCH_MAX)
    }

    /// Rows to judge in the batch after one of `last` rows: twice as many
    /// (the filter dropped some), within the scan; one once the limit is
    /// reached (only the row past it is looked at).
    fn next_batch(&self, js: bool, last: usize) -> usize {
        if !js || self.w.limit_hit {
            return 1;
        }
        let left = usize::try_from(self.scan_left()).unwrap_or(JS_BATCH_MAX);
        last.saturating_mul(2).min(left).clamp(1, JS_BATCH_MAX)
    }

    /// Rows the scan may still go through, and the one that tells it
    /// there are more.
    fn scan_left(&self) -> u64 {
        self.scan_max
            .saturating_sub(self.examined)
            .saturating_add(1)
    }

    /// Judges the buffered rows and goes through them in order (emptying
    /// the buffer); false when the walk is over.
    fn take(&mut self, rows: &mut Vec<ChangeRow>) -> ApiResult<bool> {
        let verdicts = verdicts(self.reader, self.p, rows)?;
        for (row, verdict) in rows.drain(..).zip(verdicts) {
            if !self.step(&row, verdict)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Goes through one row; false when the walk stops at it.
    fn step(&mut self, row: &ChangeRow, verdict: Verdict) -> ApiResult<bool> {
        if self.w.limit_hit {
            // One row past the limit: a row the filter drops counts as
            // gone through.
            if matches!(verdict, Verdict::Drop) {
                self.last = Some(row.seq);
            }
            return Ok(false);
        }
        if self.examined >= self.scan_max {
            self.w.more = true;
            return Ok(false);
        }
        self.examined += 1;
        self.last = Some(row.seq);
        let Verdict::Keep(passed) = verdict else {
            return Ok(true);
        };
        let index = self.first_index + self.w.emitted;
        let text = render_row(self.reader, self.p, row, index, passed.as_deref())?;
        self.w.emitted += 1;
        self.last_sent = Some(row.seq);
        if !(self.emit)(row.seq, &text) {
            return Ok(false);
        }
        self.w.limit_hit = self.w.emitted >= self.budget;
        Ok(true)
    }
}

/// Walks the changes after `since` (all of them when descending), looking
/// at no more than `scan_max` rows of a scan and sending no more than
/// `budget` rows to `emit` (the first as the feed's `first_index`-th);
/// `emit` returns false when the client is gone.
fn walk(
    reader: &Reader,
    p: &Params,
    since: u64,
    budget: u64,
    scan_max: u64,
    first_index: u64,
    emit: &mut dyn FnMut(u64, &str) -> bool,
) -> ApiResult<Walk> {
    let state = reader.state()?;
    let rows_total = state.doc_count + state.doc_del_count;
    let mut w = Walk {
        last_seq: if p.descending {
            state.update_seq
        } else {
            since
        },
        pending: 0,
        emitted: 0,
        more: false,
        limit_hit: budget == 0,
        update_seq: state.update_seq,
    };
    let lookup = match &p.filter {
        Filter::DocIds(ids, _) => Some(ids.len() <= DOC_IDS_LOOKUP_MAX),
        Filter::Design => Some(true),
        _ => None,
    };
    if lookup == Some(true) {
        let mut rows: Vec<ChangeRow> = match &p.filter {
            Filter::DocIds(ids, _) => {
                let mut rows = Vec::with_capacity(ids.len());
                for id in ids {
                    rows.extend(reader.change_row(id)?);
                }
                rows
            }
            _ => reader.change_rows_in(DESIGN_LO, DESIGN_HI)?,
        };
        rows.retain(|r| p.descending || r.seq > since);
        rows.sort_unstable_by_key(|r| r.seq);
        if p.descending {
            rows.reverse();
        }
        let mut pending = if p.descending {
            rows_total
        } else {
            reader.count_changes_after(since)?
        };
        let mut last = None;
        for row in &rows {
            if w.limit_hit {
                break;
            }
            pending = pending.saturating_sub(1);
            last = Some(row.seq);
            let text = render_row(reader, p, row, first_index + w.emitted, None)?;
            w.emitted += 1;
            if !emit(row.seq, &text) {
                break;
            }
            w.limit_hit = w.emitted >= budget;
        }
        w.pending = pending;
        w.last_seq = match last {
            Some(seq) if w.limit_hit || p.descending => seq,
            _ if w.limit_hit || p.descending => w.last_seq,
            _ => state.update_seq,
        };
        return Ok(w);
    }
    let js = matches!(p.filter, Filter::Js(_));
    let mut scan = Scan {
        reader,
        p,
        budget,
        scan_max,
        first_index,
        emit,
        w,
        examined: 0,
        last: None,
        last_sent: None,
    };
    let mut buffered: Vec<ChangeRow> = Vec::new();
    let mut target = scan.first_batch(js);
    let mut failure = None;
    let mut over = false;
    reader.changes(since, p.descending, u64::MAX, &mut |row| {
        buffered.push(row);
        if buffered.len() < target {
            return true;
        }
        match scan.take(&mut buffered) {
            Ok(true) => {
                target = scan.next_batch(js, target);
                true
            }
            Ok(false) => {
                over = true;
                false
            }
            Err(e) => {
                failure = Some(e);
                false
            }
        }
    })?;
    if failure.is_none() && !over && !buffered.is_empty() {
        if let Err(e) = scan.take(&mut buffered) {
            failure = Some(e);
        }
    }
    let Scan {
        mut w,
        last,
        last_sent,
        ..
    } = scan;
    if let Some(e) = failure {
        return Err(e);
    }
    if let Some(seq) = last {
        w.last_seq = seq;
    }
    if w.limit_hit {
        // CouchDB counts a dropped row past the limit as gone through for
        // `last_seq`, and for `pending` too, except with a JavaScript
        // filter, where `pending` is what follows the last row sent.
        let counted = if js { last_sent } else { last };
        w.pending = match (p.descending, counted) {
            (false, at) => reader.count_changes_after(at.unwrap_or(since))?,
            (true, Some(seq)) => {
                rows_total.saturating_sub(reader.count_changes_after(seq.saturating_sub(1))?)
            }
            (true, None) => rows_total,
        };
    }
    Ok(w)
}

pub async fn handle(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(
        req,
        &[Method::GET, Method::HEAD, Method::POST],
        "GET,POST,HEAD",
    )?;
    super::users_db::listing(req, name)?;
    require_db_reader(req)?;
    let db = app.db(name)?;
    let p = parse_params(app, req, &db).await?;
    if p.feed == Feed::Normal || (p.descending && p.feed == Feed::Longpoll) {
        let if_none_match = req.header(header::IF_NONE_MATCH).map(str::to_string);
        return normal(db, p, if_none_match).await;
    }
    live(app, db, p).await
}

async fn normal(db: Database, p: Params, if_none_match: Option<String>) -> ApiResult<Response> {
    let reader = db.reader()?;
    let etag = (p.feed == Feed::Normal)
        .then(|| -> ApiResult<String> {
            let state = reader.state()?;
            Ok(format!("\"{:x}-{}\"", db.created_us(), state.update_seq))
        })
        .transpose()?;
    if let (Some(etag), Some(inm)) = (&etag, &if_none_match) {
        if crate::render::none_match(Some(inm), etag) {
            return Ok(crate::render::not_modified(etag));
        }
    }
    let mut resp = blocking_response(move |sink| {
        sink.buf.push_str("{\"results\":[\n");
        let mut first = true;
        let w = walk(
            &reader,
            &p,
            p.since,
            p.budget(),
            u64::MAX,
            0,
            &mut |_, row| {
                if !first {
                    sink.buf.push_str(",\n");
                }
                first = false;
                sink.buf.push_str(row);
                sink.flush_if_full()
            },
        )?;
        sink.buf.push_str("\n],\n\"last_seq\":");
        push_seq(&mut sink.buf, w.last_seq);
        sink.buf.push_str(",\"pending\":");
        push_u64(&mut sink.buf, w.pending);
        sink.buf.push_str("}\n");
        Ok(())
    })
    .await?;
    if let Some(v) = etag.and_then(|e| HeaderValue::from_str(&e).ok()) {
        resp.headers_mut().insert(header::ETAG, v);
    }
    Ok(resp)
}

type Chunk = Result<Bytes, std::io::Error>;

/// Starts a live feed: its first walk is made before the answer (an error
/// there is an error response), the rest streams.
async fn live(app: &App, db: Database, p: Params) -> ApiResult<Response> {
    // Subscribed before the first read: no commit racing it is missed.
    let watch = db.subscribe();
    let p = std::sync::Arc::new(p);
    let first = walk_batch(&db, &p, p.since, 0).await?;
    let (tx, mut rx) = mpsc::channel::<Chunk>(16);
    let feed = p.feed;
    let closing = app.closing.subscribe();
    tokio::spawn(run_live(db, p, first, watch, tx, closing));
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let mut resp = json_response(StatusCode::OK, String::new());
    *resp.body_mut() = Body::from_stream(stream);
    if feed == Feed::EventSource {
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    resp.extensions_mut().insert(NoCompress);
    Ok(resp)
}

/// The rows of one walk of a live feed (see [`walk`]) from `since`, the
/// first of them the feed's `emitted`-th, on the blocking pool.
async fn walk_batch(
    db: &Database,
    p: &std::sync::Arc<Params>,
    since: u64,
    emitted: u64,
) -> ApiResult<(Walk, Vec<(u64, String)>)> {
    let reader = db.reader()?;
    let pp = p.clone();
    // A descending walk starts from the newest change every time: it is
    // one pass (then the feed ends), never resumed in batches.
    let scan = if p.descending { u64::MAX } else { SCAN_BATCH };
    let remaining = p.budget().saturating_sub(emitted);
    tokio::task::spawn_blocking(move || {
        let mut rows: Vec<(u64, String)> = Vec::new();
        let w = walk(
            &reader,
            &pp,
            since,
            remaining,
            scan,
            emitted,
            &mut |seq, row| {
                rows.push((seq, row.to_string()));
                true
            },
        );
        w.map(|w| (w, rows))
    })
    .await?
}

/// Sends a chunk; false when the client is gone.
async fn send(tx: &mpsc::Sender<Chunk>, text: String) -> bool {
    tx.send(Ok(Bytes::from(text))).await.is_ok()
}

async fn run_live(
    db: Database,
    p: std::sync::Arc<Params>,
    first: (Walk, Vec<(u64, String)>),
    mut watch: tokio::sync::watch::Receiver<u64>,
    tx: mpsc::Sender<Chunk>,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    let mut first = Some(first);
    let mut since = p.since;
    let mut pending = 0;
    let mut emitted = 0u64;
    let mut sent_any = false;
    let mut longpoll_rows: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(p.timeout_ms);
    let heartbeat = p.heartbeat_ms.map(Duration::from_millis);
    'feed: loop {
        let index = emitted;
        let batch = match first.take() {
            Some(batch) => Ok(batch),
            None => {
                watch.borrow_and_update();
                walk_batch(&db, &p, since, emitted).await
            }
        };
        let (w, rows) = match batch {
            Ok(x) => x,
            // The database was deleted under the feed: the feed ends, as
            // when its sequence watch closes.
            Err(e) if e.status == axum::http::StatusCode::NOT_FOUND => break 'feed,
            Err(e) => {
                // After the headers, an error can only cut the response.
                tracing::warn!(db = %db.name(), error = %e.reason, "live _changes feed failed mid-stream");
                let _ = tx
                    .send(Err(std::io::Error::other(e.reason.to_string())))
                    .await;
                return;
            }
        };
        emitted += w.emitted;
        since = w.last_seq;
        pending = w.pending;
        let seen = w.update_seq;
        for (i, (seq, row)) in rows.into_iter().enumerate() {
            let text = match p.feed {
                Feed::Continuous => row + "\n",
                Feed::EventSource => {
                    let mut id = String::new();
                    if p.shows_seq(index + i as u64) {
                        push_seq(&mut id, seq);
                    } else {
                        id.push_str("null");
                    }
                    format!("data: {row}\nid: {id}\n\n")
                }
                _ => {
                    longpoll_rows.push(row);
                    continue;
                }
            };
            sent_any = true;
            if !send(&tx, text).await {
                return;
            }
        }
        if w.limit_hit || (p.limit < 0 && !w.more) || p.descending {
            break;
        }
        if w.more {
            continue;
        }
        if p.feed == Feed::Longpoll && emitted > 0 {
            break;
        }
        if !sent_any && p.feed != Feed::Longpoll {
            sent_any = true;
            if !send(&tx, "\n".to_string()).await {
                return;
            }
        }
        // Wait for a commit past the snapshot just read, sending heartbeats.
        let mut next_beat = heartbeat.map(|h| Instant::now() + h);
        loop {
            if *watch.borrow_and_update() > seen {
                continue 'feed;
            }
            let beat_at = next_beat.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            let end_at = if heartbeat.is_some() {
                Instant::now() + Duration::from_secs(86_400)
            } else {
                deadline
            };
            tokio::select! {
                r = watch.changed() => if r.is_err() { break 'feed },
                _ = tokio::time::sleep_until(beat_at), if next_beat.is_some() => {
                    let beat = if p.feed == Feed::EventSource { "event: heartbeat\ndata: \n\n" } else { "\n" };
                    if !send(&tx, beat.to_string()).await {
                        return;
                    }
                    next_beat = heartbeat.map(|h| Instant::now() + h);
                }
                _ = tokio::time::sleep_until(end_at) => break 'feed,
                _ = tx.closed() => return,
                _ = closing.changed() => break 'feed,
            }
        }
    }
    let mut end = String::new();
    match p.feed {
        Feed::Longpoll => {
            end.push_str("{\"results\":[\n");
            end.push_str(&longpoll_rows.join(",\n"));
            end.push_str("\n],\n\"last_seq\":");
            push_seq(&mut end, since);
            end.push_str(",\"pending\":");
            push_u64(&mut end, pending);
            end.push_str("}\n");
        }
        Feed::Continuous => {
            end.push_str("{\"last_seq\":");
            push_seq(&mut end, since);
            end.push_str(",\"pending\":");
            push_u64(&mut end, pending);
            end.push_str("}\n");
        }
        _ => {}
    }
    if !end.is_empty() {
        let _ = send(&tx, end).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_interval_follows_the_limit_left() {
        let mut p = Params {
            feed: Feed::Normal,
            since: 0,
            descending: false,
            limit: DEFAULT_LIMIT,
            include_docs: false,
            conflicts: false,
            all_leaves: false,
            heartbeat_ms: None,
            timeout_ms: 0,
            filter: Filter::None,
            seq_interval: Some(2),
            atts: AttView::Stubs,
            blobs: None,
        };
        let shown = |p: &Params| (0..5).map(|i| p.shows_seq(i)).collect::<Vec<_>>();
        assert_eq!(shown(&p), [true, false, true, false, true]);
        p.seq_interval = Some(3);
        assert_eq!(shown(&p), [false, true, false, false, true]);
        p.limit = 3;
        p.seq_interval = Some(2);
        assert_eq!(shown(&p)[..3], [false, true, false]);
        p.seq_interval = None;
        assert!(shown(&p).iter().all(|s| *s));
    }

    #[test]
    fn javascript_filters_are_named_ddoc_slash_name() {
        let form = "`filter` must be of the form `designname/filtername`";
        assert_eq!(ddoc_and_name("d/f", form).unwrap(), ("d", "f"));
        assert_eq!(ddoc_and_name("/d//f/", form).unwrap(), ("d", "f"));
        for bad in ["d", "d/f/g", "/f"] {
            let e = ddoc_and_name(bad, form).unwrap_err();
            assert_eq!(
                (e.status, e.reason.as_ref()),
                (StatusCode::BAD_REQUEST, form)
            );
        }
    }

    #[test]
    fn header_names_are_spelled_as_clients_send_them() {
        assert_eq!(header_case("content-type"), "Content-Type");
        assert_eq!(header_case("x-couch-full-commit"), "X-Couch-Full-Commit");
        assert_eq!(header_case("host"), "Host");
    }
}
