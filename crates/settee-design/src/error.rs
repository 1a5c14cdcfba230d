//! What can go wrong with a design-document function.
//!
//! Owns [`DesignError`]. Invariant: every variant says which CouchDB
//! answer it is (the HTTP layer's error table maps it), and none names the
//! JavaScript engine.

use settee_js::{JsError, ValidateError};

/// Why a write was refused or a filter could not run.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DesignError {
    /// A `validate_doc_update` function refused the write (`forbidden`,
    /// `unauthorized`, anything else thrown) or could not be run
    /// (compilation, a thrown `Error`, timeout): the write is not made.
    #[error("validate_doc_update refused the write: {0}")]
    Refused(ValidateError),
    /// A member of a design document that the request names is not there:
    /// 404 `not_found` with CouchDB's reason (`missing json key: NAME`, or
    /// `json_mismatch` when a member on the way is not an object).
    #[error("not_found: {0}")]
    Missing(String),
    /// A changes filter failed (compilation, an exception, timeout): the
    /// feed fails.
    #[error("changes filter failed: {0}")]
    Filter(JsError),
    /// A render function (show) could not run or threw: CouchDB's answer
    /// is named by the error (`render_error`, `not_found`,
    /// `compilation_error`, `not_acceptable`, or the name thrown).
    #[error("render function failed: {0}")]
    Render(JsError),
    /// Reading the database failed, or the design document is not there
    /// (`NotFound("missing" | "deleted")`).
    #[error(transparent)]
    Db(#[from] settee_db::Error),
}
