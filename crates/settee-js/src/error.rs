//! The errors of the JavaScript environment, named as CouchDB names them.
//!
//! Owns [`JsError`] (every call can fail with it) and [`ValidateError`]
//! (what `validate_doc_update` can answer besides "allowed"). Invariant:
//! [`JsError::couch_error`] and [`ValidateError::couch_error`] give the
//! `error` name CouchDB puts on the wire for the same failure, so the HTTP
//! layer maps them without knowing JavaScript; `Display` is the longer,
//! actionable text for logs and for `reason` where CouchDB's own is terse.

use std::time::Duration;

/// A failure of a JavaScript call. No variant names the engine underneath.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum JsError {
    /// A design function (or a module it requires) did not compile, or its
    /// source does not evaluate to a function. CouchDB: `compilation_error`.
    #[error("compilation_error: {reason}")]
    Compilation { reason: String },
    /// The design document has no function at the path asked for (no such
    /// view, no map or reduce in it, no such filter, no
    /// `validate_doc_update`). CouchDB: `not_found`.
    #[error("not_found: {reason}")]
    NotFound { reason: String },
    /// A JavaScript exception that ended the call: `name` is the
    /// exception's name (`TypeError`, ...) or the CouchDB error name a
    /// design function threw (`map_runtime_error` for `throw "fatal_error"`,
    /// `invalid_require_path`, ...).
    #[error("{name}: {reason}")]
    Runtime { name: String, reason: String },
    /// A reduce function's output did not shrink enough (CouchDB's rule: with
    /// `reduce_limit` on, an output of more than 4096 characters that is more
    /// than half the size of its input). CouchDB: `reduce_overflow_error`.
    #[error("reduce_overflow_error: {reason}")]
    ReduceOverflow { reason: String },
    /// A function ran longer than the configured timeout and was stopped.
    /// CouchDB reports this as `os_process_error`, "OS process timed out.".
    #[error(
        "a JavaScript function ran longer than {timeout:?} and was stopped{}; \
         look for an endless loop in the design function, or raise the timeout",
        doc_id.as_ref().map(|id| format!(" (document {id:?})")).unwrap_or_default()
    )]
    Timeout {
        timeout: Duration,
        doc_id: Option<String>,
    },
    /// A function needed more memory than one JavaScript runtime may use; the
    /// runtime was discarded and a new one serves the next call.
    #[error(
        "a JavaScript function ran out of memory (limit {limit_bytes} bytes per runtime); \
         the design function builds something too large, or the limit is too low"
    )]
    OutOfMemory { limit_bytes: usize },
    /// What the caller passed is not what the call needs (a design document
    /// without `_id`, a document that is not a JSON object, ...).
    #[error("bad_request: {reason}")]
    InvalidInput { reason: String },
    /// The design document's `language` is not JavaScript.
    #[error("unknown_query_language: design document language {language:?} is not supported (only \"javascript\" and \"coffeescript\")")]
    UnsupportedLanguage { language: String },
    /// The engine is shut down, or the worker running the call failed
    /// (a bug: it is logged, and the worker starts afresh).
    #[error("JavaScript engine unavailable: {reason}")]
    Unavailable { reason: String },
}

impl JsError {
    /// The `error` name CouchDB uses for this failure.
    pub fn couch_error(&self) -> &str {
        match self {
            JsError::Compilation { .. } => "compilation_error",
            JsError::NotFound { .. } => "not_found",
            JsError::Runtime { name, .. } => name,
            JsError::ReduceOverflow { .. } => "reduce_overflow_error",
            JsError::Timeout { .. } => "os_process_error",
            JsError::OutOfMemory { .. } => "os_process_error",
            JsError::InvalidInput { .. } => "bad_request",
            JsError::UnsupportedLanguage { .. } => "unknown_query_language",
            JsError::Unavailable { .. } => "os_process_error",
        }
    }

    /// The `reason` CouchDB gives with [`couch_error`](Self::couch_error).
    pub fn couch_reason(&self) -> String {
        match self {
            JsError::Compilation { reason }
            | JsError::NotFound { reason }
            | JsError::Runtime { reason, .. }
            | JsError::ReduceOverflow { reason }
            | JsError::InvalidInput { reason }
            | JsError::Unavailable { reason } => reason.clone(),
            JsError::Timeout { .. } => "OS process timed out.".to_string(),
            JsError::OutOfMemory { .. } | JsError::UnsupportedLanguage { .. } => self.to_string(),
        }
    }

    /// Builds the error for CouchDB's `["error", name, reason]` form.
    pub(crate) fn from_couch(name: &str, reason: String) -> JsError {
        match name {
            "compilation_error" => JsError::Compilation { reason },
            "not_found" => JsError::NotFound { reason },
            "reduce_overflow_error" => JsError::ReduceOverflow { reason },
            _ => JsError::Runtime {
                name: name.to_string(),
                reason,
            },
        }
    }
}

/// Why `validate_doc_update` refused an update.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidateError {
    /// `throw({forbidden: message})`: CouchDB answers 403 `forbidden`
    /// with the message as the reason, whatever JSON it is.
    #[error("forbidden: {0}")]
    Forbidden(serde_json::Value),
    /// `throw({unauthorized: message})`: CouchDB answers 401 `unauthorized`
    /// (the message, whatever JSON, as the reason).
    #[error("unauthorized: {0}")]
    Unauthorized(serde_json::Value),
    /// Anything else thrown that is not an `Error` (a string, an object with
    /// another key): CouchDB answers 500 `unknown_error` with the message.
    #[error("unknown_error: {0}")]
    Unknown(String),
    /// The function could not be run, or threw an `Error` (a `TypeError`, ...).
    #[error(transparent)]
    Js(#[from] JsError),
}

impl ValidateError {
    /// The `error` name CouchDB uses for this refusal.
    pub fn couch_error(&self) -> &str {
        match self {
            ValidateError::Forbidden(_) => "forbidden",
            ValidateError::Unauthorized(_) => "unauthorized",
            ValidateError::Unknown(_) => "unknown_error",
            ValidateError::Js(e) => e.couch_error(),
        }
    }

    /// The `reason` CouchDB gives with [`couch_error`](Self::couch_error).
    pub fn couch_reason(&self) -> String {
        match self {
            ValidateError::Forbidden(m) | ValidateError::Unauthorized(m) => {
                m.as_str().map_or_else(|| m.to_string(), str::to_string)
            }
            ValidateError::Unknown(m) => m.clone(),
            ValidateError::Js(e) => e.couch_reason(),
        }
    }
}
