//! `/db/_design/{ddoc}/_list/{list}/{view}` and
//! `/db/_design/{ddoc}/_list/{list}/{other-ddoc}/{view}`: a list function
//! renders the rows of a view (every view query option applies, `keys`
//! by POST too) into any response — `start({code, headers})`, `send()`,
//! `getRow()`, `provides()` — streamed both ways.
//!
//! Invariants:
//! - Rows stream from the view (or `_all_docs`) query into `getRow()`
//!   through a queue of [`ROW_QUEUE`] rows: memory is bounded whatever the
//!   view's size (the query waits while the function is slow).
//! - Output streams as CouchDB's does: nothing is sent before the first
//!   `getRow()` (until then `start()` may still set the status and
//!   headers, and a throw is an ordinary error answer); after it, what
//!   `send()` collected goes out as a chunk at each `getRow()` and at the
//!   end, through a queue of [`EVENT_QUEUE`] chunks; a throw after it
//!   ends the body with CouchDB's `{"code":500,…}` line.
//! - Nothing waits forever: a function waiting [`LIST_WAIT`] for a row, or
//!   for a client to take a chunk, stops (the rows end with an error; a
//!   client that left ends the rows).

use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use axum::body::Body as AxBody;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use serde_json::Value;
use settee_js::ListIo;
use settee_views::{Out, ViewArgs};
use tokio::sync::mpsc;

use crate::auth::require_db_reader;
use crate::design_req::{self, NoBody};
use crate::error::{ApiError, ApiResult};
use crate::request::Req;
use crate::state::App;

/// Rows in flight between the view query and the list function.
pub const ROW_QUEUE: usize = 256;

/// Output events in flight between the list function and the client.
pub const EVENT_QUEUE: usize = 16;

/// The longest a list function waits for a row or for its client.
pub const LIST_WAIT: Duration = Duration::from_secs(60);

/// View options whose values `req.query` shows JSON-decoded, as CouchDB.
const JSON_OPTIONS: [&str; 6] = ["key", "keys", "startkey", "start_key", "endkey", "end_key"];

/// What the view query sends the list function.
enum RowMsg {
    /// The answer's head: `{total_rows, offset, update_seq}` (`{}` for a
    /// reduction), sent before any row.
    Head(String),
    Row(String),
    Failed(ApiError),
}

/// What the list function sends the response.
enum Event {
    Start(String),
    Chunk(String),
    End(ApiResult<Value>),
}

/// A view query's output cut into its head and rows, sent as they come.
struct RowSender {
    tx: SyncSender<RowMsg>,
    buf: String,
    head_sent: bool,
}

impl RowSender {
    /// Sends the head from the text before `"rows":[` (once).
    fn send_head(&mut self) -> bool {
        let Some(at) = self.buf.find("\"rows\":[") else {
            return false;
        };
        let head = format!("{}}}", self.buf[..at].trim_end_matches(','));
        let head = match serde_json::from_str::<Value>(&head) {
            Ok(Value::Object(_)) => head,
            _ => "{}".to_string(),
        };
        self.buf.drain(..at + "\"rows\":[".len());
        self.head_sent = true;
        self.tx.send(RowMsg::Head(head)).is_ok()
    }
}

impl Out for RowSender {
    fn buf(&mut self) -> &mut String {
        &mut self.buf
    }

    fn row_done(&mut self) -> bool {
        if !self.head_sent && !self.send_head() {
            return false;
        }
        let row = self.buf.trim_start_matches([',', '\r', '\n']).to_string();
        self.buf.clear();
        self.tx.send(RowMsg::Row(row)).is_ok()
    }
}

/// Runs the view query (blocking), sending its head and rows to `tx`.
/// (`view`: a design document's view and its arguments; `None`:
/// `_all_docs` with `pairs`, in `partition` if one.)
fn send_rows(
    app: &App,
    db: &settee_db::Database,
    view: Option<(String, String, ViewArgs)>,
    pairs: &[(String, String)],
    partition: Option<String>,
    tx: SyncSender<RowMsg>,
) {
    let mut out = RowSender {
        tx,
        buf: String::new(),
        head_sent: false,
    };
    let answered = match view {
        Some((ddoc_id, view_name, args)) => app
            .views
            .query(db, &ddoc_id, &view_name, &args, &mut out)
            .map_err(ApiError::from),
        None => super::all_docs::answer_into(db, pairs, partition, &mut out),
    };
    match answered {
        Ok(()) => {
            if !out.head_sent {
                out.send_head();
            }
        }
        Err(e) => {
            let _ = out.tx.send(RowMsg::Failed(e));
        }
    }
}

/// Sends `ev` unless nobody reads any more; waits at most [`LIST_WAIT`]
/// for room.
fn send_event(tx: &mpsc::Sender<Event>, mut ev: Event) -> bool {
    let deadline = Instant::now() + LIST_WAIT;
    loop {
        match tx.try_send(ev) {
            Ok(()) => return true,
            Err(mpsc::error::TrySendError::Closed(_)) => return false,
            Err(mpsc::error::TrySendError::Full(back)) => {
                if Instant::now() >= deadline {
                    return false;
                }
                ev = back;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// The list function's row source and output, on the JavaScript worker.
fn list_io(rows: Receiver<RowMsg>, events: mpsc::Sender<Event>) -> ListIo {
    ListIo {
        next_row: Box::new(move || match rows.recv_timeout(LIST_WAIT) {
            Ok(RowMsg::Row(r)) => Ok(Some(r)),
            Ok(RowMsg::Failed(e)) => Err(e.reason.into_owned()),
            Ok(RowMsg::Head(_)) => Err("a second head from the view query".into()),
            Err(RecvTimeoutError::Disconnected) => Ok(None),
            Err(RecvTimeoutError::Timeout) => Err("timed out waiting for the view's rows".into()),
        }),
        emit: Box::new(move |kind, text| {
            let ev = if kind == "start" {
                Event::Start(text)
            } else {
                Event::Chunk(text)
            };
            send_event(&events, ev)
        }),
    }
}

/// CouchDB's error line ending a committed list's body.
fn error_line(e: &ApiError) -> String {
    format!(
        "\n{}\n",
        serde_json::json!({"code": 500, "error": e.error, "reason": e.reason})
    )
}

pub async fn list(
    app: &App,
    req: &mut Req,
    db_name: &str,
    ddoc: &str,
    rest: &[&str],
    segments: &[&str],
) -> ApiResult<Response> {
    let db = app.db(db_name)?;
    require_db_reader(req)?;
    let (name, view_ddoc, view) = match rest {
        [name, view] if !name.is_empty() && !view.is_empty() => (*name, ddoc, *view),
        [name, other, view] if !name.is_empty() && !view.is_empty() => (*name, *other, *view),
        _ => return Err(design_req::invalid_path("list_error")),
    };
    let design = app.design.render_ddoc(&db.reader()?, ddoc, "lists", name)?;
    if view_ddoc != ddoc {
        let id = format!("_design/{view_ddoc}");
        if !matches!(db.reader()?.get(&id, &Default::default()), Ok(d) if !d.deleted) {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "badmatch",
                "{not_found,missing}",
            )
            .with_ref());
        }
    }
    let raw_body = req.body_bytes().await?;
    let posted: Option<serde_json::Map<String, Value>> =
        if req.method == Method::POST && !raw_body.is_empty() {
            match crate::request::parse_json_bytes(&raw_body)? {
                Value::Object(m) => Some(m),
                _ => return Err(ApiError::bad_request("Request body must be a JSON object")),
            }
        } else {
            None
        };
    let pairs: Vec<(String, String)> = req.query.pairs().to_vec();
    let view = if view == "_all_docs" {
        None
    } else {
        let mut args = ViewArgs::from_request(
            pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            posted.as_ref(),
        )?;
        super::view::in_partition(req, &mut args)?;
        Some((format!("_design/{view_ddoc}"), view.to_string(), args))
    };
    // The view query runs on the blocking pool, its rows queued for the
    // function; its head (or its failure) comes first.
    let (rows_tx, rows_rx) = std::sync::mpsc::sync_channel(ROW_QUEUE);
    let (app2, db2, pairs2, part) = (
        app.clone(),
        db.clone(),
        pairs.clone(),
        req.partition.clone(),
    );
    tokio::task::spawn_blocking(move || send_rows(&app2, &db2, view, &pairs2, part, rows_tx));
    let (first, rows_rx) = tokio::task::spawn_blocking(move || (rows_rx.recv(), rows_rx)).await?;
    let head = match first {
        Ok(RowMsg::Head(h)) => h,
        Ok(RowMsg::Failed(e)) => return Err(e),
        Ok(RowMsg::Row(_)) | Err(_) => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "list_error",
                "the view query ended without an answer",
            ))
        }
    };
    let mut js_req =
        design_req::for_db(app, req, &db, None, segments, &raw_body, NoBody::Undefined)?;
    if let Value::Object(o) = &mut js_req {
        if let Some(Value::Object(q)) = o.get_mut("query") {
            for k in JSON_OPTIONS {
                if let Some(Value::String(text)) = q.get(k) {
                    if let Ok(v) = serde_json::from_str::<Value>(text) {
                        q.insert(k.to_string(), v);
                    }
                }
            }
        }
        if let Some(m) = posted {
            o.insert("body".into(), Value::Object(m));
        }
    }
    let (events_tx, mut events) = mpsc::channel(EVENT_QUEUE);
    let call = app.design.list(
        &design,
        name,
        head,
        &js_req,
        list_io(rows_rx, events_tx.clone()),
    );
    tokio::spawn(async move {
        let result = call.await.map_err(super::show::thrown_error);
        let _ = events_tx.send(Event::End(result)).await;
    });
    let head_only = req.method == Method::HEAD;
    // Nothing is answered before the function commits (its first
    // `getRow()`) and sends something, or ends.
    let mut start: Option<Value> = None;
    let mut pending = String::new();
    loop {
        match events.recv().await {
            Some(Event::Start(text)) => {
                start = Some(serde_json::from_str(&text).unwrap_or(Value::Null));
            }
            Some(Event::Chunk(c)) => {
                pending.push_str(&c);
                if pending.is_empty() {
                    continue;
                }
                let start = start.take().unwrap_or(Value::Null);
                return stream_response(&start, pending, events, head_only);
            }
            Some(Event::End(Ok(result))) => {
                let result = match start {
                    Some(st) => {
                        committed(&st, pending + result["body"].as_str().unwrap_or_default())
                    }
                    None => result,
                };
                return respond(&result, head_only);
            }
            Some(Event::End(Err(e))) => match start {
                Some(st) => return respond(&committed(&st, pending + &error_line(&e)), head_only),
                None => return Err(e),
            },
            None => {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "list_error",
                    "the list function ended without an answer",
                ))
            }
        }
    }
}

/// The answer of a committed list: `start`'s status, headers and type
/// with `body`.
fn committed(start: &Value, body: String) -> Value {
    serde_json::json!({
        "code": start.get("code").cloned().unwrap_or(Value::Null),
        "headers": start.get("headers").cloned().unwrap_or(Value::Null),
        "contentType": start.get("contentType").cloned().unwrap_or(Value::Null),
        "body": body,
    })
}

/// A committed list's response while it still runs: `first`, then every
/// chunk as it comes, ended by the rest of the output (or the error line).
fn stream_response(
    start: &Value,
    first: String,
    events: mpsc::Receiver<Event>,
    head_only: bool,
) -> ApiResult<Response> {
    let b = builder(start, true);
    let rest = futures_util::stream::unfold(events, |mut rx| async move {
        loop {
            let text = match rx.recv().await? {
                Event::Start(_) => continue,
                Event::Chunk(c) => c,
                Event::End(Ok(v)) => v["body"].as_str().unwrap_or_default().to_string(),
                Event::End(Err(e)) => error_line(&e),
            };
            return Some((
                Ok::<_, std::convert::Infallible>(bytes::Bytes::from(text)),
                rx,
            ));
        }
    });
    let body = if head_only {
        AxBody::empty()
    } else {
        let first = futures_util::stream::once(async move { Ok(bytes::Bytes::from(first)) });
        AxBody::from_stream(futures_util::StreamExt::chain(first, rest))
    };
    b.body(body).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "list_error",
            e.to_string(),
        )
    })
}

/// The head of a list's response: `start()`'s status and headers, the
/// type `provides()` chose, else `application/json` (no type at all for
/// an empty answer without headers, as CouchDB); uncompressed.
fn builder(result: &Value, has_body: bool) -> axum::http::response::Builder {
    let code = result
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::OK);
    let mut b = Response::builder().status(code);
    let mut has_ctype = false;
    let mut any_header = false;
    if let Some(Value::Object(headers)) = result.get("headers") {
        for (k, v) in headers {
            let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(&text),
            ) else {
                continue;
            };
            any_header = true;
            has_ctype |= n == axum::http::header::CONTENT_TYPE;
            b = b.header(n, v);
        }
    }
    if !has_ctype {
        match result.get("contentType").and_then(Value::as_str) {
            Some(t) => b = b.header("Content-Type", t),
            None if has_body || any_header => {
                b = b.header("Content-Type", "application/json");
            }
            None => {}
        }
    }
    // CouchDB sends list output uncompressed.
    b.header("Content-Security-Policy", "sandbox")
        .extension(crate::server::NoCompress)
}

/// A finished list's output as a chunked response.
fn respond(result: &Value, head: bool) -> ApiResult<Response> {
    let body = result
        .get("body")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let b = builder(result, !body.is_empty());
    let stream = futures_util::stream::once(async move {
        Ok::<_, std::convert::Infallible>(bytes::Bytes::from(body))
    });
    let body = if head {
        AxBody::empty()
    } else {
        AxBody::from_stream(stream)
    };
    b.body(body).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "list_error",
            e.to_string(),
        )
    })
}
