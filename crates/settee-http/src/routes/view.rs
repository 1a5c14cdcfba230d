//! Views over HTTP: `/db/_design/{ddoc}/_view/{view}` (GET, HEAD, POST),
//! its `/queries`, `/db/_design/{ddoc}/_info` and `/db/_view_cleanup`.
//!
//! Invariant: this module only parses the request and renders the
//! answer's envelope; `settee_views` checks the arguments, updates the
//! index and writes the rows, on the blocking pool, streamed through
//! [`crate::stream`].

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::Value;
use settee_core::doc::Doc;
use settee_views::{Out, ViewArgs};

use super::allow;
use crate::auth::require_db_reader;
use crate::error::{ApiError, ApiResult};
use crate::render::{json_response, json_value};
use crate::request::Req;
use crate::state::App;
use crate::stream::{quick_first_response, Attempt, Sink};

impl Out for Sink {
    fn buf(&mut self) -> &mut String {
        &mut self.buf
    }

    fn row_done(&mut self) -> bool {
        self.flush_if_full()
    }
}

/// The methods of a view, as CouchDB lists them.
pub const ALLOW: &str = "GET,POST,HEAD";

/// Most queries in one `/queries` request.
const QUERIES_MAX: usize = 100;

fn query_pairs(req: &Req) -> impl Iterator<Item = (&str, &str)> + Clone {
    req.query
        .pairs()
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
}

/// A query under `/db/_partition/{p}/` is a query of that partition,
/// its `limit` bounded by `[query_server_config] partition_query_limit`
/// (the default when none is given, as CouchDB); a `partition` parameter
/// names a valid one.
pub fn in_partition(req: &Req, args: &mut ViewArgs) -> ApiResult<()> {
    if let Some(p) = &req.partition {
        args.partition = Some(p.clone());
        partition_limit(req, &mut args.limit)?;
    }
    if let Some(p) = &args.partition {
        settee_core::name::validate_partition(p)?;
    }
    Ok(())
}

/// A partition query's `limit` (`u64::MAX`: none given) against
/// `partition_query_limit`.
pub fn partition_limit(req: &Req, limit: &mut u64) -> ApiResult<()> {
    let most = req.settings.partition_query_limit;
    if *limit == u64::MAX {
        *limit = most;
    } else if *limit > most {
        return Err(ApiError::query_parse(format!(
            "Limit is too large, must not exceed {most}"
        )));
    }
    Ok(())
}

/// CouchDB's check of a design document being saved (not deleted): its
/// views' functions compile (400 `compilation_error`), none is empty.
pub async fn check_design(app: &App, doc: &Doc) -> ApiResult<()> {
    if doc.deleted || !doc.id.starts_with("_design/") {
        return Ok(());
    }
    let mut map = doc.body.to_map();
    map.insert("_id".into(), Value::String(doc.id.clone()));
    Ok(settee_views::check_design_doc(&app.js, &Value::Object(map)).await?)
}

/// `GET|HEAD|POST /db/_design/{ddoc}/_view/{view}`.
pub async fn query(
    app: &App,
    req: &mut Req,
    db: &str,
    ddoc: &str,
    view: &str,
) -> ApiResult<Response> {
    allow(req, &[Method::GET, Method::HEAD, Method::POST], ALLOW)?;
    require_db_reader(req)?;
    let db = app.db(db)?;
    let body = if req.method == Method::POST {
        Some(req.json_object().await?)
    } else {
        None
    };
    let mut args = ViewArgs::from_request(query_pairs(req), body.as_ref())?;
    in_partition(req, &mut args)?;
    let (app, ddoc_id, view) = (app.clone(), format!("_design/{ddoc}"), view.to_string());
    quick_first_response(move |sink, attempt| {
        Ok(match attempt {
            Attempt::Quick => app.views.query_quick(&db, &ddoc_id, &view, &args, sink)?,
            Attempt::Full => {
                app.views.query(&db, &ddoc_id, &view, &args, sink)?;
                true
            }
        })
    })
    .await
}

/// `POST /db/_design/{ddoc}/_view/{view}/queries`.
pub async fn queries(
    app: &App,
    req: &mut Req,
    db: &str,
    ddoc: &str,
    view: &str,
) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    require_db_reader(req)?;
    let db = app.db(db)?;
    let body = req.json_object().await?;
    let list = match body.get("queries") {
        None => {
            return Err(ApiError::bad_request(
                "POST body must include `queries` parameter.",
            ))
        }
        Some(Value::Array(list)) => list.clone(),
        Some(_) => return Err(ApiError::bad_request("`queries` member must be an array.")),
    };
    if list.len() > QUERIES_MAX {
        return Err(ApiError::bad_request(format!(
            "at most {QUERIES_MAX} queries per request"
        )));
    }
    let mut base = ViewArgs::default();
    base.apply_pairs(query_pairs(req))?;
    let all: Vec<ViewArgs> = list
        .iter()
        .map(|q| {
            let Value::Object(m) = q else {
                return Err(ApiError::bad_request("each query must be a JSON object"));
            };
            let mut a = base.clone();
            a.apply_object(m)?;
            in_partition(req, &mut a)?;
            Ok(a)
        })
        .collect::<ApiResult<_>>()?;
    let (app, ddoc_id, view) = (app.clone(), format!("_design/{ddoc}"), view.to_string());
    let out = tokio::task::spawn_blocking(move || -> ApiResult<String> {
        let mut out = String::from("{\"results\":[");
        for (i, a) in all.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            app.views.query(&db, &ddoc_id, &view, a, &mut out)?;
        }
        out.push_str("]}");
        Ok(out)
    })
    .await??;
    Ok(json_response(StatusCode::OK, out))
}

/// `GET /db/_design/{ddoc}/_info`.
pub async fn info(app: &App, req: &mut Req, db: &str, ddoc: &str) -> ApiResult<Response> {
    allow(req, &[Method::GET], "GET")?;
    require_db_reader(req)?;
    let db = app.db(db)?;
    let (app, ddoc_id) = (app.clone(), format!("_design/{ddoc}"));
    let info = tokio::task::spawn_blocking(move || app.views.info(&db, &ddoc_id)).await??;
    Ok(json_value(StatusCode::OK, &info))
}

/// `POST /db/_view_cleanup`: drops indexes no design document uses (the
/// search indexes' too).
pub async fn cleanup(app: &App, req: &mut Req, db: &str) -> ApiResult<Response> {
    cleanup_with(app, req, db, |app, db| {
        app.views.cleanup(db)?;
        app.search.cleanup(db)?;
        Ok(())
    })
    .await
}

/// A `POST /db/_*_cleanup`: database admins only, `run` on the blocking
/// pool, 202.
pub async fn cleanup_with(
    app: &App,
    req: &mut Req,
    db: &str,
    run: fn(&App, &settee_db::Database) -> ApiResult<()>,
) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    crate::auth::require_db_admin_to_compact(req)?;
    let db = app.db(db)?;
    let app = app.clone();
    tokio::task::spawn_blocking(move || run(&app, &db)).await??;
    Ok(json_response(StatusCode::ACCEPTED, "{\"ok\":true}".into()))
}
