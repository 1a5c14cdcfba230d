//! Counters of what the engine's workers did.
//!
//! Owns [`Stats`] (the shared atomic counters the workers bump) and its
//! snapshot [`JsStats`]. Invariant: counters only grow; a snapshot is a set
//! of relaxed loads, each exact on its own, not a consistent cut.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub calls: AtomicU64,
    pub functions_compiled: AtomicU64,
    pub ddoc_cache_hits: AtomicU64,
    pub ddoc_cache_misses: AtomicU64,
    pub ddoc_cache_evictions: AtomicU64,
    pub timeouts: AtomicU64,
    pub out_of_memory: AtomicU64,
    pub runtimes_started: AtomicU64,
    pub worker_panics: AtomicU64,
}

/// A snapshot of the engine's counters, summed over all workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JsStats {
    /// Calls that reached a worker.
    pub calls: u64,
    /// Design functions (and views used as filters) compiled.
    pub functions_compiled: u64,
    /// Calls whose design document a worker had cached.
    pub ddoc_cache_hits: u64,
    /// Calls whose design document a worker had to load (a new context).
    pub ddoc_cache_misses: u64,
    /// Design documents dropped from a worker's cache to respect its bound.
    pub ddoc_cache_evictions: u64,
    /// Calls stopped by the timeout.
    pub timeouts: u64,
    /// Calls that ran out of memory (each discarded its runtime).
    pub out_of_memory: u64,
    /// Runtimes created (one per worker at its first call, one per restart).
    pub runtimes_started: u64,
    /// Calls whose worker panicked (a bug; the worker went on with a new runtime).
    pub worker_panics: u64,
}

impl Stats {
    pub(crate) fn snapshot(&self) -> JsStats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        JsStats {
            calls: l(&self.calls),
            functions_compiled: l(&self.functions_compiled),
            ddoc_cache_hits: l(&self.ddoc_cache_hits),
            ddoc_cache_misses: l(&self.ddoc_cache_misses),
            ddoc_cache_evictions: l(&self.ddoc_cache_evictions),
            timeouts: l(&self.timeouts),
            out_of_memory: l(&self.out_of_memory),
            runtimes_started: l(&self.runtimes_started),
            worker_panics: l(&self.worker_panics),
        }
    }
}
