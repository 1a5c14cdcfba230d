//! Full-text search over HTTP: CouchDB 3.4's Nouveau API
//! (`/db/_design/{ddoc}/_nouveau/{index}` GET and POST,
//! `/db/_design/{ddoc}/_nouveau_info/{index}`, `/db/_nouveau_cleanup`)
//! and its search API (`/db/_design/{ddoc}/_search/{index}` GET and
//! POST, `_search_info/{index}`, `_search_disk_size/{index}`,
//! `/db/_search_cleanup`, `/_search_analyze`).
//!
//! Invariant: this module only parses the request and sends the answer;
//! `settee_search` checks the arguments, updates the index and answers,
//! on the blocking pool. Reading an index needs what reading the
//! database needs, as for views.

use axum::http::{Method, StatusCode};
use axum::response::Response;
use settee_db::Database;
use settee_search::{ClouseauArgs, SearchArgs};

use super::allow;
use crate::auth::require_db_reader;
use crate::error::ApiResult;
use crate::render::json_value;
use crate::request::Req;
use crate::state::App;

/// The database of a request that reads an index, once the method and
/// the reader's rights are checked.
fn open(
    app: &App,
    req: &Req,
    db: &str,
    methods: &[Method],
    allowed: &'static str,
) -> ApiResult<Database> {
    allow(req, methods, allowed)?;
    require_db_reader(req)?;
    app.db(db)
}

/// `GET|POST /db/_design/{ddoc}/_nouveau/{index}`.
pub async fn query(
    app: &App,
    req: &mut Req,
    db: &str,
    ddoc: &str,
    index: &str,
) -> ApiResult<Response> {
    let db = open(app, req, db, &[Method::GET, Method::POST], "GET, POST")?;
    let mut args = if req.method == Method::POST {
        SearchArgs::from_body(&req.json_object().await?)?
    } else {
        let pairs = req.query.pairs();
        SearchArgs::from_query(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))?
    };
    // `/db/_partition/{p}/_design/…/_nouveau/…` searches that partition.
    if let Some(p) = &req.partition {
        args.partition = Some(p.clone());
    }
    let (app, ddoc_id, index) = (app.clone(), format!("_design/{ddoc}"), index.to_string());
    let answer =
        tokio::task::spawn_blocking(move || app.search.query(&db, &ddoc_id, &index, &args))
            .await??;
    Ok(json_value(StatusCode::OK, &answer))
}

/// `GET /db/_design/{ddoc}/_nouveau_info/{index}`.
pub async fn info(
    app: &App,
    req: &mut Req,
    db: &str,
    ddoc: &str,
    index: &str,
) -> ApiResult<Response> {
    let db = open(app, req, db, &[Method::GET], "GET")?;
    let (app, ddoc_id, index) = (app.clone(), format!("_design/{ddoc}"), index.to_string());
    let info =
        tokio::task::spawn_blocking(move || app.search.info(&db, &ddoc_id, &index)).await??;
    Ok(json_value(StatusCode::OK, &info))
}

/// `GET|POST /db/_design/{ddoc}/_search/{index}` (and in a partition).
pub async fn search(
    app: &App,
    req: &mut Req,
    db: &str,
    ddoc: &str,
    index: &str,
) -> ApiResult<Response> {
    let db = open(app, req, db, &[Method::GET, Method::POST], "GET,POST")?;
    let mut args = if req.method == Method::POST {
        let qs_partition = req.query.get("partition").map(str::to_string);
        ClouseauArgs::from_body(&req.json_object().await?, qs_partition.as_deref())?
    } else {
        let pairs = req.query.pairs();
        ClouseauArgs::from_query(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))?
    };
    // `/db/_partition/{p}/_design/…/_search/…` searches that partition.
    if let Some(p) = &req.partition {
        args.partition = Some(p.clone());
    }
    let (app, ddoc_id, index) = (app.clone(), format!("_design/{ddoc}"), index.to_string());
    let answer =
        tokio::task::spawn_blocking(move || app.search.search(&db, &ddoc_id, &index, &args))
            .await??;
    Ok(json_value(StatusCode::OK, &answer))
}

/// `GET /db/_design/{ddoc}/_search_info/{index}` and
/// `…/_search_disk_size/{index}`.
pub async fn search_info(
    app: &App,
    req: &mut Req,
    db: &str,
    ddoc: &str,
    kind: &str,
    index: &str,
) -> ApiResult<Response> {
    let db = open(app, req, db, &[Method::GET], "GET")?;
    let (app, ddoc_id, index) = (app.clone(), format!("_design/{ddoc}"), index.to_string());
    let disk_size = kind == "_search_disk_size";
    let info = tokio::task::spawn_blocking(move || {
        if disk_size {
            app.search.search_disk_size(&db, &ddoc_id, &index)
        } else {
            app.search.search_info(&db, &ddoc_id, &index)
        }
    })
    .await??;
    Ok(json_value(StatusCode::OK, &info))
}

/// `GET|POST /_search_analyze`: the tokens an analyzer makes of a text.
pub async fn analyze(req: &mut Req) -> ApiResult<Response> {
    allow(req, &[Method::GET, Method::POST], "GET,POST")?;
    let (analyzer, text) = if req.method == Method::POST {
        let body = req.json_object().await?;
        (body.get("analyzer").cloned(), body.get("text").cloned())
    } else {
        let s = |k: &str| {
            req.query
                .get(k)
                .map(|v| serde_json::Value::String(v.to_string()))
        };
        (s("analyzer"), s("text"))
    };
    let tokens = settee_search::analyze(analyzer.as_ref(), text.as_ref())?;
    Ok(json_value(StatusCode::OK, &tokens))
}

/// `POST /db/_nouveau_cleanup` and `_search_cleanup`: removes the files
/// of the search indexes no design document defines.
pub async fn cleanup(app: &App, req: &mut Req, db: &str) -> ApiResult<Response> {
    super::view::cleanup_with(app, req, db, |app, db| Ok(app.search.cleanup(db)?)).await
}
