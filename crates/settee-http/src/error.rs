//! The ONE error table: every failure a client can see becomes a CouchDB
//! error — an HTTP status plus `{"error": …, "reason": …}`.
//!
//! Invariant: engine errors ([`settee_db::Error`], [`DocFailure`]) and core
//! errors ([`DocError`], [`NameError`], [`SelectorError`]) are mapped here
//! and nowhere else; handlers only return `ApiError`s. Error names and
//! reasons follow CouchDB 3.x's `chttpd:error_info/1`.

use std::borrow::Cow;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use settee_core::doc::DocError;
use settee_core::name::NameError;
use settee_core::selector::SelectorError;
use settee_db::{DocFailure, Error};

/// A CouchDB-shaped error response.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub error: Cow<'static, str>,
    pub reason: Cow<'static, str>,
    /// For 405: the methods the resource allows.
    pub allow: Option<&'static str>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(
        status: StatusCode,
        error: impl Into<Cow<'static, str>>,
        reason: impl Into<Cow<'static, str>>,
    ) -> ApiError {
        ApiError {
            status,
            error: error.into(),
            reason: reason.into(),
            allow: None,
        }
    }

    pub fn bad_request(reason: impl Into<Cow<'static, str>>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", reason)
    }

    pub fn query_parse(reason: impl Into<Cow<'static, str>>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "query_parse_error", reason)
    }

    pub fn not_found(reason: impl Into<Cow<'static, str>>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", reason)
    }

    pub fn invalid_json() -> ApiError {
        ApiError::bad_request("invalid UTF-8 JSON")
    }

    pub fn bad_ctype() -> ApiError {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "bad_content_type",
            "Content-Type must be application/json",
        )
    }

    pub fn request_too_large() -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "the request entity is too large",
        )
    }

    pub fn doc_too_large(id: &str) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "document_too_large",
            id.to_string(),
        )
    }

    pub fn unauthorized(reason: impl Into<Cow<'static, str>>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", reason)
    }

    pub fn conflict() -> ApiError {
        ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            "Document update conflict.",
        )
    }

    pub fn not_implemented() -> ApiError {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "not_implemented",
            "this feature is not yet implemented",
        )
    }

    pub fn method_not_allowed(allow: &'static str) -> ApiError {
        ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            error: "method_not_allowed".into(),
            reason: format!("Only {allow} allowed").into(),
            allow: Some(allow),
        }
    }

    /// A per-document failure of a write, with the document id CouchDB puts
    /// in some reasons.
    pub fn from_doc_failure(f: &DocFailure, id: &str) -> ApiError {
        match f {
            DocFailure::Conflict => ApiError::conflict(),
            DocFailure::Forbidden(m) => {
                ApiError::new(StatusCode::FORBIDDEN, "forbidden", m.clone())
            }
            DocFailure::Bad(e) => ApiError::from(e.clone()),
            DocFailure::TooLarge(_) => ApiError::doc_too_large(id),
            DocFailure::NotFound => ApiError::not_found("missing"),
        }
    }

    /// `{"error":…,"reason":…}` text.
    pub fn body(&self) -> String {
        let mut out = String::with_capacity(48 + self.reason.len());
        out.push_str("{\"error\":");
        crate::render::push_str(&mut out, &self.error);
        out.push_str(",\"reason\":");
        crate::render::push_str(&mut out, &self.reason);
        out.push('}');
        out
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        match e {
            Error::NotFound(r) => ApiError::not_found(r),
            Error::DbExists => ApiError::new(
                StatusCode::PRECONDITION_FAILED,
                "file_exists",
                "The database could not be created, the file already exists.",
            ),
            Error::Name(n) => ApiError::from(n),
            Error::BadRequest(r) => ApiError::bad_request(r),
            Error::Doc(f) => ApiError::from_doc_failure(&f, ""),
            Error::AllOrNothingFailed(_) => ApiError::new(
                StatusCode::EXPECTATION_FAILED,
                "expectation_failed",
                "all_or_nothing update failed; nothing was written",
            ),
            Error::Closed => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "service_unavailable",
                "database is shutting down",
            ),
            Error::Poisoned(r) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "storage_failed", r)
            }
            Error::Storage(e) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "storage_error",
                e.to_string(),
            ),
            Error::Corrupt(r) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt_record", r)
            }
            other => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "unknown_error",
                other.to_string(),
            ),
        }
    }
}

impl From<NameError> for ApiError {
    fn from(e: NameError) -> ApiError {
        match e {
            NameError::IllegalDbName(_) => ApiError::new(
                StatusCode::BAD_REQUEST,
                "illegal_database_name",
                e.to_string(),
            ),
            NameError::DbNameTooLong(_) => ApiError::new(
                StatusCode::BAD_REQUEST,
                "database_name_too_long",
                e.to_string(),
            ),
            _ => ApiError::new(StatusCode::BAD_REQUEST, "illegal_docid", e.to_string()),
        }
    }
}

impl From<DocError> for ApiError {
    fn from(e: DocError) -> ApiError {
        match e {
            DocError::BadRequest(r) => ApiError::bad_request(r),
            DocError::Validation(r) => ApiError::new(StatusCode::BAD_REQUEST, "doc_validation", r),
            DocError::IllegalId(n) => {
                ApiError::new(StatusCode::BAD_REQUEST, "illegal_docid", n.to_string())
            }
            DocError::InvalidDesignDoc(r) => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_design_doc", r)
            }
        }
    }
}

impl From<SelectorError> for ApiError {
    fn from(e: SelectorError) -> ApiError {
        ApiError::bad_request(e.to_string())
    }
}

impl From<tokio::task::JoinError> for ApiError {
    fn from(e: tokio::task::JoinError) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "unknown_error",
            format!("worker task failed: {e}"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = crate::render::json_response(self.status, self.body());
        if let Some(allow) = self.allow {
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_entries() {
        let e = ApiError::from(Error::DbExists);
        assert_eq!(e.status, StatusCode::PRECONDITION_FAILED);
        assert_eq!(e.error, "file_exists");
        let e = ApiError::from(Error::NotFound("Database does not exist."));
        assert_eq!(
            (e.status, e.error.as_ref(), e.reason.as_ref()),
            (
                StatusCode::NOT_FOUND,
                "not_found",
                "Database does not exist."
            )
        );
        let e = ApiError::from_doc_failure(&DocFailure::TooLarge(9), "doc1");
        assert_eq!(
            (e.status, e.error.as_ref(), e.reason.as_ref()),
            (StatusCode::PAYLOAD_TOO_LARGE, "document_too_large", "doc1")
        );
        let e = ApiError::from(NameError::IllegalDbName("A".into()));
        assert_eq!(e.error, "illegal_database_name");
        assert!(e.reason.starts_with("Name: 'A'."));
        let e = ApiError::method_not_allowed("GET,HEAD");
        assert_eq!(
            e.body(),
            r#"{"error":"method_not_allowed","reason":"Only GET,HEAD allowed"}"#
        );
    }
}
