//! Why a Mango request failed.
//!
//! Invariant: every variant names one CouchDB error (the `error` member of
//! the answer); settee-http's error table maps each to its status.

use settee_views::error::ViewError;
use thiserror::Error;

#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum MangoError {
    /// 400 with a CouchDB error name from request validation
    /// (`invalid_key`, `invalid_fields`, `bad_arg`, `invalid_index`, …).
    #[error("{reason}")]
    Invalid { error: &'static str, reason: String },
    /// 400 no_usable_index.
    #[error("{0}")]
    NoUsableIndex(String),
    /// 404 not_found (`missing`, `deleted`, …).
    #[error("{0}")]
    NotFound(String),
    /// 503 "required index service unavailable": an index type (`text`,
    /// `nouveau`) that needs a search service this server does not have.
    #[error("{0}")]
    ServiceUnavailable(String),
    /// 500 with CouchDB's error name, where CouchDB answers 500 too.
    #[error("{reason}")]
    Server { error: &'static str, reason: String },
    /// The view layer failed (index updates, reads).
    #[error(transparent)]
    View(#[from] ViewError),
    /// The database layer failed.
    #[error(transparent)]
    Db(#[from] settee_db::Error),
}

impl MangoError {
    pub fn invalid(error: &'static str, reason: impl Into<String>) -> MangoError {
        MangoError::Invalid {
            error,
            reason: reason.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, MangoError>;
