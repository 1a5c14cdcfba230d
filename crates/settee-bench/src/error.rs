//! The bench's error type. A scenario fails with one of these only when it
//! cannot go on (no server, a setup request refused, a check violated);
//! failed requests under load are counted as errors in the results instead.

use std::io;

/// Why a bench run or scenario could not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    #[error("bad URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    #[error("HTTP transport error: {0}")]
    Transport(String),
    #[error("{method} {path}: unexpected status {status}: {body}")]
    Status {
        method: String,
        path: String,
        status: u16,
        body: String,
    },
    #[error("unexpected response from {path}: {reason}")]
    BadResponse { path: String, reason: String },
    #[error("unknown scenario or group {0:?} (try --list)")]
    UnknownScenario(String),
    #[error("cannot start settee: {0}")]
    Spawn(String),
    #[error("embedded engine: {0}")]
    Engine(String),
    #[error("plot {path}: {reason}")]
    Plot { path: String, reason: String },
    #[error("check failed: {0}")]
    Check(String),
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}
