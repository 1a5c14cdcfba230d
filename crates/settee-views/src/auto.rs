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
//! - The thread ends once the registry is dropped, or at once when its
//!   [`AutoUpdate`] is dropped (which waits for it: a process about to
//!   exit stops it first, so no index write runs while the process ends).

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use settee_db::Engine;
use settee_js::JsEngine;

use crate::registry::IndexCache;

/// The running thread; dropping it stops the thread and waits for it (an
/// index update already under way is finished first).
pub(crate) struct AutoUpdate {
    stop: Arc<Stop>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Stop {
    /// Waits up to `interval`; true once stopped.
    fn wait(&self, interval: Duration) -> bool {
        let mut stopped = self.stopped.lock();
        if !*stopped {
            self.wake.wait_for(&mut stopped, interval);
        }
        *stopped
    }

    fn is_set(&self) -> bool {
        *self.stopped.lock()
    }
}

impl Drop for AutoUpdate {
    fn drop(&mut self) {
        *self.stop.stopped.lock() = true;
        self.stop.wake.notify_all();
        if let Some(t) = self.thread.take() {
            // A panicked thread has nothing left to stop.
            let _ = t.join();
        }
    }
}

/// Starts the thread (see the module doc).
pub(crate) fn spawn(
    indexes: Weak<Mutex<IndexCache>>,
    engine: Engine,
    js: Arc<JsEngine>,
    interval: Duration,
) -> std::io::Result<AutoUpdate> {
    let stop = Arc::new(Stop::default());
    let flag = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("settee-views-auto".into())
        .spawn(move || loop {
            if flag.wait(interval) {
                return;
            }
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
                if flag.is_set() {
                    return;
                }
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
        })?;
    Ok(AutoUpdate {
        stop,
        thread: Some(thread),
    })
}
