//! Mango over HTTP: `POST /db/_find`, `POST /db/_explain`, `GET/POST
//! /db/_index`, `POST /db/_index/_bulk_delete`, `DELETE
//! /db/_index/{ddoc}/{json|text}/{name}` — the wire side only; settee-mango does
//! the work, on the blocking pool (it reads storage and may build an
//! index).

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::allow;
use crate::auth::{require_db_reader, require_design_writer};
use crate::error::{ApiError, ApiResult};
use crate::render::json_response;
use crate::request::Req;
use crate::state::App;

async fn blocking<T, F>(f: F) -> ApiResult<T>
where
    F: FnOnce() -> ApiResult<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await?
}

fn ok(v: &Value) -> Response {
    json_response(StatusCode::OK, v.to_string())
}

/// `POST /db/_find`.
pub async fn find(app: &App, req: &mut Req, db: &str) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    require_db_reader(req)?;
    let own = super::users_db::own_doc_only(req, db);
    let db = app.db(db)?;
    let mut body = req.json_object().await?;
    if let Some(own) = own {
        // Only the requester's own user document can match.
        if let Some(selector) = body.remove("selector") {
            let only = own.map_or(Value::Null, Value::from);
            body.insert(
                "selector".into(),
                serde_json::json!({"$and": [selector, {"_id": only}]}),
            );
        }
    }
    let (app, partition) = (app.clone(), req.partition.clone());
    let v = blocking(move || {
        Ok(settee_mango::find(
            &app.views,
            &app.search,
            &db,
            &body,
            partition.as_deref(),
        )?)
    })
    .await?;
    Ok(ok(&v))
}

/// `POST /db/_explain`.
pub async fn explain(app: &App, req: &mut Req, db: &str) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    require_db_reader(req)?;
    let db = app.db(db)?;
    let body = req.json_object().await?;
    let partition = req.partition.clone();
    let v = blocking(move || Ok(settee_mango::explain(&db, &body, partition.as_deref())?)).await?;
    Ok(ok(&v))
}

/// `GET` (list) and `POST` (create) `/db/_index`.
pub async fn index(app: &App, req: &mut Req, db: &str) -> ApiResult<Response> {
    allow(req, &[Method::GET, Method::POST], "GET,POST")?;
    require_db_reader(req)?;
    let db = app.db(db)?;
    if req.method == Method::GET {
        let int = |k: &str| -> ApiResult<Option<i64>> {
            req.query
                .get(k)
                .map(|v| {
                    v.parse::<i64>()
                        .map_err(|_| ApiError::bad_request(format!("Invalid value for {k}: {v}")))
                })
                .transpose()
        };
        let (limit, skip) = (int("limit")?, int("skip")?);
        if limit.is_some_and(|l| l < 1) || skip.is_some_and(|s| s < 0) {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "invalid_list_index_params",
                "Index parameter ranges: limit > 1, skip > 0",
            )
            .with_ref());
        }
        let defs = blocking(move || Ok(settee_mango::defs::list(&db)?)).await?;
        let total = defs.len();
        let skip = usize::try_from(skip.unwrap_or(0)).unwrap_or(usize::MAX);
        let limit = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        let indexes: Vec<Value> = defs
            .iter()
            .skip(skip)
            .take(limit)
            .map(settee_mango::defs::IndexDef::to_json)
            .collect();
        return Ok(ok(&json!({"total_rows": total, "indexes": indexes})));
    }
    require_design_writer(req)?;
    let body = req.json_object().await?;
    let new = settee_mango::defs::NewIndex::parse(&body)?;
    let (id, name) = (new.ddoc.clone(), new.name.clone());
    let created = blocking(move || Ok(new.create(&db)?)).await?;
    let result = if created { "created" } else { "exists" };
    Ok(ok(&json!({"result": result, "id": id, "name": name})))
}

/// `POST /db/_index/_bulk_delete`.
pub async fn bulk_delete(app: &App, req: &mut Req, db: &str) -> ApiResult<Response> {
    allow(req, &[Method::POST], "POST")?;
    require_db_reader(req)?;
    let db = app.db(db)?;
    require_design_writer(req)?;
    let body = req.json_object().await?;
    let ids = match body.get("docids") {
        None => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "missing_required_key",
                "Missing required key: docids",
            ))
        }
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect::<Vec<_>>(),
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_bulk_docs",
                format!(
                    "Bulk Delete requires an array of non-null docids. Docids: {}",
                    settee_mango::erl::term(other, settee_mango::erl::Style::Bytes)
                ),
            ))
        }
    };
    let (done, failed) = blocking(move || Ok(settee_mango::defs::bulk_delete(&db, &ids)?)).await?;
    let success: Vec<Value> = done
        .iter()
        .map(|id| json!({"id": id, "ok": true}))
        .collect();
    let fail: Vec<Value> = failed
        .iter()
        .map(|id| json!({"id": id, "error": "not_found"}))
        .collect();
    Ok(ok(&json!({"success": success, "fail": fail})))
}

/// `DELETE /db/_index/{ddoc}/{type}/{name}`.
pub async fn delete(
    app: &App,
    req: &mut Req,
    db: &str,
    ddoc: &str,
    kind: &str,
    name: &str,
) -> ApiResult<Response> {
    allow(req, &[Method::DELETE], "DELETE")?;
    require_db_reader(req)?;
    let db = app.db(db)?;
    require_design_writer(req)?;
    let kind = match kind {
        "json" => settee_mango::defs::Kind::Json,
        "text" => settee_mango::defs::Kind::Text,
        _ => return Err(ApiError::not_found("missing")),
    };
    let (ddoc, name) = (ddoc.to_string(), name.to_string());
    blocking(move || Ok(settee_mango::defs::delete(&db, &ddoc, kind, &name)?)).await?;
    Ok(ok(&json!({"ok": true})))
}
