//! Automatic purge of deleted documents (issue 41; docs/adr/0015-auto-purge.md):
//! CouchDB's `_auto_purge` settings and a background purger that removes
//! tombstones older than a TTL through the database's normal purge path,
//! never before the indexes and replications reading the database have
//! seen the deletion.
//!
//! - [`ttl`] — `{num}_{unit}` / `infinity` as CouchDB writes them.
//! - [`props`] — the `PUT /db/_auto_purge` body: validation, stored TTL.
//! - [`purger`] — the thread, its settings, counters and task status; the
//!   [`purger::Holds`] seam through which the server says how far its
//!   indexes and replications have read.
//!
//! When a change was made comes from the engine's time → sequence map
//! (`settee_db::time_seq`); the purged records' space is reclaimed by the
//! store's own compactions (files dense with deletions are compacted
//! first; see settee-store).

pub mod props;
pub mod purger;
pub mod ttl;

pub use purger::{Hold, Holds, Purger, Settings, Stats};
pub use ttl::Ttl;
