//! Why a search operation failed.
//!
//! Invariant: every variant names one CouchDB error; settee-http's error
//! table maps each to CouchDB's status, error and reason (the mapping is
//! written beside each variant).

use settee_js::JsError;
use thiserror::Error;

#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum SearchError {
    /// 404 not_found (`missing`, `deleted`, `{index} not found.`).
    #[error("not found: {0}")]
    NotFound(String),
    /// 400 query_parse_error: a query argument CouchDB's Nouveau refuses.
    #[error("{0}")]
    QueryParse(String),
    /// 500 query_parser_error: the arguments CouchDB 3.4's Nouveau refuses
    /// with that (misspelt, unmapped) name, hence a 500.
    #[error("{0}")]
    QueryParser(String),
    /// 400 bad_request: a query the Lucene syntax cannot read, a sort
    /// that cannot be made, a bookmark that is not one.
    #[error("{0}")]
    BadRequest(String),
    /// 400 invalid_design_doc.
    #[error("{0}")]
    InvalidDesignDoc(String),
    /// The JavaScript engine failed for a whole batch.
    #[error(transparent)]
    Js(JsError),
    /// The database layer failed.
    #[error(transparent)]
    Db(#[from] settee_db::Error),
    /// 500: the index's files could not be read or written.
    #[error("search index failure: {0}")]
    Index(String),
}

pub type Result<T> = std::result::Result<T, SearchError>;

impl From<JsError> for SearchError {
    fn from(e: JsError) -> Self {
        SearchError::Js(e)
    }
}

impl From<tantivy::TantivyError> for SearchError {
    fn from(e: tantivy::TantivyError) -> Self {
        SearchError::Index(e.to_string())
    }
}

impl From<std::io::Error> for SearchError {
    fn from(e: std::io::Error) -> Self {
        SearchError::Index(e.to_string())
    }
}
