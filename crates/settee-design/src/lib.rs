//! The design-document functions of a database, as CouchDB runs them
//! around its document API: `validate_doc_update` on every write, and the
//! JavaScript changes filters (`filter=ddoc/name`, `filter=_view`).
//!
//! [`Design`] is one per server: the JavaScript engine and a cache, per
//! database, of the design documents that have a `validate_doc_update`.
//! [`Design::validators`] answers "which functions must see a write to
//! this database" — `None` for the usual database without any, at the
//! cost of one atomic load and one cache lookup; [`Validators::validate`]
//! runs them for one edit. [`Design::changes_filter`] and
//! [`Design::view_filter`] load a filter for a `_changes` request;
//! [`ChangesFilter::judge`] runs it over a batch of change rows.
//! [`Design::render_ddoc`] and [`Design::show`] run show functions
//! (`render`).
//!
//! Invariants:
//! - **The cache is never stale once a design-document write has been
//!   answered.** An entry is kept with the database's design generation
//!   (`Database::design_generation`, read *before* the design documents
//!   are) and its incarnation (`created_us`); it is used only while the
//!   database reports both unchanged. The engine advances the generation
//!   after writing a design document and before answering the write.
//! - **A write to a database without validate functions runs no
//!   JavaScript and reads no design document** (after the first write
//!   since the design documents last changed).
//! - **Bounded.** The cache holds at most `cache_bytes_max` bytes of
//!   design documents (least recently used first out); JavaScript time and
//!   memory are bounded by the engine (settee-js).
//! - **What JavaScript sees is what CouchDB gives it.** `newDoc`, `oldDoc`
//!   and the filtered documents carry `_id`, `_rev`, `_deleted` and
//!   `_revisions` as CouchDB's `couch_doc:to_json_obj(Doc, [revs])` does
//!   (see [`docs`]); `userCtx` is `{db, name, roles}`.
//! - Nothing here knows HTTP: the security object and the filter's `req`
//!   come from the caller, and errors are [`DesignError`]s.

mod cache;
pub mod docs;
mod error;
mod filter;
mod render;
mod validate;

use std::sync::Arc;

use settee_db::Database;
use settee_js::JsEngine;

pub use error::DesignError;
pub use filter::{ChangesFilter, FilterKind};
pub(crate) use settee_core::name::DESIGN_PREFIX;
pub use validate::{Validators, WriteCtx};

use cache::ValidatorCache;

/// Settings of [`Design`].
#[derive(Debug, Clone)]
pub struct DesignConfig {
    /// Bytes of design documents (their JSON) the validator cache keeps,
    /// over all databases. Default 64 MiB.
    pub cache_bytes_max: u64,
    /// Databases the cache expects to hold (sizes its tables). Default 1024.
    pub cache_dbs_estimate: usize,
}

impl Default for DesignConfig {
    fn default() -> Self {
        DesignConfig {
            cache_bytes_max: 64 << 20,
            cache_dbs_estimate: 1024,
        }
    }
}

/// The design-document functions of every database of a server.
pub struct Design {
    js: Arc<JsEngine>,
    cache: ValidatorCache,
}

impl std::fmt::Debug for Design {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Design").finish_non_exhaustive()
    }
}

impl Design {
    pub fn new(js: Arc<JsEngine>, config: DesignConfig) -> Design {
        Design {
            js,
            cache: ValidatorCache::new(&config),
        }
    }

    /// The JavaScript engine the functions run on.
    pub fn js(&self) -> &Arc<JsEngine> {
        &self.js
    }

    /// The `validate_doc_update` functions a write to `db` must pass, in
    /// design-document id order; `None` when the database has none. Reads
    /// the design documents (a storage read, no JavaScript) only when they
    /// changed since the last call.
    pub fn validators(&self, db: &Database) -> Result<Option<Validators>, DesignError> {
        let funcs = self.cache.get(db)?;
        Ok((!funcs.is_empty()).then(|| Validators::new(self.js.clone(), db.name(), funcs)))
    }
}
