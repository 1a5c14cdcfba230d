//! The engine's configuration and its defaults.
//!
//! Owns [`JsConfig`]. Invariant: every limit the engine keeps is here, with a
//! finite default (workers, per-call timeout, memory per runtime, queued
//! calls, cached design documents, log lines per call); `JsEngine::new`
//! clamps zeros up to one so that no setting can make the pool unusable.

use std::time::Duration;

/// Settings of a [`JsEngine`](crate::JsEngine).
#[derive(Debug, Clone)]
pub struct JsConfig {
    /// Worker threads, each with its own JavaScript runtime. Default: one
    /// per CPU (`std::thread::available_parallelism`).
    pub workers: usize,
    /// How long one function call may run before it is stopped: per
    /// document for map and filter calls, per call for reduce and validate.
    /// Default 5 s, CouchDB's `os_process_timeout`.
    pub timeout: Duration,
    /// Memory one runtime may allocate (all the design documents cached in
    /// it together). Default 64 MiB, couchjs's default.
    pub memory_limit_bytes: usize,
    /// CouchDB's `query_server_config/reduce_limit`: refuse reduce output
    /// that does not shrink (`reduce_overflow_error`). Default true.
    pub reduce_limit: bool,
    /// Calls waiting for a worker; a caller past this waits (the blocking
    /// API blocks, the async API awaits). Default 1024.
    pub queue_max: usize,
    /// Design documents each worker keeps compiled, least recently used
    /// evicted first. Default 64.
    pub ddoc_cache_max: usize,
    /// `log()` lines kept per call; more are counted and dropped. Default 1000.
    pub log_lines_max: usize,
}

impl Default for JsConfig {
    fn default() -> Self {
        JsConfig {
            workers: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            timeout: Duration::from_secs(5),
            memory_limit_bytes: 64 << 20,
            reduce_limit: true,
            queue_max: 1024,
            ddoc_cache_max: 64,
            log_lines_max: 1000,
        }
    }
}
