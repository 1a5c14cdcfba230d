//! The ONE error table: every failure a client can see becomes a CouchDB
//! error — an HTTP status plus `{"error": …, "reason": …}`.
//!
//! Invariant: engine errors ([`settee_db::Error`], [`DocFailure`]), core
//! errors ([`DocError`], [`NameError`], [`SelectorError`]) and
//! design-function errors ([`DesignError`]) are mapped here and nowhere
//! else; handlers only return `ApiError`s. Error names and
//! reasons follow CouchDB 3.x's `chttpd:error_info/1`.

use std::borrow::Cow;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use settee_core::doc::DocError;
use settee_core::name::NameError;
use settee_core::selector::SelectorError;
use settee_db::{DocFailure, Error};
use settee_design::DesignError;
use settee_js::{JsError, ValidateError};

/// A CouchDB-shaped error response.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub error: Cow<'static, str>,
    pub reason: Cow<'static, str>,
    /// For 405: the methods the resource allows.
    pub allow: Option<&'static str>,
    /// Whether the body carries a `ref` (CouchDB's reference to the log
    /// entry of an error it reports with its stack: 500s, some 400s).
    pub with_ref: bool,
    /// `reason` is JSON text to send as it is (CouchDB sends the value a
    /// validate function threw as the reason, whatever JSON it is).
    pub reason_is_json: bool,
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
            with_ref: false,
            reason_is_json: false,
        }
    }

    /// An error whose reason is a JSON value: a string as usual, anything
    /// else as the JSON itself.
    pub fn with_json_reason(
        status: StatusCode,
        error: impl Into<Cow<'static, str>>,
        reason: &serde_json::Value,
    ) -> ApiError {
        match reason {
            serde_json::Value::String(s) => ApiError::new(status, error, s.clone()),
            other => {
                let mut e = ApiError::new(status, error, other.to_string());
                e.reason_is_json = true;
                e
            }
        }
    }

    /// Appends `"reason":…` as the reason is sent.
    pub fn push_reason(&self, out: &mut String) {
        out.push_str("\"reason\":");
        if self.reason_is_json {
            out.push_str(&self.reason);
        } else {
            crate::render::push_str(out, &self.reason);
        }
    }

    /// The same error with a `ref` member, as CouchDB sends with errors it
    /// logs with their stack.
    pub fn with_ref(mut self) -> ApiError {
        self.with_ref = true;
        self
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

    /// 408: a request body's next bytes did not arrive in time.
    pub fn body_timeout() -> ApiError {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "timed out reading the request body",
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
            with_ref: false,
            reason_is_json: false,
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
            DocFailure::MissingStub(m) => {
                ApiError::new(StatusCode::PRECONDITION_FAILED, "missing_stub", m.clone())
            }
        }
    }

    /// `{"error":…,"reason":…}` text.
    pub fn body(&self) -> String {
        let mut out = String::with_capacity(48 + self.reason.len());
        out.push_str("{\"error\":");
        crate::render::push_str(&mut out, &self.error);
        out.push(',');
        self.push_reason(&mut out);
        if self.with_ref {
            // A number naming the error, as CouchDB's does (there, a hash of
            // the stack trace it logs).
            out.push_str(",\"ref\":");
            let h = xxhash_rust::xxh3::xxh3_64(self.reason.as_bytes()) as u32;
            crate::render::push_u64(&mut out, u64::from(h));
        }
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
            NameError::EmptyPartition | NameError::PartitionUnderscore => {
                ApiError::new(StatusCode::BAD_REQUEST, "illegal_partition", e.to_string())
            }
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

/// A JavaScript failure as CouchDB reports it.
pub fn js_error(e: &settee_js::JsError) -> ApiError {
    use settee_js::JsError as J;
    if let J::UnsupportedLanguage { language } = e {
        return ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "unknown_query_language",
            language.clone(),
        )
        .with_ref();
    }
    let status = match e {
        J::Compilation { .. } | J::InvalidInput { .. } | J::UnsupportedLanguage { .. } => {
            StatusCode::BAD_REQUEST
        }
        J::NotFound { .. } => StatusCode::NOT_FOUND,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(status, e.couch_error().to_string(), e.couch_reason())
}

impl From<settee_views::ViewError> for ApiError {
    fn from(e: settee_views::ViewError) -> ApiError {
        use settee_views::ViewError as V;
        match e {
            V::NotFound(r) => ApiError::not_found(r),
            V::QueryParse(r) => ApiError::query_parse(r),
            V::KeyRange(r) => ApiError::query_parse(r).with_ref(),
            V::BadRequest(r) => ApiError::bad_request(r),
            V::InvalidDesignDoc(r) => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_design_doc", r)
            }
            V::Js(j) => js_error(&j),
            V::Reduce(r) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                r.couch_error().to_string(),
                r.couch_reason(),
            )
            .with_ref(),
            V::Db(d) => ApiError::from(d),
            V::Corrupt(r) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt_record", r),
            other => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "unknown_error",
                other.to_string(),
            ),
        }
    }
}

impl From<settee_search::SearchError> for ApiError {
    fn from(e: settee_search::SearchError) -> ApiError {
        use settee_search::SearchError as S;
        match e {
            S::NotFound(r) => ApiError::not_found(r),
            S::QueryParse(r) => ApiError::query_parse(r),
            // CouchDB 3.4 throws these with an error name its table does
            // not know: 500 with that name.
            S::QueryParser(r) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "query_parser_error", r)
            }
            S::BadRequest(r) => ApiError::bad_request(r),
            S::InvalidDesignDoc(r) => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_design_doc", r)
            }
            S::Js(j) => js_error(&j),
            S::Db(d) => ApiError::from(d),
            other => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "search_error",
                other.to_string(),
            )
            .with_ref(),
        }
    }
}

impl From<settee_auth::AuthError> for ApiError {
    fn from(e: settee_auth::AuthError) -> ApiError {
        let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        ApiError::new(status, e.error().to_string(), e.reason().to_string())
    }
}

impl From<settee_auth::security::SecurityError> for ApiError {
    /// An invalid `_security` body: 400 with what is wrong (CouchDB 3.4
    /// answers 500 `no_majority`, its cluster failing the write on every
    /// shard; listed in tests/conformance/DIFFERENCES.md).
    fn from(e: settee_auth::security::SecurityError) -> ApiError {
        ApiError::bad_request(e.to_string())
    }
}

impl From<settee_cluster::ClusterError> for ApiError {
    fn from(e: settee_cluster::ClusterError) -> ApiError {
        use settee_cluster::ClusterError as C;
        match e {
            C::ShardMapExists(_) => ApiError::new(
                StatusCode::PRECONDITION_FAILED,
                "file_exists",
                "The database could not be created, the file already exists.",
            ),
            C::NoShardMap(_) => ApiError::not_found("Database does not exist."),
            C::InvalidQ { .. }
            | C::InvalidN { .. }
            | C::NoNodes
            | C::InvalidNodeName { .. }
            | C::NodeNotAdded(_) => ApiError::bad_request(e.to_string()),
            C::LeaseLost(_)
            | C::Unreachable { .. }
            | C::Etcd { .. }
            | C::Timeout { .. }
            | C::WatchEnded(_)
            | C::ShardMapConflict { .. }
            | C::SettingsConflict { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                e.to_string(),
            ),
            _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "error", e.to_string()),
        }
    }
}

impl From<settee_replicator::RepError> for ApiError {
    fn from(e: settee_replicator::RepError) -> ApiError {
        use settee_replicator::RepError as R;
        match e {
            R::BadRequest(r) => ApiError::bad_request(r),
            R::InvalidReplication(r) => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_replication", r)
            }
            R::LocalEndpoint => ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "local_endpoints_not_supported",
            ),
            // CouchDB answers a missing endpoint database with a 500.
            R::DbNotFound(url) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "db_not_found",
                format!("could not open {url}"),
            ),
            R::Unauthorized(r) => ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", r),
            R::NotFound(r) => ApiError::not_found(r),
            R::Failed(r) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "error", r),
        }
    }
}

impl From<settee_mango::error::MangoError> for ApiError {
    fn from(e: settee_mango::error::MangoError) -> ApiError {
        use settee_mango::error::MangoError as M;
        match e {
            M::Invalid { error, reason } => ApiError::new(StatusCode::BAD_REQUEST, error, reason),
            M::NoUsableIndex(r) => ApiError::new(StatusCode::BAD_REQUEST, "no_usable_index", r),
            M::NotFound(r) => ApiError::not_found(r),
            M::ServiceUnavailable(r) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "required index service unavailable",
                r,
            ),
            M::Server { error, reason } => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error, reason).with_ref()
            }
            M::View(v) => ApiError::from(v),
            M::Db(d) => ApiError::from(d),
            other => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "unknown_error",
                other.to_string(),
            ),
        }
    }
}

/// What CouchDB 3.4 answers when a `validate_doc_update` function cannot
/// be run or throws an `Error`: 404 for a function the design document
/// lacks (an empty one), else 500 with the error's name (CouchDB's
/// `reason` for a thrown `Error` is the useless `{[]}`; Settee's is the
/// exception's message).
fn validate_js_error(e: &JsError) -> ApiError {
    let status = match e {
        JsError::NotFound { .. } => StatusCode::NOT_FOUND,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(
        status,
        e.couch_error().to_string(),
        e.couch_reason().to_string(),
    )
}

/// A show (render) function's failure as CouchDB answers it: a thrown
/// `not_found` is "document not found" (404), `not_acceptable` is 406,
/// anything else 500 with the name thrown.
fn render_js_error(e: &JsError) -> ApiError {
    match e {
        JsError::NotFound { .. } => ApiError::not_found("document not found"),
        JsError::UnsupportedLanguage { language } => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "unknown_query_language",
            language.clone(),
        ),
        JsError::Runtime { name, reason } if name == "not_acceptable" => {
            ApiError::new(StatusCode::NOT_ACCEPTABLE, "not_acceptable", reason.clone())
        }
        other => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            other.couch_error().to_string(),
            other.couch_reason(),
        ),
    }
}

impl From<DesignError> for ApiError {
    fn from(e: DesignError) -> ApiError {
        match e {
            DesignError::Refused(ValidateError::Forbidden(m)) => {
                ApiError::with_json_reason(StatusCode::FORBIDDEN, "forbidden", &m)
            }
            DesignError::Refused(ValidateError::Unauthorized(m)) => {
                ApiError::with_json_reason(StatusCode::UNAUTHORIZED, "unauthorized", &m)
            }
            // A thrown object CouchDB's handler has no clause for.
            DesignError::Refused(ValidateError::Unknown(m)) if m == "function_clause" => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "unknown_error", m).with_ref()
            }
            DesignError::Refused(ValidateError::Unknown(m)) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "unknown_error", m)
            }
            DesignError::Refused(ValidateError::Js(e)) => validate_js_error(&e),
            DesignError::Missing(m) => ApiError::not_found(m),
            // CouchDB answers every failure of a filter function 500
            // (with an Erlang stack trace as its reason), named `error`.
            DesignError::Filter(e) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "error",
                e.couch_reason().to_string(),
            ),
            DesignError::Render(e) => render_js_error(&e),
            DesignError::Db(e) => ApiError::from(e),
            other => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "unknown_error",
                other.to_string(),
            ),
        }
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
        let e = ApiError::from(DesignError::Refused(ValidateError::Forbidden("no".into())));
        assert_eq!(
            (e.status, e.body()),
            (
                StatusCode::FORBIDDEN,
                r#"{"error":"forbidden","reason":"no"}"#.to_string()
            )
        );
        let e = ApiError::from(DesignError::Refused(ValidateError::Unauthorized(
            "who".into(),
        )));
        assert_eq!(
            (e.status, e.error.as_ref()),
            (StatusCode::UNAUTHORIZED, "unauthorized")
        );
        let e = ApiError::from(DesignError::Refused(ValidateError::Unknown("str".into())));
        assert_eq!(
            (e.status, e.error.as_ref()),
            (StatusCode::INTERNAL_SERVER_ERROR, "unknown_error")
        );
        let missing = JsError::NotFound {
            reason: "missing validate_doc_update function".into(),
        };
        let e = ApiError::from(DesignError::Refused(ValidateError::Js(missing.clone())));
        assert_eq!(
            (e.status, e.error.as_ref()),
            (StatusCode::NOT_FOUND, "not_found")
        );
        let e = ApiError::from(DesignError::Filter(missing));
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        let e = ApiError::from(DesignError::Missing("missing json key: f".into()));
        assert_eq!(
            (e.status, e.reason.as_ref()),
            (StatusCode::NOT_FOUND, "missing json key: f")
        );
        let e = ApiError::method_not_allowed("GET,HEAD");
        assert_eq!(
            e.body(),
            r#"{"error":"method_not_allowed","reason":"Only GET,HEAD allowed"}"#
        );
    }
}
