//! settee-replicator: CouchDB replication over HTTP, on settee-client.
//!
//! - [`read`] and [`write`]: the two halves every copy shares (the
//!   replicator, `settee copy`, `ls-docs`, `post-docs`): leaves the target
//!   lacks, read with their revision paths; written with
//!   `new_edits=false` in batches sized at run time.
//! - [`spec`]: a replication's definition (`POST /_replicate` body)
//!   checked, with CouchDB's reasons for what it refuses.
//! - [`rep_id`]: replication ids computed as CouchDB 3 computes them.
//! - [`checkpoint`]: `_local/{id}` replication logs on both ends in
//!   CouchDB's format, and where a resumed replication starts.
//! - [`job`]: one replication run, one-shot or continuous.
//! - [`scheduler`]: the running jobs of a server (`_replicate`'s
//!   continuous jobs, cancel, `_scheduler/jobs`, `_active_tasks`).
//!
//! Nothing here knows the server it runs in: endpoints are URLs, local
//! databases are reached through the server's own URL.

pub mod checkpoint;
pub mod job;
pub mod read;
pub mod rep_id;
pub mod scheduler;
pub mod spec;
pub mod throttle;
pub mod write;

pub use job::{Outcome, Status};
pub use scheduler::Scheduler;
pub use spec::{Local, Spec};

/// Why a replication could not be started or did not finish.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RepError {
    /// The definition is invalid (400 `bad_request`).
    #[error("{0}")]
    BadRequest(String),
    /// An endpoint object without a usable `url` (CouchDB's
    /// `invalid_replication`).
    #[error("{0}")]
    InvalidReplication(String),
    /// A local database name where only URLs are allowed (a `_replicator`
    /// document), as CouchDB 3 refuses it.
    #[error("local_endpoints_not_supported")]
    LocalEndpoint,
    /// A database that does not exist (CouchDB: `db_not_found`, "could not
    /// open URL").
    #[error("could not open {0}")]
    DbNotFound(String),
    /// An endpoint refused the replicator's credentials.
    #[error("{0}")]
    Unauthorized(String),
    /// Something named (a filter's design document, a job) is missing.
    #[error("{0}")]
    NotFound(String),
    /// The job failed (network, server errors, a refused checkpoint).
    #[error("{0}")]
    Failed(String),
}

impl RepError {
    /// A client error on `db`, in the replicator's terms.
    pub fn from_client(e: settee_client::Error, db: &settee_client::Db) -> RepError {
        let shown = {
            let mut s = db.display();
            if !s.ends_with('/') {
                s.push('/');
            }
            s
        };
        match e.status() {
            Some(401 | 403) => {
                RepError::Unauthorized(format!("unauthorized to access or create database {shown}"))
            }
            Some(404) => RepError::DbNotFound(shown),
            _ => RepError::Failed(e.to_string()),
        }
    }
}
