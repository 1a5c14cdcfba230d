//! `GET/PUT /{db}/_auto_purge`: a database's automatic purge settings
//! (CouchDB's development branch; settee-purger reads them).
//!
//! Invariant: only a body settee-purger's `props::validate` accepts is
//! stored, and only by an admin of the database (CouchDB's branch lets
//! any member change it; a TTL purges, so Settee asks for an admin).
//! Members read it. The setting takes effect at the purger's next step.

use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::allow;
use crate::auth::{require_db_admin, require_db_reader};
use crate::error::{ApiError, ApiResult};
use crate::render::{json_response, json_value};
use crate::request::Req;
use crate::state::App;

pub async fn handle(app: &App, req: &mut Req, name: &str) -> ApiResult<Response> {
    allow(
        req,
        &[Method::GET, Method::HEAD, Method::PUT],
        "GET,PUT,HEAD",
    )?;
    if req.method == Method::PUT {
        require_db_admin(req)?;
        let db = app.db(name)?;
        let body = req.json_object().await?;
        settee_purger::props::validate(&body).map_err(|e| ApiError::bad_request(e.reason()))?;
        let text = Value::Object(body).to_string();
        db.set_auto_purge_async(&text).await?;
        return Ok(json_value(StatusCode::CREATED, &json!({"ok": true})));
    }
    require_db_reader(req)?;
    let db = app.db(name)?;
    let text = db
        .auto_purge()
        .map_or_else(|| "{}".to_string(), |t| t.to_string());
    Ok(json_response(StatusCode::OK, text))
}
