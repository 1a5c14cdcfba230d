//! Full-text search over HTTP (CouchDB 3.4's Nouveau API):
//! `/db/_design/{ddoc}/_nouveau/{index}` (GET, POST),
//! `/db/_design/{ddoc}/_nouveau_info/{index}` and `/db/_nouveau_cleanup`.
//!
//! Invariant: this module only parses the request and sends the answer;
//! `settee_search` checks the arguments, updates the index and answers,
//! on the blocking pool. Reading an index needs what reading the
//! database needs, as for views.

use axum::http::{Method, StatusCode};
use axum::response::Response;
use settee_db::Database;
use settee_search::SearchArgs;

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

/// `POST /db/_nouveau_cleanup`: removes the files of the search indexes
/// no design document defines.
pub async fn cleanup(app: &App, req: &mut Req, db: &str) -> ApiResult<Response> {
    super::view::cleanup_with(app, req, db, |app, db| Ok(app.search.cleanup(db)?)).await
}
