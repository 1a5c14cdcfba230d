//! The engine's error types: [`Error`] for whole operations and
//! [`DocFailure`] for one document of a bulk update.
//!
//! Invariant: every variant names one CouchDB error; the HTTP layer's single
//! table (settee-http) maps each to status + error + reason.

use settee_core::doc::DocError;
use settee_core::name::NameError;
use settee_store::StoreError;
use thiserror::Error;

/// Why an operation failed as a whole.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum Error {
    /// 404 not_found; the reason is CouchDB's ("missing", "deleted", "Database does not exist.").
    #[error("not found: {0}")]
    NotFound(&'static str),
    /// 412 file_exists.
    #[error("The database could not be created, the file already exists.")]
    DbExists,
    /// 400 illegal_database_name / illegal_docid / bad_request.
    #[error(transparent)]
    Name(#[from] NameError),
    /// 400 bad_request.
    #[error("{0}")]
    BadRequest(String),
    /// A single-document call whose document was refused.
    #[error(transparent)]
    Doc(#[from] DocFailure),
    /// 417: an all_or_nothing update in which some documents failed; nothing was written.
    #[error("all_or_nothing update failed; nothing was written")]
    AllOrNothingFailed(Vec<(String, DocFailure)>),
    /// 503: the database is shutting down or its queue is closed.
    #[error("database is shutting down")]
    Closed,
    /// 500: an earlier I/O or fsync error stopped the engine; restart required.
    #[error("storage failed earlier and the engine stopped accepting requests: {0}")]
    Poisoned(String),
    /// 500: the storage engine failed now (the engine is poisoned from here on).
    #[error(transparent)]
    Storage(#[from] StoreError),
    /// 500: a stored record could not be decoded.
    #[error("corrupt record: {0}")]
    Corrupt(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// Why one document of an update was refused; the others are unaffected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DocFailure {
    /// 409 conflict.
    #[error("Document update conflict.")]
    Conflict,
    /// 403 forbidden (validation functions, later).
    #[error("{0}")]
    Forbidden(String),
    /// 400: malformed document.
    #[error(transparent)]
    Bad(#[from] DocError),
    /// 413 document_too_large.
    #[error("Document too large: {0} bytes")]
    TooLarge(usize),
    /// 404 not_found (e.g. deleting a missing local doc).
    #[error("missing")]
    NotFound,
    /// 412 missing_stub: an attachment stub the parent revision lacks.
    #[error("{0}")]
    MissingStub(String),
}
