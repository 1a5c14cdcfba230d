//! Background updates of search indexes (as `settee_views::auto` does for
//! views, CouchDB's `ken`): the indexes queries have opened are brought up
//! to date after writes and purges, so the next query (or one with
//! `update=false`/`stale=ok`) finds them (nearly) current instead of
//! waiting for the whole backlog.
//!
//! Invariants:
//! - One thread per [`crate::Search`]; it wakes every interval, looks at
//!   the open indexes (bounded by [`crate::OPEN_MAX`]), and updates those
//!   whose database had already moved past them at the previous look (so
//!   a backlog waits one interval at least, and a query right after a
//!   write with `stale=ok` still sees the index as it was, as CouchDB's
//!   delayed updates answer), one index at a time, through
//!   [`SearchIndex::update`] (the same lock as queries), so an index is
//!   never updated twice at once and a query arriving meanwhile waits.
//! - An index is updated only while its design document still defines it
//!   (same signature); one of a database deleted (or created again) since
//!   is skipped. An update that fails is logged and tried again next time;
//!   it changes nothing a query would not have changed.
//! - The thread ends once the index cache is dropped, or at once when its
//!   [`AutoUpdate`] is dropped (which waits for it: a process about to
//!   exit stops it first, so no index write runs while the process ends).

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use settee_db::Engine;
use settee_js::JsEngine;

use crate::{js_ddoc_of, read_ddoc, IndexSpec, OpenIndexes, SearchIndex};

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
    indexes: Weak<Mutex<OpenIndexes>>,
    engine: Engine,
    js: Arc<JsEngine>,
    interval: Duration,
) -> std::io::Result<AutoUpdate> {
    let stop = Arc::new(Stop::default());
    let flag = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("settee-search-auto".into())
        .spawn(move || {
            // The indexes found behind at the previous look.
            let mut was_behind: HashSet<Key> = HashSet::new();
            loop {
                if flag.wait(interval) {
                    return;
                }
                let Some(cache) = indexes.upgrade() else {
                    return;
                };
                let list: Vec<_> = cache
                    .lock()
                    .iter()
                    .map(|(key, index)| (key.clone(), Arc::clone(index)))
                    .collect();
                drop(cache);
                let mut behind_now = HashSet::new();
                for (key, index) in list {
                    if flag.is_set() {
                        return;
                    }
                    let ((name, created), _) = &key;
                    match look(&engine, name, *created, &index) {
                        Look::Current => {}
                        Look::Behind(db) if was_behind.contains(&key) => {
                            if let Err(e) = catch_up(&db, &js, &index) {
                                tracing::warn!(db = %name, ddoc = %index.spec.ddoc_id,
                                    index = %index.spec.name, error = %e,
                                    "background search index update failed");
                            }
                        }
                        Look::Behind(_) => {
                            behind_now.insert(key);
                        }
                    }
                }
                was_behind = behind_now;
            }
        })?;
    Ok(AutoUpdate {
        stop,
        thread: Some(thread),
    })
}

/// An open index's key in the cache: (database incarnation, signature).
type Key = ((String, u64), [u8; 16]);

/// Whether an index needs an update.
enum Look {
    /// Up to date, being updated, or of a database that is gone.
    Current,
    /// Its database (open) has writes or purges the index has not seen.
    Behind(settee_db::Database),
}

/// Looks at `index` of database `name` (created at `created`).
fn look(engine: &Engine, name: &str, created: u64, index: &SearchIndex) -> Look {
    let Ok(db) = engine.db(name) else {
        return Look::Current;
    };
    if db.created_us() != created || index.updater_running() {
        return Look::Current;
    }
    let meta = index.meta();
    let (update_seq, purge_seq) = db.seqs();
    if meta.update_seq >= update_seq && meta.purge_seq >= purge_seq {
        return Look::Current;
    }
    Look::Behind(db)
}

/// Updates `index` of `db` if its design document still defines it.
fn catch_up(db: &settee_db::Database, js: &JsEngine, index: &SearchIndex) -> crate::Result<()> {
    let spec = &index.spec;
    let Ok(ddoc) = read_ddoc(db, &spec.ddoc_id) else {
        // The design document is gone: its indexes wait for cleanup.
        return Ok(());
    };
    match IndexSpec::of(&ddoc, spec.flavor, &spec.name, db.partitioned()) {
        Ok(now) if now.signature == spec.signature => {
            index.update(db, js, &js_ddoc_of(spec, &ddoc)?)?;
        }
        // Edited or removed since: the old index is not brought along.
        _ => {}
    }
    Ok(())
}
