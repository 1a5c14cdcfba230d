//! `/db/_design/{ddoc}/_list/{list}/{view}` and
//! `/db/_design/{ddoc}/_list/{list}/{other-ddoc}/{view}`: a list function
//! renders the rows of a view (every view query option applies, `keys`
//! by POST too) into any response — `start({code, headers})`, `send()`,
//! `getRow()`, `provides()`.
//!
//! Invariant: the rows a list may see are bounded ([`LIST_ROWS_BYTES_MAX`]
//! of view output; beyond it the request fails rather than holding more);
//! the function runs once over them and its output is sent as one chunked
//! body. (Streaming rows into `getRow()` and chunks out as they come is
//! the plan of ADR 0009.)

use axum::body::Body as AxBody;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use serde_json::Value;
use settee_views::{Out, ViewArgs};

use crate::auth::require_db_reader;
use crate::design_req::{self, NoBody};
use crate::error::{ApiError, ApiResult};
use crate::request::Req;
use crate::state::App;

/// Most bytes of view output one list call may read.
pub const LIST_ROWS_BYTES_MAX: usize = 64 << 20;

/// View options whose values `req.query` shows JSON-decoded, as CouchDB.
const JSON_OPTIONS: [&str; 6] = ["key", "keys", "startkey", "start_key", "endkey", "end_key"];

/// A view's output collected up to [`LIST_ROWS_BYTES_MAX`].
struct Bounded {
    buf: String,
    over: bool,
}

impl Out for Bounded {
    fn buf(&mut self) -> &mut String {
        &mut self.buf
    }
    fn row_done(&mut self) -> bool {
        self.over = self.buf.len() > LIST_ROWS_BYTES_MAX;
        !self.over
    }
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
    let out = if view == "_all_docs" {
        let db2 = db.clone();
        let text = tokio::task::spawn_blocking(move || super::all_docs::answer_text(&db2, &pairs))
            .await??;
        Bounded {
            over: text.len() > LIST_ROWS_BYTES_MAX,
            buf: text,
        }
    } else {
        let mut args = ViewArgs::from_request(
            pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            posted.as_ref(),
        )?;
        super::view::in_partition(req, &mut args);
        let (app2, ddoc_id, view_name, db2) = (
            app.clone(),
            format!("_design/{view_ddoc}"),
            view.to_string(),
            db.clone(),
        );
        tokio::task::spawn_blocking(move || -> ApiResult<Bounded> {
            let mut out = Bounded {
                buf: String::new(),
                over: false,
            };
            app2.views
                .query(&db2, &ddoc_id, &view_name, &args, &mut out)?;
            Ok(out)
        })
        .await??
    };
    if out.over {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "list_error",
            format!("a list may read at most {LIST_ROWS_BYTES_MAX} bytes of view rows"),
        ));
    }
    let mut answer: Value = serde_json::from_str(&out.buf).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "list_error",
            e.to_string(),
        )
    })?;
    let rows = answer
        .get_mut("rows")
        .map(Value::take)
        .unwrap_or(Value::Array(Vec::new()));
    let mut head = serde_json::Map::new();
    if let Value::Object(o) = &answer {
        for k in ["total_rows", "offset", "update_seq"] {
            if let Some(v) = o.get(k) {
                head.insert(k.to_string(), v.clone());
            }
        }
    }
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
    let result = app
        .design
        .list(
            &design,
            name,
            Value::Object(head).to_string(),
            rows.to_string(),
            &js_req,
        )
        .await
        .map_err(super::show::thrown_error)?;
    respond(&result, req.method == Method::HEAD)
}

/// The list's output as a chunked response: `start()`'s status and
/// headers, the type `provides()` chose, else `application/json` (no
/// type at all for an empty answer without headers, as CouchDB).
fn respond(result: &Value, head: bool) -> ApiResult<Response> {
    let code = result
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::OK);
    let body = result
        .get("body")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
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
            None if !body.is_empty() || any_header => {
                b = b.header("Content-Type", "application/json");
            }
            None => {}
        }
    }
    // CouchDB sends list output uncompressed.
    b = b
        .header("Content-Security-Policy", "sandbox")
        .extension(crate::server::NoCompress);
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
