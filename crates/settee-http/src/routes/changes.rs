//! `_changes`: feeds normal, longpoll, continuous and eventsource; since
//! (`0`, `now`, a sequence), limit, descending, include_docs, conflicts,
//! style, heartbeat, timeout; filters `_doc_ids`, `_selector`, `_design`.
//!
//! Sequences are the engine's integer `update_seq` (clients treat them as
//! opaque). `seq_interval` is accepted; every row carries its seq anyway.
//!
//! Invariants:
//! - Rows come from storage snapshots on the blocking pool, in batches of at
//!   most [`SCAN_BATCH`] scanned rows, so a feed over a large database
//!   streams and never holds a snapshot or a worker for long.
//! - Live feeds subscribe to the database's committed-seq watch *before*
//!   scanning, so a commit racing the scan is never missed.
//! - `last_seq` is the last sequence examined (not just emitted), so
//!   filtered feeds do not re-examine rows; `pending` is an upper bound
//!   (`update_seq - last_seq`) when a limit cut the feed, else 0.
//! - A live feed ends on its timeout (unless heartbeats keep it open),
//!   when its limit is reached, when the client goes away, or at shutdown.

use std::collections::HashSet;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Method};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;
use settee_core::selector::Selector;
use settee_db::{ChangeRow, Database, GetOptions, Reader};
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

/// Rows examined per blocking scan of a live feed.
const SCAN_BATCH: u64 = 1000;
/// Most ids a `_doc_ids` filter may name.
const DOC_IDS_MAX: usize = 10_000;
/// Smallest heartbeat interval honoured.
const HEARTBEAT_MIN_MS: u64 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    Normal,
    Longpoll,
    Continuous,
    EventSource,
}

enum Filter {
    None,
    DocIds(HashSet<String>),
    Selector(Selector),
    Design,
}

struct Params {
    feed: Feed,
    since: u64,
    descending: bool,
    limit: u64,
    include_docs: bool,
    conflicts: bool,
    all_leaves: bool,
    heartbeat_ms: Option<u64>,
    timeout_ms: u64,
    filter: Filter,
}

fn parse_since(s: &str, db: &Database) -> ApiResult<u64> {
    let s = s.trim();
    if s == "now" {
        return Ok(db.update_seq());
    }
    let unquoted = s
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(s);
    unquoted
        .parse::<u64>()
        .map_err(|_| ApiError::bad_request("Malformed sequence supplied in 'since' parameter."))
}

fn doc_ids(v: &Value) -> ApiResult<HashSet<String>> {
    let bad = || ApiError::bad_request("`doc_ids` filter parameter is not a list of doc ids.");
    let list = v.as_array().ok_or_else(bad)?;
    if list.len() > DOC_IDS_MAX {
        return Err(ApiError::bad_request(format!(
            "at most {DOC_IDS_MAX} doc ids per `_doc_ids` filter"
        )));
    }
    list.iter()
        .map(|id| id.as_str().map(str::to_string).ok_or_else(bad))
        .collect()
}

async fn parse_params(req: &mut Req, db: &Database) -> ApiResult<Params> {
    let q = &req.query;
    let feed = match q.get("feed").unwrap_or("normal") {
        "normal" => Feed::Normal,
        "longpoll" => Feed::Longpoll,
        "continuous" => Feed::Continuous,
        "eventsource" => Feed::EventSource,
        other => {
            return Err(ApiError::bad_request(format!(
                "Supplied feed `{other}` is not valid"
            )))
        }
    };
    let since = match q.get("since") {
        Some(s) => parse_since(s, db)?,
        None => 0,
    };
    let all_leaves = match q.get("style") {
        None | Some("main_only") => false,
        Some("all_docs") => true,
        Some(_) => return Err(ApiError::bad_request("Supplied style is not valid")),
    };
    let heartbeat_ms = match q.get("heartbeat") {
        None | Some("false") => None,
        Some("true") => Some(60_000),
        Some(v) => Some(
            v.parse::<u64>()
                .map_err(|_| ApiError::query_parse(format!("Invalid heartbeat value: {v}")))?
                .max(HEARTBEAT_MIN_MS),
        ),
    };
    let timeout_ms = q.u64("timeout")?.unwrap_or(req.settings.changes_timeout_ms);
    let descending = q.flag("descending")?;
    let limit = q.u64("limit")?.unwrap_or(u64::MAX);
    let include_docs = q.flag("include_docs")?;
    let conflicts = q.flag("conflicts")?;
    let filter_name = q.get("filter").map(str::to_string);
    let query_doc_ids = q.get("doc_ids").map(str::to_string);
    let body: Option<Value> = if req.method == Method::POST {
        let bytes = req.body_bytes().await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            req.require_json_ctype()?;
            Some(parse_json_bytes(&bytes)?)
        }
    } else {
        None
    };
    let filter = match filter_name.as_deref() {
        None | Some("") => Filter::None,
        Some("_doc_ids") => {
            let ids = match (body.as_ref().and_then(|b| b.get("doc_ids")), query_doc_ids) {
                (Some(v), _) => doc_ids(v)?,
                (None, Some(q)) => doc_ids(&parse_json_bytes(q.as_bytes()).map_err(|_| {
                    ApiError::bad_request("`doc_ids` filter parameter is not a list of doc ids.")
                })?)?,
                (None, None) => {
                    return Err(ApiError::bad_request(
                        "`doc_ids` filter parameter is not a list of doc ids.",
                    ))
                }
            };
            Filter::DocIds(ids)
        }
        Some("_selector") => {
            let sel = body
                .as_ref()
                .and_then(|b| b.get("selector"))
                .ok_or_else(|| {
                    ApiError::bad_request("Selector must be specified in POST payload")
                })?;
            Filter::Selector(Selector::parse(sel)?)
        }
        Some("_design") => Filter::Design,
        Some("_view") => return Err(ApiError::not_implemented()),
        Some(other) => {
            if other.contains('/') {
                return Err(ApiError::not_implemented());
            }
            return Err(ApiError::bad_request(format!(
                "`{other}` is not a valid filter"
            )));
        }
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

/// Renders one change row, or None when the filter drops it.
fn render_row(reader: &Reader, p: &Params, row: &ChangeRow) -> ApiResult<Option<String>> {
    let keep = match &p.filter {
        Filter::None => true,
        Filter::DocIds(ids) => ids.contains(&row.id),
        Filter::Design => row.id.starts_with("_design/"),
        Filter::Selector(sel) => sel.matches(&selector_doc(reader, row)?),
    };
    if !keep {
        return Ok(None);
    }
    let mut out = String::with_capacity(96);
    out.push_str("{\"seq\":");
    push_u64(&mut out, row.seq);
    out.push_str(",\"id\":");
    push_str(&mut out, &row.id);
    out.push_str(",\"changes\":[");
    let leaves = if p.all_leaves {
        &row.leaves[..]
    } else {
        &row.leaves[..row.leaves.len().min(1)]
    };
    for (i, (rev, _)) in leaves.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
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
            Ok(d) => push_doc(&mut out, &d, Extras::default()),
            Err(settee_db::Error::NotFound(_)) => out.push_str("null"),
            Err(e) => return Err(e.into()),
        }
    }
    out.push('}');
    Ok(Some(out))
}

/// Outcome of one scan.
struct Scan {
    last_scanned: Option<u64>,
    emitted: u64,
    /// The scan reached the end of the snapshot.
    exhausted: bool,
}

/// Scans changes after `since`, examining at most `scan_max` and emitting
/// at most `emit_max` rows through `emit` (false from `emit` stops).
fn scan(
    reader: &Reader,
    p: &Params,
    since: u64,
    scan_max: u64,
    emit_max: u64,
    emit: &mut dyn FnMut(u64, &str) -> bool,
) -> ApiResult<Scan> {
    let mut s = Scan {
        last_scanned: None,
        emitted: 0,
        exhausted: true,
    };
    let mut failure = None;
    let mut scanned = 0u64;
    if emit_max == 0 {
        return Ok(s);
    }
    reader.changes(since, p.descending, u64::MAX, &mut |row| {
        if scanned >= scan_max {
            s.exhausted = false;
            return false;
        }
        scanned += 1;
        s.last_scanned = Some(row.seq);
        match render_row(reader, p, &row) {
            Ok(None) => true,
            Ok(Some(text)) => {
                s.emitted += 1;
                if !emit(row.seq, &text) {
                    s.exhausted = false;
                    return false;
                }
                if s.emitted >= emit_max {
                    s.exhausted = false;
                    return false;
                }
                true
            }
            Err(e) => {
                failure = Some(e);
                false
            }
        }
    })?;
    match failure {
        Some(e) => Err(e),
        None => Ok(s),
    }
}

pub async fn handle(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(
        req,
        &[Method::GET, Method::HEAD, Method::POST],
        "GET,HEAD,POST",
    )?;
    require_db_reader(&req.settings, &req.user)?;
    let db = app.db(name)?;
    let p = parse_params(req, &db).await?;
    if p.feed == Feed::Normal || (p.descending && p.feed == Feed::Longpoll) {
        return normal(db, p).await;
    }
    Ok(live(app, db, p))
}

async fn normal(db: Database, p: Params) -> ApiResult<Response> {
    let reader = db.reader()?;
    blocking_response(move |sink| {
        sink.buf.push_str("{\"results\":[\n");
        let mut first = true;
        let mut last_emitted = None;
        let s = scan(&reader, &p, p.since, u64::MAX, p.limit, &mut |seq, row| {
            if !first {
                sink.buf.push_str(",\n");
            }
            first = false;
            sink.buf.push_str(row);
            last_emitted = Some(seq);
            sink.flush_if_full()
        })?;
        let last_seq = if p.descending {
            last_emitted.unwrap_or(0)
        } else if s.exhausted {
            s.last_scanned.unwrap_or(p.since).max(p.since)
        } else {
            last_emitted.or(s.last_scanned).unwrap_or(p.since)
        };
        let pending = if s.exhausted || p.descending {
            0
        } else {
            db.update_seq().saturating_sub(last_seq)
        };
        sink.buf.push_str("\n],\n\"last_seq\":");
        push_u64(&mut sink.buf, last_seq);
        sink.buf.push_str(",\"pending\":");
        push_u64(&mut sink.buf, pending);
        sink.buf.push_str("}\n");
        Ok(())
    })
    .await
}

type Chunk = Result<Bytes, std::io::Error>;

fn live(app: &App, db: Database, p: Params) -> Response {
    let (tx, mut rx) = mpsc::channel::<Chunk>(16);
    let feed = p.feed;
    let closing = app.closing.subscribe();
    tokio::spawn(run_live(db, p, tx, closing));
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let mut resp = json_response(axum::http::StatusCode::OK, String::new());
    *resp.body_mut() = Body::from_stream(stream);
    if feed == Feed::EventSource {
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
    }
    resp.extensions_mut().insert(NoCompress);
    resp
}

/// Sends a chunk; false when the client is gone.
async fn send(tx: &mpsc::Sender<Chunk>, text: String) -> bool {
    tx.send(Ok(Bytes::from(text))).await.is_ok()
}

async fn run_live(
    db: Database,
    p: Params,
    tx: mpsc::Sender<Chunk>,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    let mut watch = db.subscribe();
    let p = std::sync::Arc::new(p);
    let mut since = p.since;
    let mut emitted = 0u64;
    let mut longpoll_rows: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(p.timeout_ms);
    let heartbeat = p.heartbeat_ms.map(Duration::from_millis);
    'feed: loop {
        watch.borrow_and_update();
        let reader = match db.reader() {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                return;
            }
        };
        let (pp, from, remaining) = (p.clone(), since, p.limit.saturating_sub(emitted));
        let feed = p.feed;
        let batch = tokio::task::spawn_blocking(move || {
            let mut rows: Vec<(u64, String)> = Vec::new();
            let s = scan(
                &reader,
                &pp,
                from,
                SCAN_BATCH,
                remaining,
                &mut |seq, row| {
                    rows.push((seq, row.to_string()));
                    true
                },
            );
            s.map(|s| (s, rows))
        })
        .await;
        let (s, rows) = match batch {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                let _ = tx
                    .send(Err(std::io::Error::other(e.reason.to_string())))
                    .await;
                return;
            }
            Err(e) => {
                let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                return;
            }
        };
        emitted += s.emitted;
        if let Some(seq) = s.last_scanned {
            since = since.max(seq);
        }
        for (seq, row) in rows {
            let text = match feed {
                Feed::Continuous => row + "\n",
                Feed::EventSource => format!("data: {row}\nid: {seq}\n\n"),
                _ => {
                    longpoll_rows.push(row);
                    continue;
                }
            };
            if !send(&tx, text).await {
                return;
            }
        }
        if emitted >= p.limit {
            break;
        }
        if !s.exhausted {
            continue;
        }
        if feed == Feed::Longpoll && emitted > 0 {
            break;
        }
        // Wait for a commit past `since`, sending heartbeats.
        let mut next_beat = heartbeat.map(|h| Instant::now() + h);
        loop {
            if *watch.borrow_and_update() > since {
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
                    let beat = if feed == Feed::EventSource { "event: heartbeat\ndata: \n\n" } else { "\n" };
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
    let end = match p.feed {
        Feed::Longpoll => {
            let mut out = String::from("{\"results\":[\n");
            out.push_str(&longpoll_rows.join(",\n"));
            out.push_str("\n],\n\"last_seq\":");
            push_u64(&mut out, since);
            out.push_str(",\"pending\":0}\n");
            out
        }
        Feed::Continuous => format!("{{\"last_seq\":{since},\"pending\":0}}\n"),
        _ => String::new(),
    };
    if !end.is_empty() {
        let _ = send(&tx, end).await;
    }
}
