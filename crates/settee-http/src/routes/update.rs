//! `/db/_design/{ddoc}/_update/{name}[/{docid}]`: an update function
//! computes a document from the stored one (or none) and the request, and
//! answers with its response: `[doc, response]`. A document that is a JSON
//! object is saved as a normal write would save it — its id checked, the
//! writer authorized (db admins for design documents), the database's
//! `validate_doc_update` functions run — and the answer says so
//! (`X-Couch-Update-NewRev`, `X-Couch-Id`, 201 unless the response names a
//! status).
//!
//! Invariant: nothing is written unless the function returned an object
//! and every check a `PUT` of it would pass passed; GET is refused before
//! any JavaScript runs.

use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::Response;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::Value;
use settee_core::name::DocKind;

use super::doc::{authorize_write, save, Saved};
use super::show::{doc_for_show, external_response, External};
use crate::auth::require_db_reader;
use crate::design_req::{self, NoBody};
use crate::error::{ApiError, ApiResult};
use crate::request::{local_parts, Req};
use crate::state::App;

/// What `X-Couch-Id` leaves unencoded (as `encodeURIComponent`, less its
/// punctuation).
const ID_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A JSON value as Erlang prints the term CouchDB decodes it to (for the
/// `case_clause` CouchDB answers to a response it cannot read).
fn erlang(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("<<{}>>", Value::String(s.clone())),
        Value::Array(a) => format!("[{}]", a.iter().map(erlang).collect::<Vec<_>>().join(",")),
        Value::Object(o) => format!(
            "{{[{}]}}",
            o.iter()
                .map(|(k, v)| format!("{{<<{}>>,{}}}", Value::String(k.clone()), erlang(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

pub async fn update(
    app: &App,
    req: &mut Req,
    db_name: &str,
    ddoc: &str,
    rest: &[&str],
    segments: &[&str],
) -> ApiResult<Response> {
    let db = app.db(db_name)?;
    require_db_reader(req)?;
    if req.method == Method::GET {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "Update functions do not allow GET",
        ));
    }
    let (name, doc_id) = design_req::name_and_doc(rest, "update_error")?;
    let design = app
        .design
        .render_ddoc(&db.reader()?, ddoc, "updates", name)?;
    let doc = match &doc_id {
        Some(id) => doc_for_show(&db, id)?.0,
        None => "null".into(),
    };
    let body = req.body_bytes().await?;
    let js_req = design_req::for_db(
        app,
        req,
        &db,
        doc_id.as_deref(),
        segments,
        &body,
        NoBody::Empty,
    )?;
    let (new_doc, resp) = app
        .design
        .update(&design, name, doc, &js_req)
        .await
        .map_err(super::show::thrown_error)?;
    if resp.is_array() {
        let term = erlang(&Value::Array(vec!["up".into(), new_doc, resp]));
        return Err(
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "case_clause", term).with_ref(),
        );
    }
    let head = req.method == Method::HEAD;
    let Value::Object(map) = new_doc else {
        let how = External {
            etag: None,
            head,
            code: StatusCode::OK,
            negotiated: false,
            bare: false,
        };
        return external_response(&resp, &how);
    };
    let id = map
        .get("_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let kind = super::partition::check_write_id(&db, &id)?;
    authorize_write(req, kind)?;
    let rev = if kind == DocKind::Local {
        let (rev, body) = local_parts(map)?;
        match db
            .put_local_async(&id, rev, body, Some(req.durability()))
            .await?
        {
            Ok(stored) => Some(stored),
            Err(f) => return Err(ApiError::from_doc_failure(&f, &id)),
        }
    } else {
        match save(app, req, &db, &id, kind, map, Vec::new(), true).await? {
            Saved::Written(rev, _) => Some(rev.to_string()),
            Saved::Accepted => None,
        }
    };
    let how = External {
        etag: None,
        head,
        code: if rev.is_some() {
            StatusCode::CREATED
        } else {
            StatusCode::ACCEPTED
        },
        negotiated: false,
        bare: false,
    };
    let mut out = external_response(&resp, &how)?;
    let headers = out.headers_mut();
    if let Some(rev) = rev {
        if let Ok(v) = HeaderValue::from_str(&rev) {
            headers.insert("X-Couch-Update-NewRev", v);
        }
    }
    let encoded = utf8_percent_encode(&id, ID_ENCODE).to_string();
    if let Ok(v) = HeaderValue::from_str(&encoded) {
        headers.insert("X-Couch-Id", v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn terms_print_as_erlang_prints_them() {
        assert_eq!(
            super::erlang(&json!(["up", null, [1, 2], {"a": "b"}])),
            r#"[<<"up">>,null,[1,2],{[{<<"a">>,<<"b">>}]}]"#
        );
    }
}
