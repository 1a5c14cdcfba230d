//! The engine-wide poison flag.
//!
//! Invariant: after the first storage error, every later operation of every
//! database fails with [`Error::Poisoned`]; nothing is retried. All databases
//! share one store (and one write-ahead log), so one failed fsync taints all.

use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};

#[derive(Debug, Clone, Default)]
pub struct Poison(Arc<OnceLock<String>>);

impl Poison {
    pub fn check(&self) -> Result<()> {
        match self.0.get() {
            Some(reason) => Err(Error::Poisoned(reason.clone())),
            None => Ok(()),
        }
    }

    /// Records the first failure; later ones keep the first reason.
    pub fn set(&self, reason: String) {
        if self.0.set(reason.clone()).is_ok() {
            tracing::error!(%reason, "storage failure: the engine is poisoned and refuses all further requests");
        }
    }

    pub fn is_poisoned(&self) -> bool {
        self.0.get().is_some()
    }

    /// Runs a storage call, poisoning on failure.
    pub fn guard<T>(&self, r: settee_store::Result<T>) -> Result<T> {
        r.map_err(|e| {
            self.set(e.to_string());
            Error::Storage(e)
        })
    }
}
