//! Why a view operation failed.
//!
//! Invariant: every variant names one CouchDB error; settee-http's error
//! table maps each to CouchDB's status, error and reason.

use settee_index::reduce::ReduceError;
use settee_js::JsError;
use thiserror::Error;

#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum ViewError {
    /// 404 not_found with CouchDB's reason (`missing`, `deleted`,
    /// `missing_named_view`, `Database does not exist.`).
    #[error("not found: {0}")]
    NotFound(String),
    /// 400 query_parse_error.
    #[error("{0}")]
    QueryParse(String),
    /// 400 query_parse_error: a key range no row can be in.
    #[error("{0}")]
    KeyRange(String),
    /// 400 bad_request.
    #[error("{0}")]
    BadRequest(String),
    /// 400 invalid_design_doc: a design document the index cannot be made of.
    #[error("{0}")]
    InvalidDesignDoc(String),
    /// The JavaScript engine failed (compilation, timeout, reduce overflow, …).
    #[error(transparent)]
    Js(JsError),
    /// A built-in reduce failed for the whole view.
    #[error(transparent)]
    Reduce(ReduceError),
    /// The database layer failed.
    #[error(transparent)]
    Db(#[from] settee_db::Error),
    /// 500: a stored index record could not be decoded.
    #[error("corrupt index record: {0}")]
    Corrupt(String),
}

pub type Result<T> = std::result::Result<T, ViewError>;

impl From<JsError> for ViewError {
    fn from(e: JsError) -> Self {
        ViewError::Js(e)
    }
}

impl From<ReduceError> for ViewError {
    fn from(e: ReduceError) -> Self {
        ViewError::Reduce(e)
    }
}
