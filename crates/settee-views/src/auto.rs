//! Background index updates (CouchDB's `ken`): indexes that queries have
//! used are brought up to date after writes, so the next query finds them
//! (nearly) current instead of waiting for the whole backlog.
//!
//! Invariants:
//! - One thread per [`crate::Views`]; it wakes every interval, looks at
//!   the indexes in the registry's cache (bounded), and updates those
//!   whose database has moved past them, one index at a time, with the
//!   same updater (and lock) as queries, so an index is never updated
//!   twice at once and a query arriving meanwhile waits for that update.
//! - An index of a database deleted (or created again) since is skipped.
//! - The thread ends once the registry is dropped.

use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use settee_db::Engine;
use settee_js::JsEngine;

use crate::registry::IndexCache;

/// Starts the thread (see the module doc).
pub(crate) fn spawn(
    indexes: Weak<Mutex<IndexCache>>,
    engine: Engine,
    js: Arc<JsEngine>,
    interval: Duration,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("settee-views-auto".into())
        .spawn(move || loop {
            std::thread::sleep(interval);
            let Some(cache) = indexes.upgrade() else {
                return;
            };
            let list: Vec<_> = cache
                .lock()
                .iter()
                .map(|((db, _), index)| (db.clone(), Arc::clone(index)))
                .collect();
            drop(cache);
            for ((name, created), index) in list {
                let Ok(db) = engine.db(&name) else {
                    continue;
                };
                if db.created_us() != created || index.updater_running() {
                    continue;
                }
                let behind = index
                    .space()
                    .snapshot()
                    .map(|snap| index.state(&snap))
                    .map(|state| state.map(|s| s.seq < db.update_seq()));
                if let Ok(Ok(true)) = behind {
                    if let Err(e) = index.update(&db, &js) {
                        tracing::warn!(db = %name, ddoc = %index.spec.ddoc_id, error = %e,
                            "background view update failed");
                    }
                }
            }
        })
        .map(|_| ())
}
